// JSON messages carried in frames 2, 3 and 4 (SPEC §1).
//
// Parsers never throw on bad input: they return a parse_error naming the offending field.
// Unknown fields are ignored, so newer agents and other agents speaking this protocol (for
// example "agent":"perflens") interoperate. Members declared std::optional may be absent;
// every other member is required. Serializers omit absent optionals.
#pragma once

#include "protocol/error.hpp"

#include <boost/describe/class.hpp>
#include <boost/json/object.hpp>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace protocol {

inline constexpr int protocol_version = 1;

// The commands an agent answers (flag 2 -> flag 3).
namespace cmd {
inline constexpr std::string_view auth = "auth", ping = "ping", status = "status",
                                  list_processes = "list_processes", verify_pid = "verify_pid",
                                  verify_perf = "verify_perf", reprobe = "reprobe", start = "start",
                                  stop = "stop", pause = "pause", resume = "resume",
                                  configure = "configure", configure_metrics = "configure_metrics",
                                  update = "update", update_data = "update_data",
                                  update_apply = "update_apply", kallsyms = "kallsyms",
                                  sequence = "sequence", ack = "ack", capture = "capture";
} // namespace cmd

// What an agent is doing. The agent reports idle, profiling or paused (state notices, and the
// "state" of its answers to start, stop, pause and resume); before that the collector knows it
// only as connecting, then authenticating while its pairing code is checked.
// armed: a flight recorder (--flight-recorder) profiles and keeps the last seconds on the
// device, sending nothing until a trigger fires; a capture then is a run of its own (profiling).
enum class agent_state { connecting, authenticating, idle, profiling, paused, armed };
std::string_view to_string(agent_state s) noexcept;
std::optional<agent_state> agent_state_from(std::string_view s) noexcept;

// ---- hello (flag 3, first frame from the agent) --------------------------------------------

// What the agent was built for (`arch`: x86_64, aarch64, armv7, s390x, …, from the compiler,
// so true under emulation and in a 32-bit userland on a 64-bit kernel) and what the kernel
// says it runs on (`machine`, `uname -m`).
struct platform_info {
    std::optional<std::string> arch;
    std::optional<std::string> machine;
    std::optional<std::string> kernel;
    std::optional<std::string> perf_version;
    std::optional<int> perf_event_paranoid;
};
BOOST_DESCRIBE_STRUCT(platform_info, (), (arch, machine, kernel, perf_version, perf_event_paranoid))

// A run that outlives its link (docs/protocol.md, "Runs"): named by the agent when it began
// (128 random bits as 32 lowercase hex digits), its chunks numbered from 1.
struct run_info {
    std::string id;
    std::uint64_t seq = 0; // the last chunk the run made (0: none yet)
    // How long the agent keeps the run going without a link, in seconds (--offline-max).
    std::optional<double> offline_max;
};
BOOST_DESCRIBE_STRUCT(run_info, (), (id, seq, offline_max))
bool valid_run_id(std::string_view id) noexcept;

struct hello {
    int version = protocol_version;
    std::string agent = "perfwire";
    std::optional<std::string> agent_version;
    // The build this agent takes as an update: its compile-time architecture (as in
    // perfwire-agent-linux-<arch>), or "python" for the Python agent, which updates its script.
    std::optional<std::string> update_arch;
    // Which updates it takes: "signed" (with its --update-key), or why none: "needs-key",
    // "disabled" (--no-update), "needs-pairing" (no pairing code). See protocol/update.hpp.
    std::optional<std::string> updates;
    std::optional<std::string> auth; // "token" when a pairing code must be presented
    std::optional<std::string> hostname;
    std::optional<platform_info> platform;
    // The collector's enrollment token, from an agent dialling it (--server): proves the agent
    // may store sessions there. Never sent to a collector that dials the agent.
    std::optional<std::string> enrollment;
    // What an agent that dialled over TLS checked the collector's certificate against: the
    // pin ("sha256:…") or "ca" (--tls-ca). Shown with the target; the agent's check is what
    // protects it.
    std::optional<std::string> tls_check;
    // The agent keeps its runs across links and numbers their chunks: a collector that can
    // resume answers with `sequence` before anything else. `run`: the one under way, if any.
    std::optional<bool> resumable;
    std::optional<run_info> run;
};
BOOST_DESCRIBE_STRUCT(hello, (),
                      (version, agent, agent_version, update_arch, updates, auth, hostname,
                       platform, enrollment, tls_check, resumable, run))

