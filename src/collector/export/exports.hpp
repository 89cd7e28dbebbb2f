// Exports that other tools open: collapsed stacks (flamegraph.pl, inferno), speedscope's JSON,
// a self-contained flame-graph SVG (any browser) and a pprof profile (`go tool pprof`,
// `pprof -http`, Perfetto, Pyroscope). Pure functions of the model.
#pragma once

#include "collector/model/views.hpp"

#include <cstdint>
#include <map>
#include <string>

namespace collector {

// "a;b;c <weight>" lines, root first: the input of flamegraph.pl and friends; `by_thread`
// adds a root frame per thread ("demo-hash-4242").
std::string collapsed_text(const profile& p, const view_filter& f, bool by_thread = false);

// speedscope's sampled format, one profile per thread (busiest first) with its samples in the
// order they were taken, each weighing its period (or 1), stacks outermost frame first.
std::string speedscope_json(const profile& p, const view_filter& f, const std::string& name);

// `s` as XML text or attribute value (control characters, which XML 1.0 refuses, left out).
void xml_escape(std::string& out, std::string_view s);

// A static flame graph (root at the bottom), one <rect> per call path wide enough to see, each
// with a <title> tooltip; no script, no external reference.
std::string flame_svg(const profile& p, const view_filter& f, const std::string& title);

class symbolizer;

struct pprof_sources {
    symbolizer* symbols = nullptr; // addresses and source lines; none: functions only
    const std::map<std::string, std::string>* build_ids = nullptr; // device module -> build-id
    std::uint64_t start_unix_ns = 0;   // wall clock at the first sample; 0: not known
    std::string missing_build_id = {}; // for modules without one (session_model::build_id_of)
};

// pprof's profile.proto, gzip-compressed as `go tool pprof` and friends expect: sample types
// `samples/count` and `<event>/<unit>`; one sample per call path and sampled instruction;
// the leaf's location with its address and source lines (inlined functions as pprof lines),
// callers at function level; a mapping per module with the device's build-id.
std::string pprof_profile(const profile& p, const view_filter& f, const pprof_sources& src = {});

} // namespace collector
