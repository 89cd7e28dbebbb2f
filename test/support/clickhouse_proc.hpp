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
#include <vector>

#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

namespace test_support {

inline constexpr const char* clickhouse_server_bin = "/usr/sbin/clickhouse-server";

// The TCP ports `pid` listens on (IPv4): its socket inodes matched in /proc/net/tcp.
inline std::vector<std::uint16_t> listening_ports(int pid) {
    std::set<std::string> inodes;
    std::error_code ec;
    for (const auto& fd :
         std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/fd", ec)) {
        const auto target = std::filesystem::read_symlink(fd.path(), ec).string();
        if (target.starts_with("socket:["))
            inodes.insert(target.substr(8, target.size() - 9));
    }
    std::vector<std::uint16_t> ports;
    std::ifstream tcp("/proc/net/tcp");
    std::string line;
    std::getline(tcp, line); // the header
    while (std::getline(tcp, line)) {
        std::istringstream in(line);
        std::string slot, local, remote, state, queues, timer, retr, uid, timeout, inode;
        in >> slot >> local >> remote >> state >> queues >> timer >> retr >> uid >> timeout >>
            inode;
        if (state == "0A" && inodes.count(inode))
            ports.push_back(static_cast<std::uint16_t>(
                std::stoul(local.substr(local.find(':') + 1), nullptr, 16)));
    }
    return ports;
}

// Whether the server on this loopback port is ClickHouse's HTTP interface (its /ping is
// answered 200), not its native protocol.
inline bool speaks_http(std::uint16_t port) {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0)
        return false;
    timeval limit{2, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof limit);
    sockaddr_in to{};
    to.sin_family = AF_INET;
    to.sin_port = htons(port);
    to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    std::string answer;
    if (::connect(fd, reinterpret_cast<const sockaddr*>(&to), sizeof to) == 0) {
        const std::string ask = "GET /ping HTTP/1.0\r\n\r\n";
        if (::send(fd, ask.data(), ask.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(ask.size())) {
            char buf[16];
            const auto n = ::recv(fd, buf, sizeof buf, 0);
            if (n > 0)
                answer.assign(buf, static_cast<std::size_t>(n));
        }
    }
    ::close(fd);
    // (the native port answers an HTTP request too, with an error saying it is not HTTP)
    return answer.starts_with("HTTP/1.") && answer.substr(9, 3) == "200";
}

// A throwaway clickhouse-server on loopback: its data in a temporary folder, its HTTP port (and,
// asked for, its native TCP port, which a Distributed table's shards are reached on) picked by
// the kernel.
struct clickhouse_proc {
    temp_dir dir;
    std::unique_ptr<spawned> proc;
    std::uint16_t port = 0, tcp_port = 0;

    // `port_wanted`: 0 for one the kernel picks (a restart passes the port it had). `native`:
    // also listen on a native TCP port.
    explicit clickhouse_proc(std::uint16_t port_wanted = 0, bool native = false)
        : native_(native) {
        start(port_wanted);
    }

    std::string url() const { return "http://127.0.0.1:" + std::to_string(port); }

    void start(std::uint16_t port_wanted) {
        std::filesystem::create_directories(dir.path / "data");
        std::filesystem::create_directories(dir.path / "tmp");
        write_config(port_wanted, tcp_port);
        std::ofstream(dir.path / "users.xml")
            << "<?xml version=\"1.0\"?><yandex><profiles><default/></profiles><users><default>"
               "<password></password><networks><ip>127.0.0.1</ip></networks><profile>default"
               "</profile><quota>default</quota></default></users><quotas><default/></quotas>"
               "</yandex>\n";
        const auto d = dir.path.string();
        proc = std::make_unique<spawned>(
            clickhouse_server_bin, std::vector<std::string>{"--config-file=" + d + "/config.xml"});
        const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
        const std::size_t wanted = native_ ? 2 : 1;
        std::vector<std::uint16_t> found;
        while ((found = listening_ports(proc->pid())).size() < wanted &&
               std::chrono::steady_clock::now() < until && process_exists(proc->pid()))
            std::this_thread::sleep_for(std::chrono::milliseconds(50));
        if (found.size() < wanted)
            throw std::runtime_error("clickhouse-server did not start: " + proc->stderr_text());
        for (const auto p : found)
            (found.size() == 1 || speaks_http(p) ? port : tcp_port) = p;
    }

    // More configuration (a <remote_servers> section): the running server reads it again.
    void configure(std::string extra) {
        extra_ = std::move(extra);
        write_config(port, tcp_port);
    }

    // Kills the server (its data stays) and starts it again on the same port.
    void stop() { proc.reset(); }
    void restart() { start(port); }

private:
    void write_config(std::uint16_t http, std::uint16_t native) {
        const auto d = dir.path.string();
        std::ofstream(dir.path / "config.xml.new")
            << "<?xml version=\"1.0\"?><yandex><logger><level>warning</level><log>" << d
            << "/server.log</log><errorlog>" << d
            << "/error.log</errorlog><console>0</console></logger>"
            << "<http_port>" << http << "</http_port>"
            << (native_ ? "<tcp_port>" + std::to_string(native) + "</tcp_port>" : std::string())
            << "<listen_host>127.0.0.1</listen_host>"
            << "<path>" << d << "/data/</path><tmp_path>" << d << "/tmp/</tmp_path>"
            << "<user_files_path>" << d << "/files/</user_files_path>"
            << "<users_config>" << d << "/users.xml</users_config>"
            << "<default_profile>default</default_profile><default_database>default"
               "</default_database><mark_cache_size>5368709</mark_cache_size>"
            << extra_ << "</yandex>\n";
        std::filesystem::rename(dir.path / "config.xml.new", dir.path / "config.xml");
    }

    bool native_ = false;
    std::string extra_;
};

} // namespace test_support
