// Test and benchmark helper: a throwaway ClickHouse server (Debian's clickhouse-server) on
// loopback, its data in a temporary folder, its HTTP interface on a port the kernel picked
// (found from the process's listening socket, so no port is guessed). Killed and removed on
// destruction. No Catch2 here: a server that does not start throws, with its stderr.
#pragma once

#include "support/fixtures.hpp"
#include "support/spawn.hpp"

#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>

#include <unistd.h>

namespace test_support {

inline constexpr const char* clickhouse_server_bin = "/usr/sbin/clickhouse-server";

// The TCP port `pid` listens on (IPv4), if any: its socket inodes matched in /proc/net/tcp.
inline std::optional<std::uint16_t> listening_port(int pid) {
    std::set<std::string> inodes;
    std::error_code ec;
    for (const auto& fd :
         std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/fd", ec)) {
        const auto target = std::filesystem::read_symlink(fd.path(), ec).string();
        if (target.starts_with("socket:["))
            inodes.insert(target.substr(8, target.size() - 9));
    }
    std::ifstream tcp("/proc/net/tcp");
    std::string line;
    std::getline(tcp, line); // the header
    while (std::getline(tcp, line)) {
        std::istringstream in(line);
        std::string slot, local, remote, state, queues, timer, retr, uid, timeout, inode;
        in >> slot >> local >> remote >> state >> queues >> timer >> retr >> uid >> timeout >>
            inode;
        if (state == "0A" && inodes.count(inode))
            return static_cast<std::uint16_t>(
                std::stoul(local.substr(local.find(':') + 1), nullptr, 16));
    }
    return std::nullopt;
}

struct clickhouse_proc {
    temp_dir dir;
    std::unique_ptr<spawned> proc;
    std::uint16_t port = 0;

    // `port_wanted`: 0 for one the kernel picks (a restart passes the port it had).
    explicit clickhouse_proc(std::uint16_t port_wanted = 0) { start(port_wanted); }

    std::string url() const { return "http://127.0.0.1:" + std::to_string(port); }

    void start(std::uint16_t port_wanted) {
        const auto d = dir.path.string();
        std::filesystem::create_directories(dir.path / "data");
        std::filesystem::create_directories(dir.path / "tmp");
        std::ofstream(dir.path / "config.xml")
            << "<?xml version=\"1.0\"?><yandex><logger><level>warning</level><log>" << d
            << "/server.log</log><errorlog>" << d
            << "/error.log</errorlog><console>0</console></logger>"
            << "<http_port>" << port_wanted << "</http_port><listen_host>127.0.0.1</listen_host>"
            << "<path>" << d << "/data/</path><tmp_path>" << d << "/tmp/</tmp_path>"
            << "<user_files_path>" << d << "/files/</user_files_path>"
            << "<users_config>" << d << "/users.xml</users_config>"
            << "<default_profile>default</default_profile><default_database>default"
               "</default_database><mark_cache_size>5368709</mark_cache_size></yandex>\n";
        std::ofstream(dir.path / "users.xml")
            << "<?xml version=\"1.0\"?><yandex><profiles><default/></profiles><users><default>"
               "<password></password><networks><ip>127.0.0.1</ip></networks><profile>default"
               "</profile><quota>default</quota></default></users><quotas><default/></quotas>"
               "</yandex>\n";
        proc = std::make_unique<spawned>(
            clickhouse_server_bin, std::vector<std::string>{"--config-file=" + d + "/config.xml"});
        const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
        std::optional<std::uint16_t> found;
        while (!(found = listening_port(proc->pid())) && std::chrono::steady_clock::now() < until &&
               process_exists(proc->pid()))
            std::this_thread::sleep_for(std::chrono::milliseconds(50));
        if (!found)
            throw std::runtime_error("clickhouse-server did not start: " + proc->stderr_text());
        port = *found;
    }

    // Kills the server (its data stays) and starts it again on the same port.
    void stop() { proc.reset(); }
    void restart() { start(port); }
};

} // namespace test_support
