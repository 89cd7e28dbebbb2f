// GET /api/sessions/{id}/source: where in the source the samples landed.
//
// Every site (leaf function + offset) of the chosen event goes through the symbolizer; the
// weights add up per file and per line. Without `file` (or `function`) the answer lists the
// files; with one it gives that file's lines: all of them up to 2000, else the hottest ± 100.
// Files are only ever those the debug info named, so a request cannot open anything else.
// The view's thread and time filters apply as everywhere else.
#pragma once

#include "collector/model/views.hpp"
#include "collector/symbols/symbolizer.hpp"

#include <boost/json/value.hpp>

#include <map>
#include <string>

namespace collector {

struct source_request {
    std::string file;     // a path as the debug info names it
    std::string function; // or: the file where this function's samples fall most
};

struct source_answer {
    int status = 200;        // 200, or 404 when the file is not among the symbolized ones
    boost::json::value body; // the API's error shape when not 200
};

// `device_build_ids` (module path -> build-id, from the agent's `binaries` metrics) picks the
// build each module's symbols must come from (locate.hpp). "binaries" lists, for the
// profile's modules, the file used and where it was found, or what was tried and the fix;
// a module with frames still unnamed is named in "warnings". `missing_build_id`: what a module
// the agent reported no build-id for is looked up with (session_model::build_id_of).
source_answer source_view(const profile& p, const view_filter& f, symbolizer& symbols,
                          const source_request& req,
                          const std::map<std::string, std::string>& device_build_ids = {},
                          const std::string& missing_build_id = {});

} // namespace collector
