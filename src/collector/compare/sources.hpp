// Where a comparison's runs come from on this machine: a saved session folder (the collector's
// sessions directory, or one copied from it), a perf script text file, or a perf.data file
// (turned into text by `perf script` as it is read). Blocking; no Asio.
#pragma once

#include "collector/compare/compare.hpp"
#include "collector/result.hpp"

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace collector {
struct session_model;
class symbolizer;
} // namespace collector

namespace collector::compare {

struct source_options {
    std::string event;         // the event to compare (empty: the one with the most samples)
    std::string perf = "perf"; // for perf.data files
    // Names for code the recording could not name (a stripped build: its unstripped twin by
    // build-id, its debug files), as the collector finds them; nullptr leaves it unnamed.
    symbolizer* names = nullptr;
};

// The run at `path`. Failures say what the path is not.
result<run_table> run_from_path(const std::string& path, const source_options& o);

class api_client;
// The run of a session a collector holds (`id`), through its API.
result<run_table> run_from_session(const api_client& api, const std::string& id,
                                   const source_options& o);

// A fleet selection, "fleet:KEY=VALUE&…" (devices=a,b · build=ID · from= · to= · last= ·
// event= · function=), as the collector's fleet store query it is: from/to seconds since the
// epoch or a UTC date (2026-11-30, 2026-11-30T12:00[:00]), last= a span back from `now`
// (3600, 90m, 24h, 7d); the Fleet view's fn= and range= too; values may be percent-encoded
// (%26 for a '&'). `event`: the one asked when the selection names none. The query's
// parameters percent-encoded, in a fixed order; a failure naming what is wrong.
result<std::string> fleet_query(std::string_view selection, std::int64_t now,
                                const std::string& event = {});
// Its samples, from the fleet store of the collector `api` talks to (its functions and call
// paths, weighed by period): one run per device when it holds 2 to 32 (their spread is what
// the runs' dispersion measures), else one. One event: the one named, else the one its devices
// sampled (several: a failure asking to name one). `now`: as fleet_query's.
result<std::vector<run_table>> run_from_fleet(const api_client& api, const std::string& selection,
                                              const source_options& o, std::int64_t now);
// The collector's Fleet view of two fleet selections (fleet_query's) that differ in their build
// alone — the one comparison it draws: base_url/#fleet&build=…&compare=build&base_build=…;
// else "".
std::string fleet_link(const std::string& base_url, const std::string& base,
                       const std::string& cand, std::int64_t now);
// Whether `side` names a fleet selection.
inline bool is_fleet(std::string_view side) {
    return side.starts_with("fleet:");
}

// A model's function table as a run: `event` resolved as the UI does.
result<run_table> table_of(const session_model& m, const std::string& event, std::string source);

} // namespace collector::compare
