// The capability probe: what the perf on this device can really do, found by what perf did
// (exit status, bytes of perf.data written, samples and stacks printed), never by what its
// messages look like. Vendor and old perf builds differ in ways that matter:
//
//   - `perf stat` may reject a whole command for one name it does not know ("event syntax
//     error") instead of printing <not supported>: the probe then halves the list until every
//     usable event is found;
//   - `perf record -o -` may be refused: recording falls back to rounds of files;
//   - `--call-graph` may be unknown: the run records flat samples and says so.
//
// Everything it ran is kept (`tried`), and what it found impossible is said in words
// (`cannot`), so the collector can show "this perf cannot …".
#pragma once

#include "agent/child.hpp"

#include <boost/json/object.hpp>

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace agent {

// One perf command the probe ran, and what came of it.
struct probe_step {
    std::string command;     // perf's arguments, as a shell would show them
    int status = -1;         // exit status (128+N for signal N; -1: could not start)
    bool timed_out = false;  //
    std::uint64_t bytes = 0; // perf.data bytes perf record wrote (record steps)
    int samples = 0;         // samples perf script printed
    bool stacks = false;     // some sample had a call chain
    std::string complaint;   // perf's stderr, first line that says something

    boost::json::object to_json() const;
};

struct capabilities {
    std::vector<std::string> record_events;    // what perf record samples (empty: nothing)
    std::vector<std::string> stat_only_events; // counted by perf stat alongside
    std::string callgraph;                     // fp, dwarf, lbr; empty: no call graphs
    std::vector<std::string> callgraph_modes;  // those a start may choose (the default too)
    bool script_fields = true;                 // perf script -F works
    bool pipe_mode = true;                     // perf record -o - | perf script -i - works
    int perf_event_paranoid = 2;
    std::string perf_version;
    std::vector<std::string> warnings;
    // What this perf was found unable to do, each a phrase that follows "this perf cannot".
    std::vector<std::string> cannot;
    std::map<std::string, std::string> rejected_events;    // event → why
    std::map<std::string, std::string> unusable_callgraph; // mode → why
    std::string pipe_problem;                              // why not the pipe, when not
    std::vector<probe_step> tried;
    double probe_seconds = 0;
    // The target ran during the probe, so its findings hold for any other: a start on another
    // process need not probe again.
    bool judged = false;

    boost::json::object to_json() const;

    // Why `event` cannot be sampled here (for a start that asks for it).
    std::string why_not_event(const std::string& event) const;
    // Why `mode` is not offered (for a start that asks for it).
    std::string why_not_callgraph(const std::string& mode) const;
};

// What the probe found, kept as long as the agent runs and shared by its connections: a
// collector that connects again (a restart, the wizard dialling once more) starts at once
// instead of waiting for perf to be probed again. `reprobe` refreshes it.
struct probe_memory {
    std::optional<capabilities> caps;
    std::optional<int> pid; // what it was probed for (nullopt: the whole system)

    // The findings for `pid`, when they hold for it.
    const capabilities* for_pid(std::optional<int> want) const {
        return caps && (pid == want || caps->judged) ? &*caps : nullptr;
    }
};

int read_perf_event_paranoid(const std::string& proc_root = "/proc");

// Why this device cannot record where threads wait (off-CPU: the sched:sched_switch
// tracepoint), or empty when it can. `sys_root`: where /sys is (tests).
std::string off_cpu_problem(const std::string& proc_root = "/proc",
                            const std::string& sys_root = "/sys");
// Removes the scratch directories of probes (perfwire-probe-*) in `tmp` that an agent killed
// mid-probe left behind: this user's own (0700), untouched for `older_than`.
void sweep_probe_dirs(const std::string& tmp, std::chrono::seconds older_than);

// The same, and why not beside these sampled events (perf_commands.hpp off_cpu_events_problem).
std::string off_cpu_problem(const std::vector<std::string>& events);

// Finds what this perf can do for `pid` (or the whole system). About a second with a
// well-behaved perf; an odd one takes a few more rounds of short runs, each bounded.
asio::awaitable<capabilities> probe(const std::string& perf, std::optional<int> pid);

} // namespace agent