// Refuses payloads over max_hello before parsing them.
parse_result<hello> parse_hello(std::string_view payload);
std::string serialize(const hello& h);

// ---- commands (flag 2) and responses (flag 3) -----------------------------------------------

struct command_request {
    std::string id;
    std::string cmd;
    boost::json::object args;
};

parse_result<command_request> parse_command_request(std::string_view payload);
std::string serialize(const command_request& r);

struct command_response {
    std::string id;
    bool ok = true;
    std::string error;          // set when !ok
    boost::json::object fields; // everything else the command returns

    static command_response success(std::string id, boost::json::object fields = {});
    static command_response failure(std::string id, std::string error);
};

parse_result<command_response> parse_command_response(std::string_view payload);
std::string serialize(const command_response& r);

// Unsolicited flag-3 notice: the agent's state changed on its own (the target exited, perf
// failed), e.g. {"type":"state","state":"idle","reason":"target process exited","pid":42}.
struct state_notice {
    std::string state; // idle, profiling, paused, armed
    std::optional<std::string> reason;
    std::optional<int> pid;
    std::optional<std::uint64_t> lost_samples;
    std::optional<std::string> callgraph; // of the run under way: fp, dwarf, lbr or none
    std::optional<std::string> run;       // its id (run_info), from an agent that resumes runs
    // A flight recorder's capture begins (state profiling, its own run): what fired, when (wall
    // clock, seconds since the epoch), and the seconds before it the window holds.
    std::optional<std::string> capture;
    std::optional<double> capture_at;
    std::optional<double> capture_window;
    // The sampling rate of the run under way (Hz): a change (--max-overhead) says it here.
    std::optional<int> frequency;
};
BOOST_DESCRIBE_STRUCT(state_notice, (),
                      (state, reason, pid, lost_samples, callgraph, run, capture, capture_at,
                       capture_window, frequency))

std::string serialize(const state_notice& n);

// A flag-3 payload is the hello, a command response, or a state notice.
using agent_reply = std::variant<hello, command_response, state_notice>;
parse_result<agent_reply> parse_agent_reply(std::string_view payload);

// ---- health metrics (flag 4), discriminated by "type" ----------------------------------------

struct cpu_stats {
    double overall_pct = 0;
    std::vector<double> per_core;
    std::optional<std::vector<double>> freq_mhz;
    int num_cores = 0;
};
BOOST_DESCRIBE_STRUCT(cpu_stats, (), (overall_pct, per_core, freq_mhz, num_cores))

struct memory_stats {
    std::uint64_t total_kb = 0, used_kb = 0, available_kb = 0, buffers_kb = 0, cached_kb = 0;
    std::uint64_t swap_total_kb = 0, swap_used_kb = 0;
    double used_pct = 0;
};
BOOST_DESCRIBE_STRUCT(memory_stats, (),
                      (total_kb, used_kb, available_kb, buffers_kb, cached_kb, swap_total_kb,
                       swap_used_kb, used_pct))

struct load_stats {
    double avg_1m = 0, avg_5m = 0, avg_15m = 0;
};
BOOST_DESCRIBE_STRUCT(load_stats, (), (avg_1m, avg_5m, avg_15m))

struct system_metrics {
    double ts = 0;
    cpu_stats cpu;
    memory_stats mem;
    load_stats load;
    std::optional<double> temp_c;
    double uptime_sec = 0;
    std::uint64_t context_switches = 0, interrupts = 0;
    std::uint64_t procs_running = 0, procs_blocked = 0;
};
BOOST_DESCRIBE_STRUCT(system_metrics, (),
                      (ts, cpu, mem, load, temp_c, uptime_sec, context_switches, interrupts,
                       procs_running, procs_blocked))

