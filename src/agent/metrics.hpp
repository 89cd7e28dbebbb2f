// Health metrics from /proc and /sys, as protocol messages. Keeps the previous counters so CPU
// percentages cover the interval between two samples. The roots are parameters so tests can
// point them at captured files.
#pragma once

#include "agent/procfs.hpp"
#include "protocol/messages.hpp"

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace agent {

class metrics_sampler {
public:
    explicit metrics_sampler(std::string proc_root = "/proc", std::string sys_root = "/sys");

    protocol::system_metrics system(double ts);
    std::optional<protocol::process_metrics> process(int pid, double ts);
    protocol::network_metrics network(double ts);
    protocol::disk_metrics disk(double ts);
    std::optional<protocol::threads_metrics> threads(int pid, double ts);
    // The target's executable mappings with build-ids; nullopt when the set is the one
    // returned last time (or the process is gone). Each file's build-id is read once.
    std::optional<protocol::binaries_metrics> binaries(int pid, double ts);
    // Profiling the whole system: the executable mappings of the `n` processes that used the
    // most CPU since the last call, each process's when its set of files is new to this call.
    std::vector<protocol::binaries_metrics> busiest_binaries(double ts, std::size_t n = 8);

private:
    std::string read(const std::string& relative) const;

    std::string proc_;
    std::string sys_;
    long clk_tck_;
    std::optional<procfs::stat_info> last_stat_;
    struct process_mark {
        int pid;
        std::uint64_t ticks;
        double ts;
    };
    std::optional<process_mark> last_process_;
    std::pair<int, std::vector<std::string>> last_binaries_;
    protocol::binaries_metrics binaries_record(int pid, double ts,
                                               const std::vector<std::string>& paths);
    std::map<int, std::pair<std::string, std::uint64_t>> last_processes_;
    std::map<int, std::vector<std::string>> sent_binaries_; // by pid, for busiest_binaries
    std::map<std::string, std::string> build_ids_;          // by path as the target sees it
};

// One row of `list_processes`.
struct process_row {
    int pid = 0;
    std::string comm;
    std::string cmdline;
    double cpu = 0; // % of one core over the sampling interval
};

// Ticks per process at one instant, for list_processes.
std::map<int, std::pair<std::string, std::uint64_t>>
snapshot_processes(const std::string& proc_root = "/proc");

// The `limit` busiest processes between two snapshots `seconds` apart, busiest first.
std::vector<process_row>
top_processes(const std::map<int, std::pair<std::string, std::uint64_t>>& before,
              const std::map<int, std::pair<std::string, std::uint64_t>>& after, double seconds,
              std::size_t limit = 200, const std::string& proc_root = "/proc");

// Reads /proc/PID/cmdline with NULs as spaces; empty for kernel threads or a vanished pid.
std::string read_cmdline(int pid, const std::string& proc_root = "/proc");

} // namespace agent
