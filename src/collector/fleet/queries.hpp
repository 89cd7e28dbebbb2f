// What the Fleet view asks of the fleet store, as ClickHouse SQL, and the answers as the API's
// JSON. Pure functions: no I/O (the caller runs the SQL, fleet/clickhouse.hpp).
//
// Every query filters the samples the same way (fleet_filter): devices, a time range, an event,
// a build. A build selects the samples whose stack holds a frame of that build, so "the
// aarch64 boards running build X" is one filter whatever library the time is spent in.
#pragma once

#include "collector/result.hpp"

#include <boost/json/fwd.hpp>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace collector {

struct fleet_filter {
    std::vector<std::string> devices;     // empty: every device
    std::optional<std::uint64_t> from_ns; // sample time ≥ (ns since the epoch)
    std::optional<std::uint64_t> to_ns;   // sample time <
    std::string event;                    // empty: every event
    std::string build;                    // a build-id (hex); empty: every build
    std::string function;                 // stacks through a function of this name; empty: all
};

// From a request's query: devices=a,b  from=SECONDS  to=SECONDS  event=NAME  build=HEX
// function=NAME.
result<fleet_filter> parse_fleet_filter(const std::map<std::string, std::string>& query);
// What a comparison is against: `f` with each key given as base_KEY (base_devices, base_from,
// base_to, base_event, base_build) in place of its own; none when no base_ key is given. Two
// time ranges: base_from and base_to; two builds: base_build.
result<std::optional<fleet_filter>>
parse_fleet_baseline(const std::map<std::string, std::string>& query, const fleet_filter& f);

// {"devices": [{"device", "samples", "first_sec", "last_sec", "events": [...], "builds":
// [...]}]}: every device the store has samples of (within the filter), busiest first.
std::string fleet_devices_sql(std::string_view database, const fleet_filter& f);
// The module each build-id the filter's samples name belongs to (a build is listed by its
// file, not as a bare hash).
std::string fleet_build_modules_sql(std::string_view database, const fleet_filter& f);
result<boost::json::object> fleet_devices_json(std::string_view answer,
                                               std::string_view build_modules);

// {"samples", "period", "functions": [{"name", "module", "self", "total", "self_period",
// "total_period"}]}: functions by inclusive samples (a function counted once a stack, however
// often it recurs), at most `limit`.
std::string fleet_functions_sql(std::string_view database, const fleet_filter& f,
                                std::size_t limit);
result<boost::json::object> fleet_functions_json(std::string_view answer);
// The functions of `baseline` (an answer of fleet_functions_sql) beside those of `body`: each
// row gains baseline_self_pct, baseline_total_pct, delta_self_pct and delta_total_pct.
void fleet_compare_functions(boost::json::object& body, const boost::json::object& baseline);

// The flame graph: the stacks the filter selects with their samples and period (the busiest
// `max_stacks`), each with its process (`by_process`: the name of its process's main thread,
// else of any of its threads; else ''), and the names of their frames.
std::string fleet_stacks_sql(std::string_view database, const fleet_filter& f,
                             std::size_t max_stacks, bool by_process = true);
std::string fleet_frames_sql(std::string_view database, const fleet_filter& f);
struct fleet_flame_shape {
    bool inverted = false; // callers under their callees (the leaf at the root's children)
    // A level per process (by name) under the root (top-down) or at the stacks' ends
    // (bottom-up): one device's whole system, or several programs, are not one tree.
    bool by_process = true;
    bool period = false; // weighed by period (ns for the clocks), not samples
    double min_pct = 0;  // frames under this share of the whole are not sent (counted)
};
// As the sessions' flame graph answers: {"root": {name, module, value, self, samples,
// children}, "total", "samples", "inverted", "small_frames_hidden", "stacks_left_out"}; with a
// baseline's answers, each node also has baseline_pct and delta_pct (points of the total).
struct fleet_answers {
    std::string stacks, frames;
};
result<boost::json::object> fleet_flame_json(const fleet_answers& now,
                                             const fleet_answers* baseline,
                                             const fleet_flame_shape& shape,
                                             std::size_t max_stacks);

} // namespace collector
