// The perf command lines the agent runs, and parsers for what perf prints back during the
// capability probe. Pure functions: the tests check them on captured perf output.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace agent {

// Hardware events first: the probe keeps the first that `perf record` really samples; on a
// machine without a PMU none does and the software clock takes over.
inline const std::vector<std::string> candidate_events = {
    "cycles",           "instructions",     "cache-misses",
    "cache-references", "branch-misses",    "branch-instructions",
    "page-faults",      "context-switches", "cpu-migrations"};
inline const std::vector<std::string> software_clocks = {"cpu-clock", "task-clock"};

// The sampling events recorded in order of preference.
inline const std::vector<std::string> sampling_preference = {"cycles", "cpu-clock"};

inline const std::vector<std::string> callgraph_modes = {"fp", "dwarf", "lbr"};

inline constexpr std::string_view script_fields =
    "comm,tid,pid,time,period,event,ip,sym,symoff,dso";

// `perf --version`'s arguments (a function: a braced list in a coroutine trips GCC 12).
inline std::vector<std::string> perf_version_args() {
    return {"--version"};
}

struct record_settings {
    std::vector<std::string> events;
    int frequency = 99;
    std::string callgraph = "fp"; // fp, dwarf, lbr; empty for no call graphs
    std::optional<int> pid;       // none: the whole system (-a)
    // --no-buffering: perf hands each sample on as it is taken instead of when its ring
    // buffer is half full (which at modest rates holds seconds of samples back).
    bool prompt = false;
    // Also where threads wait: every scheduler switch of the target (sched:sched_switch, its
    // stack where the thread left the CPU) and perf's switch records (when it came back).
    bool off_cpu = false;
    std::uint64_t off_cpu_min_ns = 0; // waits shorter are not sent (wait_folder.hpp)
    // Rates perf record holds at once, each event sampled at every one by a term of its own
    // named for it (rung_name), all disabled at the start (-D -1) and enabled one at a time
    // through --control on descriptor 3 (rung_commands): a rate changes without restarting
    // perf. `frequency` is one of them. Empty: one rate, -F.
    std::vector<int> ladder{};
};

// The name an event sampled at `hz` takes on a ladder ("cpu-clock" → "cpu-clock.250hz"); the
// collector reads it as the event itself (collector/parse/perf_script.cpp, rung_base).
std::string rung_name(std::string_view event, int hz);
// Whether a ladder of rates can be asked of these settings: events that take a rate term of
// their own, no off-CPU switches (their own rates and -c 1).
bool ladder_possible(const record_settings& s);
// What perf record's control descriptor is told to sample at `to` instead of `from` (0: from
// nothing, at the start): one "disable NAME"/"enable NAME" line per event.
std::string rung_commands(const record_settings& s, int from, int to);
// Whether perf's control descriptor takes commands by event name (perf of about Linux 5.12 on;
// asked of 5.13 and later): an older one reads "enable NAME" as "enable", every event. From `perf
// --version`'s line ("perf version 6.1.187").
bool perf_enables_by_name(std::string_view perf_version);

// Ring-buffer pages per CPU for `perf record -m`: room for about a quarter of a second of
// samples. (perf wakes when it is half full, which at a modest rate on a busy target's
// several CPUs still takes seconds: streaming asks for `prompt` too.)
int mmap_pages_for(int frequency, bool dwarf = false);

// `event` sampled at `frequency` by a term of its own ("cpu-clock:u" →
// "cpu-clock/freq=99,name=cpu-clock:u/u"), so that perf's -c 1 beside it holds for the switch
// tracepoint alone: under a global -F perf would sample the tracepoint at that rate too,
// throttling it to a fraction of the switches. None for an event that cannot take the term (a
// tracepoint, or a PMU event already spelt with terms).
std::optional<std::string> at_own_rate(std::string_view event, int frequency,
                                       std::string_view name_suffix = {});

// Why off-CPU cannot record beside `events` (one of them cannot take a rate of its own), or
// empty.
std::string off_cpu_events_problem(const std::vector<std::string>& events);

// perf record writing to `output` ("-" for a pipe); `command` runs under it when non-empty
// (the probe uses `sleep 0.2` to bound a recording).
std::vector<std::string> record_args(const record_settings& s, std::string_view output,
                                     const std::vector<std::string>& command = {});

// perf script reading `input`; with_fields=false for old perf without -F. `off_cpu`: the
// switch records and the tracepoint's arguments (the kind of wait) printed too.
std::vector<std::string> script_args(std::string_view input, bool with_fields, bool with_cpu,
                                     bool off_cpu = false);

// perf stat counting `events` until interrupted (or for `command`).
std::vector<std::string> stat_args(const std::vector<std::string>& events, std::optional<int> pid,
                                   const std::vector<std::string>& command = {});

// Events a `perf stat` report counted: not "<not supported>" and not "<not counted>".
std::vector<std::string> counted_events(std::string_view perf_stat_output,
                                        const std::vector<std::string>& asked);

// The event names in `perf evlist` output (perf record may silently fall back from cycles to
// cpu-clock, so the probe checks what was really recorded).
std::vector<std::string> evlist_events(std::string_view perf_evlist_output);

// True when some sample in `perf script` output has at least two frames.
bool has_call_chains(std::string_view script_output);

// Samples in `perf script` output: the lines that start one (not a frame, not blank).
int sample_count(std::string_view script_output);

// Why perf failed, from its stderr: the first line that is not perf's progress chatter
// ("[ perf record: ... ]") or a blank, trimmed to 200 bytes; empty when there is none.
std::string perf_complaint(std::string_view perf_stderr);

// "perf version 6.1.192" -> that line; empty if not perf.
std::string perf_version_line(std::string_view perf_version_output);

} // namespace agent
