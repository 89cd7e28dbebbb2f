#include "support.hpp"

#include "support/http_client.hpp"

#include <boost/json/parse.hpp>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <unistd.h>

namespace bench {

std::optional<collector> start_collector(const std::string& exe,
                                         const std::filesystem::path& sessions,
                                         const std::vector<std::string>& extra,
                                         const std::vector<std::string>& env) {
    std::vector<std::string> args{"--sessions-dir", sessions.string(),
                                  "--agent-port",   "0",
                                  "--agent-bind",   "127.0.0.1",
                                  "--http-port",    "0",
                                  "--http-auth",    "none"};
    args.insert(args.end(), extra.begin(), extra.end());
    collector c;
    c.proc = std::make_unique<test_support::spawned>(exe, args, "/dev/null", env);
    const auto agents = c.proc->wait_for_stderr("agents on 127.0.0.1:", std::chrono::seconds(10));
    const auto http = c.proc->wait_for_stderr("API on http://127.0.0.1:", std::chrono::seconds(10));
    if (!agents || !http) {
        std::fprintf(stderr, "the collector did not start: %s\n", c.proc->stderr_text().c_str());
        return std::nullopt;
    }
    c.agent_port = static_cast<std::uint16_t>(std::stoi(*agents));
    c.http_port = static_cast<std::uint16_t>(std::stoi(*http));
    return c;
}

std::optional<boost::json::value> get_json(std::uint16_t http, const std::string& target) {
    const auto r = test_support::http_call(http, "GET", target);
    if (r.status != 200)
        return std::nullopt;
    boost::system::error_code ec;
    auto v = boost::json::parse(r.body, ec);
    if (ec)
        return std::nullopt;
    return v;
}

double cpu_seconds(int pid) {
    const std::string text = test_support::proc_file(pid, "stat");
    const auto close = text.rfind(')');
    if (close == std::string::npos || close + 2 > text.size())
        return 0; // gone
    std::istringstream rest(text.substr(close + 2));
    std::string field;
    unsigned long long utime = 0, stime = 0;
    for (int i = 3; i <= 15 && rest >> field; ++i) {
        if (i == 14)
            utime = std::stoull(field);
        if (i == 15)
            stime = std::stoull(field);
    }
    return static_cast<double>(utime + stime) / static_cast<double>(sysconf(_SC_CLK_TCK));
}

double children_cpu_seconds(int parent, const std::string& prefix) {
    double s = 0;
    // Reaped: fields 16 and 17 of /proc/PID/stat, in clock ticks.
    const std::string text = test_support::proc_file(parent, "stat");
    if (const auto close = text.rfind(')'); close != std::string::npos) {
        std::istringstream rest(text.substr(close + 2));
        std::string field;
        for (int i = 3; i <= 17 && rest >> field; ++i)
            if (i == 16 || i == 17)
                s += static_cast<double>(std::stoull(field)) /
                     static_cast<double>(::sysconf(_SC_CLK_TCK));
    }
    for (const int pid : test_support::children_of(parent, prefix))
        s += cpu_seconds(pid);
    return s;
}

dialled_agent dial_agent(const std::string& agent_bin, const std::vector<std::string>& extra) {
    test_support::listener l;
    std::vector<std::string> args{"--server", "127.0.0.1:" + std::to_string(l.port()),
                                  "--state-dir", ""};
    args.insert(args.end(), extra.begin(), extra.end());
    dialled_agent d;
    d.proc = std::make_unique<test_support::spawned>(agent_bin, args);
    const int fd = l.accept(std::chrono::milliseconds(10000));
    if (fd < 0)
        throw std::runtime_error("the agent did not connect");
    d.peer = std::make_unique<test_support::framing_peer>(fd);
    d.peer->next(std::chrono::milliseconds(5000)); // hello
    return d;
}

} // namespace bench