struct process_metrics {
    double ts = 0;
    int pid = 0;
    std::string comm, state;
    double cpu_pct = 0;
    std::uint64_t rss_kb = 0, vsize_kb = 0, threads = 0, fds = 0;
    std::uint64_t voluntary_csw = 0, involuntary_csw = 0, minor_faults = 0, major_faults = 0;
    int oom_score = 0;
};
BOOST_DESCRIBE_STRUCT(process_metrics, (),
                      (ts, pid, comm, state, cpu_pct, rss_kb, vsize_kb, threads, fds, voluntary_csw,
                       involuntary_csw, minor_faults, major_faults, oom_score))

struct interface_stats {
    std::uint64_t rx_bytes = 0, rx_packets = 0, rx_errors = 0, rx_drops = 0;
    std::uint64_t tx_bytes = 0, tx_packets = 0, tx_errors = 0;
};
BOOST_DESCRIBE_STRUCT(interface_stats, (),
                      (rx_bytes, rx_packets, rx_errors, rx_drops, tx_bytes, tx_packets, tx_errors))

struct network_metrics {
    double ts = 0;
    std::map<std::string, interface_stats> interfaces;
};
BOOST_DESCRIBE_STRUCT(network_metrics, (), (ts, interfaces))

struct disk_stats {
    std::uint64_t reads = 0, read_bytes = 0, writes = 0, write_bytes = 0;
    std::uint64_t read_ms = 0, write_ms = 0;
};
BOOST_DESCRIBE_STRUCT(disk_stats, (), (reads, read_bytes, writes, write_bytes, read_ms, write_ms))

struct disk_metrics {
    double ts = 0;
    std::map<std::string, disk_stats> devices;
};
BOOST_DESCRIBE_STRUCT(disk_metrics, (), (ts, devices))

struct thread_stats {
    int tid = 0;
    std::string comm, state;
    std::uint64_t ticks = 0; // utime + stime, in clock ticks
};
BOOST_DESCRIBE_STRUCT(thread_stats, (), (tid, comm, state, ticks))

struct threads_metrics {
    double ts = 0;
    int pid = 0;
    int clk_tck = 100;
    std::vector<thread_stats> threads;
};
BOOST_DESCRIBE_STRUCT(threads_metrics, (), (ts, pid, clk_tck, threads))

// The files the target has mapped executable, with their GNU build-ids (empty when a file has
// none): sent when the target is set and whenever that set changes, so the collector can tell
// whether its local copy of a binary is the build that ran.
struct mapped_binary {
    std::string path, build_id;
};
BOOST_DESCRIBE_STRUCT(mapped_binary, (), (path, build_id))

struct binaries_metrics {
    double ts = 0;
    int pid = 0;
    std::vector<mapped_binary> binaries;
};
BOOST_DESCRIBE_STRUCT(binaries_metrics, (), (ts, pid, binaries))

// A flight recorder's window now (docs/protocol.md, "Flight recorder"): sent every metrics
// interval while one runs (and in the agent's status), so the target list shows what it holds.
struct flight_metrics {
    double ts = 0;
    double window_s = 0, held_s = 0, after_s = 0;
    std::uint64_t held_bytes = 0, memory_bytes = 0;
    std::uint64_t cut_for_room = 0; // chunks its memory let go while younger than the window
    std::uint64_t captures = 0, refused = 0;
    bool capturing = false;
    // What fires it, as set: cpu, memory, load (PCT[:SECONDS]), log (FILE:REGEX), process, file.
    std::map<std::string, std::string> triggers;
    // The last readings of the levels watched; why the log is not read now; what fired last.
    std::optional<double> cpu_pct, memory_pct, load;
    std::optional<std::string> log_problem, last_fired;
};
BOOST_DESCRIBE_STRUCT(flight_metrics, (),
                      (ts, window_s, held_s, after_s, held_bytes, memory_bytes, cut_for_room,
                       captures, refused, capturing, triggers, cpu_pct, memory_pct, load,
                       log_problem, last_fired))

using health_metrics = std::variant<system_metrics, process_metrics, network_metrics, disk_metrics,
                                    threads_metrics, binaries_metrics, flight_metrics>;

// The "type" string of each alternative: system, process, network, disk, threads, binaries,
// flight.
std::string_view metrics_type(const health_metrics& m) noexcept;

parse_result<health_metrics> parse_metrics(std::string_view payload);
std::string serialize(const health_metrics& m);

} // namespace protocol
