// Where a comparison's runs come from on this machine: a saved session folder (the collector's
// sessions directory, or one copied from it), a perf script text file, or a perf.data file
// (turned into text by `perf script` as it is read). Blocking; no Asio.
#pragma once

#include "collector/compare/compare.hpp"
#include "collector/result.hpp"

#include <string>

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

// A model's function table as a run: `event` resolved as the UI does.
result<run_table> table_of(const session_model& m, const std::string& event, std::string source);

} // namespace collector::compare
