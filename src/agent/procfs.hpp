// Parsers for the /proc files the health metrics come from. Pure functions on file text, so
// tests run them on captured files; missing or malformed fields read as zero, never throw.
#pragma once

#include "protocol/messages.hpp"

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace agent::procfs {

struct cpu_times {
    std::uint64_t busy = 0, total = 0; // in clock ticks; busy excludes idle and iowait
};

// /proc/stat
struct stat_info {
    cpu_times all;
    std::vector<cpu_times> per_core;
    std::uint64_t context_switches = 0, interrupts = 0, procs_running = 0, procs_blocked = 0;
};
stat_info parse_stat(std::string_view text);

protocol::memory_stats parse_meminfo(std::string_view text);
protocol::load_stats parse_loadavg(std::string_view text);
double parse_uptime(std::string_view text);
// /proc/net/dev without the loopback interface.
std::map<std::string, protocol::interface_stats> parse_net_dev(std::string_view text);
// /proc/diskstats without loop, ram and zram devices.
std::map<std::string, protocol::disk_stats> parse_diskstats(std::string_view text);

// /proc/PID/stat and /proc/PID/task/TID/stat. comm is between the first '(' and the last ')'
// since it may itself contain parentheses and spaces.
struct pid_stat {
    int pid = 0;
    std::string comm;
    char state = '?';
    std::uint64_t minor_faults = 0, major_faults = 0, utime = 0, stime = 0;
    std::uint64_t threads = 0, vsize_bytes = 0, rss_pages = 0, start_time = 0;
};
std::optional<pid_stat> parse_pid_stat(std::string_view text);

// A process as it is: its pid and when it started (clock ticks after boot). The same pid with
// another start time is another process: the first exited, was reaped, and its pid reused.
struct process_identity {
    int pid = 0;
    std::uint64_t start_time = 0;
};
// The process `pid` now; nullopt when it is gone or a zombie (it exited, not yet reaped).
std::optional<process_identity> running_process(int pid, const std::string& proc_root = "/proc");
// Whether `p` has exited since it was seen (gone, a zombie, or its pid now another process's).
bool has_exited(const process_identity& p, const std::string& proc_root = "/proc");

// /proc/PID/status
struct pid_status {
    std::uint64_t voluntary_csw = 0, involuntary_csw = 0, rss_kb = 0;
};
pid_status parse_pid_status(std::string_view text);

// /proc/PID/maps: the files mapped executable, sorted, each once (no anonymous or special
// mappings, no deleted files).
std::vector<std::string> parse_maps_executables(std::string_view text);

// /proc/kallsyms: the kernel's text symbols as "ADDRESS NAME" lines (a module's symbols
// without their "[module]"). Empty when the kernel hides the addresses (all zero:
// kernel.kptr_restrict) or lists none.
std::string parse_kallsyms(std::string_view text);

// A process's CPU in % of one core: its utime+stime clock ticks then and now, `seconds` apart
// (0 when no time passed).
double cpu_pct(std::uint64_t ticks_before, std::uint64_t ticks_now, double seconds);

// CPU % of a delta between two cpu_times samples (0 when no time passed).
double busy_pct(const cpu_times& before, const cpu_times& after);

// The whole file, or nullopt when it cannot be read (process gone, no permission).
std::optional<std::string> read_file(const std::string& path);

} // namespace agent::procfs
