// The `perf stat` report the agent appends after "### PERF_STAT ###".
//
//            3,768.18 msec cpu-clock        #    1.901 CPUs utilized
//           1,234,567      cycles           #    3.0 GHz          (50.00%)
//     <not supported>      instructions
//       <not counted>      cache-misses                            (0.00%)
//         1.981977982 seconds time elapsed
//
// A trailing "(NN.NN%)" means the counter ran only that share of the time and perf scaled it
// up (multiplexing), which the UI warns about.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace collector {

struct stat_counter {
    std::string event;
    std::optional<double> value;       // absent when not supported / not counted
    std::string unit;                  // "msec" for clocks, else empty
    bool supported = true;             // false: <not supported>
    bool counted = true;               // false: <not counted>
    std::optional<double> running_pct; // multiplexing: share of time the counter ran
    std::string note;                  // perf's "# ..." comment
};

struct stat_report {
    std::vector<stat_counter> counters;
    std::optional<double> elapsed_seconds;
    // Derived when both inputs were counted.
    std::optional<double> ipc, cache_miss_pct, branch_miss_pct;

    const stat_counter* find(std::string_view base_event) const noexcept;
    bool scaled() const noexcept; // some counter was multiplexed
};

stat_report parse_perf_stat(std::string_view text);

} // namespace collector
