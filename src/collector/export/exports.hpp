// Exports that other tools open: a self-contained flame-graph SVG (any browser) and a pprof
// profile (`go tool pprof`, `pprof -http`, Perfetto, Pyroscope). Pure functions of the model.
#pragma once

#include "collector/model/views.hpp"

#include <string>

namespace collector {

// A static flame graph (root at the bottom), one <rect> per call path wide enough to see, each
// with a <title> tooltip; no script, no external reference.
std::string flame_svg(const profile& p, const view_filter& f, const std::string& title);

// pprof's profile.proto, uncompressed (pprof reads both): sample types `samples/count` and
// `<event>/<unit>`, one sample per call path with weight, one location and one function per
// distinct (symbol, module), a mapping per module.
std::string pprof_profile(const profile& p, const view_filter& f);

} // namespace collector
