// The symbolizer's settings as JSON (GET/PUT /api/config) and the file browser the wizard
// uses to pick binaries and source folders (GET /api/browse), confined to --browse-root.
// Pure functions: no Beast, no sockets.
#pragma once

#include "collector/options.hpp"
#include "collector/result.hpp"
#include "collector/symbols/symbolizer.hpp"

#include <boost/json/object.hpp>

#include <string>
#include <vector>

namespace collector {

// Toolchain prefixes on `path_env` (PATH): every X-addr2line with an X-readelf beside it, the
// native pair as "", and `given` (--toolchain-prefix) whatever it is. Sorted, unique.
std::vector<std::string> find_toolchains(const std::string& path_env, const std::string& given);

boost::json::object config_json(const symbol_config& c, const config_limits& limits);

// Applies the fields present in `body` ({binaries, source_dirs, path_map:[{from,to}],
// toolchain_prefix, sysroot, inline}) within `limits`; a bad_config failure names the first bad
// field, and nothing is applied then.
result<> update_config(symbol_config& c, const boost::json::object& body,
                       const config_limits& limits);

struct browse_result {
    int status = 200; // 200, 403 outside the root, 404 missing, 400 not a folder
    boost::json::object body;
};

// Lists `path` (absolute, or relative to the root). Symlinks are resolved before the check,
// so no path, `..` or link leads outside the root.
browse_result browse(const std::string& root, const std::string& path);

} // namespace collector
