// ingest: how fast the collector turns perf script text into a queryable profile, and what a
// sample costs to keep.
//
// Builds a capture of at least 200 MB by rewriting real captures (test/collector/fixtures):
// copies are shifted in time and given fresh thread ids, so the profile grows as a long
// session would. Then, on one core:
//   parse+aggregate  MB/s of text through script_parser into a profile
//   retained         bytes per sample held by the sample columns, and by the whole profile
//   views            functions + flame-graph weights over >= 5 M samples (unfiltered, and
//                    filtered by thread, which scans every sample)
//
// Usage: ingest [megabytes, default 256]
#include "collector/model/views.hpp"
#include "collector/parse/perf_script.hpp"

#include "capture.hpp"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

using namespace collector;
using clock_type = std::chrono::steady_clock;

namespace {

double seconds_since(clock_type::time_point t) {
    return std::chrono::duration<double>(clock_type::now() - t).count();
}

} // namespace

int main(int argc, char** argv) {
    const std::size_t target_mb = argc > 1 ? std::strtoul(argv[1], nullptr, 10) : 256;
    const std::string base = bench::base_capture();
    const std::string capture = bench::build_capture(base, target_mb);
    std::printf("capture: %.1f MB of perf script text (rewritten real captures)\n",
                static_cast<double>(capture.size()) / 1e6);

    // Parse in 8 MiB pieces, as chunks would arrive.
    profile prof;
    script_parser parser(prof);
    const auto t0 = clock_type::now();
    const std::size_t piece = 8 << 20;
    for (std::size_t pos = 0; pos < capture.size(); pos += piece)
        parser.feed(std::string_view(capture).substr(pos, piece));
    parser.finish();
    const double parse_s = seconds_since(t0);
    const auto& st = parser.stats();
    std::printf("parse+aggregate: %.0f MB/s (%.2f s, %llu samples, %llu skipped lines, %zu "
                "nodes, %zu sites, %zu functions)\n",
                static_cast<double>(capture.size()) / 1e6 / parse_s, parse_s,
                static_cast<unsigned long long>(st.samples),
                static_cast<unsigned long long>(st.skipped_lines), prof.node_count(),
                prof.site_count(), prof.frame_count());
    std::printf("retained: %.1f bytes/sample in sample columns, %.1f bytes/sample in all\n",
                static_cast<double>(prof.sample_bytes()) / static_cast<double>(st.samples),
                static_cast<double>(prof.memory_bytes()) / static_cast<double>(st.samples));

    // Grow to >= 5 M samples for the views.
    for (int n = 1000; prof.sample_count() < 5000000; ++n)
        parser.feed(bench::rewrite(base, n));
    parser.finish();
    view_filter f;
    auto t1 = clock_type::now();
    const auto fns = functions(prof, f);
    const auto flame = inclusive_weights(prof, node_self_weights(prof, f));
    const double views_ms = seconds_since(t1) * 1000;
    f.tid = prof.sample_tid(0);
    t1 = clock_type::now();
    const auto fns_tid = functions(prof, f);
    const double filtered_ms = seconds_since(t1) * 1000;
    std::printf("views over %zu samples: functions + flame %.1f ms (%zu functions, root %llu); "
                "filtered by thread %.1f ms\n",
                prof.sample_count(), views_ms, fns.rows.size(),
                static_cast<unsigned long long>(flame[0]), filtered_ms);
    std::printf("retained at %zu samples: %.1f bytes/sample in sample columns, %.1f in all\n",
                prof.sample_count(),
                static_cast<double>(prof.sample_bytes()) / static_cast<double>(prof.sample_count()),
                static_cast<double>(prof.memory_bytes()) /
                    static_cast<double>(prof.sample_count()));
    std::printf("targets: >= 700 MB/s, <= 24 bytes/sample, views < 200 ms\n");
    return fns_tid.rows.empty() ? 1 : 0;
}
