// The symbolizer's settings as JSON (GET/PUT /api/config) and the file browser the wizard
// uses to pick binaries and source folders (GET /api/browse), confined to --browse-root.
// Pure functions: no Beast, no sockets.
#pragma once

#include "collector/symbols/symbolizer.hpp"

#include <boost/json/object.hpp>

#include <string>

namespace collector {

boost::json::object config_json(const symbol_config& c, const std::string& browse_root);

// Applies the fields present in `body` ({binaries, source_dirs, path_map:[{from,to}],
// toolchain_prefix, sysroot, inline}); an error message names the first bad field.
std::string update_config(symbol_config& c, const boost::json::object& body);

struct browse_result {
    int status = 200; // 200, 403 outside the root, 404 missing, 400 not a folder
    boost::json::object body;
};

// Lists `path` (absolute, or relative to the root). Symlinks are resolved before the check,
// so no path, `..` or link leads outside the root.
browse_result browse(const std::string& root, const std::string& path);

} // namespace collector
