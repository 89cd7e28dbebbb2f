// Reads committed fixtures (real captures) from test/<area>/fixtures/.
#pragma once

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>

namespace test_support {

inline std::string fixture(const std::string& relative) {
    std::ifstream in(std::string(PERFWIRE_TEST_DIR) + "/" + relative, std::ios::binary);
    if (!in)
        throw std::runtime_error("missing fixture " + relative);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

// A private folder under the system temp directory, removed with everything in it.
struct temp_dir {
    std::filesystem::path path;
    temp_dir() {
        std::string t = (std::filesystem::temp_directory_path() / "perfwire-test-XXXXXX").string();
        if (!::mkdtemp(t.data()))
            throw std::runtime_error("mkdtemp failed");
        path = t;
    }
    ~temp_dir() {
        std::error_code ec;
        std::filesystem::remove_all(path, ec);
    }
    temp_dir(const temp_dir&) = delete;
    temp_dir& operator=(const temp_dir&) = delete;
};

// A toolchain (prefix() for --toolchain-prefix) whose readelf, once started, waits until the
// test lets it go (at the latest when this is destroyed): a symbol table held up as a large
// one is, for as long as a test needs. addr2line and objdump are the system's.
struct held_readelf {
    temp_dir dir;
    std::filesystem::path started = dir.path / "started", release = dir.path / "release";
    held_readelf() {
        {
            std::ofstream script(dir.path / "held-readelf");
            script << "#!/bin/sh\n: > '" << started.string() << "'\nwhile [ ! -e '"
                   << release.string() << "' ]; do sleep 0.05; done\nexec readelf \"$@\"\n";
        }
        std::filesystem::permissions(dir.path / "held-readelf", std::filesystem::perms::owner_all);
        std::filesystem::create_symlink("/usr/bin/addr2line", dir.path / "held-addr2line");
        std::filesystem::create_symlink("/usr/bin/objdump", dir.path / "held-objdump");
    }
    ~held_readelf() { let_go(); }
    held_readelf(const held_readelf&) = delete;
    held_readelf& operator=(const held_readelf&) = delete;
    std::string prefix() const { return (dir.path / "held-").string(); }
    // Whether a readelf is waiting (or has waited), looked at until `timeout`.
    bool holding(std::chrono::milliseconds timeout) const {
        const auto until = std::chrono::steady_clock::now() + timeout;
        while (!std::filesystem::exists(started) && std::chrono::steady_clock::now() < until)
            std::this_thread::sleep_for(std::chrono::milliseconds(20));
        return std::filesystem::exists(started);
    }
    bool let_go_yet() const { return std::filesystem::exists(release); }
    void let_go() const { std::ofstream{release}; }
};

} // namespace test_support
