// What the benchmarks share: the real collector, started on loopback.
#pragma once

#include "support/framing_peer.hpp"
#include "support/spawn.hpp"

#include <boost/json/value.hpp>

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace bench {

struct collector {
    std::unique_ptr<test_support::spawned> proc;
    std::uint16_t agent_port = 0, http_port = 0;
};

// `exe` on loopback with free ports and no API token, its sessions in `sessions`, with `extra`
// arguments and `env` entries ("NAME=value"); nullopt, after saying why on stderr, if it did
// not start within 10 s.
std::optional<collector> start_collector(const std::string& exe,
                                         const std::filesystem::path& sessions,
                                         const std::vector<std::string>& extra = {},
                                         const std::vector<std::string>& env = {});

// The real agent at `agent_bin`, dialling a loopback peer this program holds: the agent and
// the peer once its hello came (throws when it did not connect in 10 s).
struct dialled_agent {
    std::unique_ptr<test_support::spawned> proc;
    std::unique_ptr<test_support::framing_peer> peer;
};
dialled_agent dial_agent(const std::string& agent_bin, const std::vector<std::string>& extra = {});

// GET `target` from the collector on `http`, parsed; nullopt unless 200 with JSON.
std::optional<boost::json::value> get_json(std::uint16_t http, const std::string& target);

// CPU-seconds a process used itself (utime + stime of /proc/PID/stat; its children not).
double cpu_seconds(int pid);
// The CPU-seconds of `parent`'s children: those running whose name begins with `prefix`
// ("perf": an agent's), and all it has reaped (cutime + cstime: a perf restarted meanwhile).
double children_cpu_seconds(int parent, const std::string& prefix);

} // namespace bench
