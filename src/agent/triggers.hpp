// What fires a flight recorder's capture from the device itself: the profiled process's CPU,
// the device's memory or load above a level for a time, a line of a log matching a pattern, a
// process of a name starting or exiting, a file touched. (A user's request — the collector's
// capture, SIGUSR1 — is the session's.)
//
//   trigger_settings ──check_triggers──▶ clear error at start (never a trigger that cannot work)
//          │
//   trigger_watch::poll (four times a second) ──▶ what fired, in words; whether a level holds
//
// Reading the log and the files named here is the device owner's choice (the command line);
// the collector's start may set the levels and a process name, never a path.
#pragma once

#include "agent/flight.hpp"
#include "agent/line_pattern.hpp"

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <sys/types.h>

namespace agent {

struct trigger_settings {
    std::string cpu;     // --trigger-cpu PCT[:SECONDS] of the process profiled
    std::string memory;  // --trigger-memory PCT[:SECONDS] of the device's memory in use
    std::string load;    // --trigger-load LOAD[:SECONDS], the 1-minute load average
    std::string log;     // --trigger-log FILE:REGEX (the command line only)
    std::string process; // --trigger-process NAME: one of that name starts or exits
    std::string file;    // --trigger-file PATH: it appears or is touched (the command line only)
    bool any() const {
        return !cpu.empty() || !memory.empty() || !load.empty() || !log.empty() ||
               !process.empty() || !file.empty();
    }
};

// Why these triggers cannot work ("" when they can): a level out of range, a pattern that does
// not compile, a path that is not absolute, a CPU trigger without a process.
std::string check_triggers(const trigger_settings& t, bool has_pid);
// --trigger-log's FILE and REGEX (split at the first ':'); nullopt when there is no ':'.
std::optional<std::pair<std::string, std::string>> split_log_trigger(const std::string& spec);
// A process name as the kernel keeps it (comm: 1-15 bytes, no '/' or control characters).
bool valid_process_name(std::string_view name);

// A log read as it grows: the complete lines added since the last poll. Another file at the
// path (rotated) is read from its start once the old one's last lines are read; one cut short
// (copytruncate) from its start again; a path with no file is waited for. At most max_read
// bytes a poll (the rest the next), a line at most line_pattern::max_line bytes (cut there).
class log_tail {
public:
    explicit log_tail(std::string path);
    ~log_tail();
    log_tail(const log_tail&) = delete;
    log_tail& operator=(const log_tail&) = delete;

    std::vector<std::string> poll();
    // Why the file is not being read now ("" when it is).
    const std::string& problem() const noexcept { return problem_; }
    static constexpr std::size_t max_read = std::size_t{1} << 20;

private:
    void read_into(std::vector<std::string>& out, std::size_t& budget);
    void close_file();

    std::string path_;
    int fd_ = -1;
    dev_t dev_ = 0;
    ino_t ino_ = 0;
    off_t offset_ = 0;
    std::string partial_;    // the line being read
    bool skipping_ = false;  // past max_line: the rest of this line is let go
    bool first_open_ = true; // a log there at the start: only what is added from now
    std::string problem_;
};

// Processes whose name (comm) is `name`: the ones that started and exited since the last poll
// (the first poll only learns those running).
class process_watch {
public:
    explicit process_watch(std::string name, std::string proc_root = "/proc");
    struct change {
        int pid;
        bool started;
    };
    std::vector<change> poll();

private:
    std::string name_, root_;
    bool first_ = true;
    std::map<int, std::uint64_t> seen_; // pid → its start time (a reused pid is another)
};

// A file that appears or whose modification time changes (`touch PATH` from a script).
class file_watch {
public:
    explicit file_watch(std::string path);
    bool poll(); // true when it changed since the last poll (not at the first)

private:
    std::string path_;
    bool first_ = true;
    std::optional<std::pair<std::int64_t, std::int64_t>> seen_; // mtime s, ns
};

// Every trigger of a flight recorder on the device, polled together.
class trigger_watch {
public:
    // `settings` passed check_triggers; `pid`: the process profiled (for --trigger-cpu).
    trigger_watch(const trigger_settings& settings, std::optional<int> pid);
    ~trigger_watch();

    struct reading {
        std::vector<std::string> fired; // what fired, in words, each its own
        bool holding = false;           // a level that fired is still above it
    };
    reading poll(flight_clock::time_point now);
    // The capture was refused: a level still above fires again at the next reading.
    void refused();

    // The last readings (for status): NaN before the first.
    double cpu_pct() const noexcept { return cpu_pct_; }
    double memory_pct() const noexcept { return memory_pct_; }
    double load() const noexcept { return load_; }
    // Why the log is not being read now ("" when it is or there is none).
    std::string log_problem() const;

private:
    trigger_settings s_;
    std::optional<int> pid_;
    std::optional<threshold_trigger> cpu_, memory_, load_trigger_;
    using cpu_reading = std::pair<std::uint64_t, flight_clock::time_point>; // ticks, when
    std::optional<cpu_reading> cpu_seen_;
    std::unique_ptr<log_tail> log_;
    std::optional<line_pattern> pattern_;
    std::unique_ptr<process_watch> processes_;
    std::unique_ptr<file_watch> file_;
    flight_clock::time_point next_process_scan_{};
    double cpu_pct_, memory_pct_, load_;
};

} // namespace agent
