// Imports a recording as a saved session: a perf.data file (turned into text by
// `perf script`) or perf script text. Blocking: run it on the thread pool, not the I/O thread.
#pragma once

#include "collector/store/session_store.hpp"

#include <string>
#include <utility>

namespace collector {

struct import_result {
    std::string session_id; // empty on failure
    std::string error;
};

import_result import_recording(session_store& store, const std::string& path,
                               const std::string& display_name, const std::string& perf = "perf");

} // namespace collector
