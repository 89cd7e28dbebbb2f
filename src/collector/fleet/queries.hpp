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
};

// From a request's query: devices=a,b  from=SECONDS  to=SECONDS  event=NAME  build=HEX.
result<fleet_filter> parse_fleet_filter(const std::map<std::string, std::string>& query);

// {"devices": [{"device", "samples", "first_sec", "last_sec", "events": [...], "builds":
// [...]}]}: every device the store has samples of (within the filter), busiest first.
std::string fleet_devices_sql(std::string_view database, const fleet_filter& f);
result<boost::json::object> fleet_devices_json(std::string_view answer);

// {"samples", "period", "functions": [{"name", "module", "self", "total", "self_period",
// "total_period"}]}: functions by inclusive samples (a function counted once a stack, however
// often it recurs), at most `limit`.
std::string fleet_functions_sql(std::string_view database, const fleet_filter& f,
                                std::size_t limit);
result<boost::json::object> fleet_functions_json(std::string_view answer);

} // namespace collector
