// Reads committed fixtures (real captures) from test/<area>/fixtures/.
#pragma once

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>

namespace test_support {

inline std::string fixture(const std::string& relative) {
    std::ifstream in(std::string(PERFWIRE_TEST_DIR) + "/" + relative, std::ios::binary);
    if (!in)
        throw std::runtime_error("missing fixture " + relative);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

// A file's bytes ("" when it cannot be opened), a block at a time: byte by byte
// (istreambuf_iterator) a sanitized Debug build takes most of a minute over an agent's executable.
inline std::string file_bytes(const std::filesystem::path& path) {
    std::ifstream in(path, std::ios::binary);
    std::string out;
    std::string block(1 << 20, '\0');
    while (in.read(block.data(), static_cast<std::streamsize>(block.size())) || in.gcount() > 0)
        out.append(block.data(), static_cast<std::size_t>(in.gcount()));
    return out;
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

} // namespace test_support
