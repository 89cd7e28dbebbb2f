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

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

using namespace collector;
using clock_type = std::chrono::steady_clock;

namespace {

std::string read(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

// Copy `n` of a capture: every header's time moves by `n` seconds and its tid by 100000 * n;
// function names get one of 512 suffixes, so the profile holds tens of thousands of
// functions and stacks as a large program would.
std::string rewrite(const std::string& text, int n) {
    std::string out;
    out.reserve(text.size() + text.size() / 50);
    std::size_t pos = 0;
    while (pos < text.size()) {
        const auto nl = text.find('\n', pos);
        const auto end = nl == std::string::npos ? text.size() : nl + 1;
        std::string_view line(text.data() + pos, end - pos);
        const auto slash = line.find('/');
        if (!line.empty() && line[0] != '\t' && line[0] != '\n' && slash != std::string::npos) {
            // "... pid/tid ... time: ..." : bump the tid digits' value
            std::size_t tid_end = slash + 1;
            while (tid_end < line.size() && line[tid_end] >= '0' && line[tid_end] <= '9')
                ++tid_end;
            const long tid =
                std::atol(std::string(line.substr(slash + 1, tid_end - slash - 1)).c_str());
            out.append(line.substr(0, slash + 1));
            out.append(std::to_string(tid + 100000L * n));
            // shift the integer seconds of the time
            const auto colon = line.find(": ", tid_end);
            const auto dot = line.rfind('.', colon);
            auto sec_begin = line.rfind(' ', dot) + 1;
            out.append(line.substr(tid_end, sec_begin - tid_end));
            const long secs =
                std::atol(std::string(line.substr(sec_begin, dot - sec_begin)).c_str());
            out.append(std::to_string(secs + n));
            out.append(line.substr(dot));
        } else if (!line.empty() && line[0] == '\t') {
            const auto plus = line.rfind("+0x");
            if (plus != std::string_view::npos) {
                out.append(line.substr(0, plus));
                out.append("_v");
                out.append(std::to_string(n % 512));
                out.append(line.substr(plus));
            } else {
                out.append(line);
            }
        } else {
            out.append(line);
        }
        pos = end;
    }
    return out;
}

double seconds_since(clock_type::time_point t) {
    return std::chrono::duration<double>(clock_type::now() - t).count();
}

} // namespace

int main(int argc, char** argv) {
    const std::size_t target_mb = argc > 1 ? std::strtoul(argv[1], nullptr, 10) : 256;
    const std::string dir = std::string(PERFWIRE_SOURCE_DIR) + "/test/collector/fixtures/";
    const std::string base = read(dir + "callchain_fields.txt") +
                             read(dir + "system_wide_cpu.txt") + read(dir + "default_format.txt");
    std::string capture;
    capture.reserve(target_mb << 20);
    for (int n = 0; capture.size() < (target_mb << 20); ++n)
        capture += rewrite(base, n);
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
                "nodes, %zu functions)\n",
                static_cast<double>(capture.size()) / 1e6 / parse_s, parse_s,
                static_cast<unsigned long long>(st.samples),
                static_cast<unsigned long long>(st.skipped_lines), prof.node_count(),
                prof.frame_count());
    std::printf("retained: %.1f bytes/sample in sample columns, %.1f bytes/sample in all\n",
                static_cast<double>(prof.sample_bytes()) / static_cast<double>(st.samples),
                static_cast<double>(prof.memory_bytes()) / static_cast<double>(st.samples));

    // Grow to >= 5 M samples for the views.
    for (int n = 1000; prof.sample_count() < 5000000; ++n)
        parser.feed(rewrite(base, n));
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
    std::printf("targets: >= 500 MB/s, <= 24 bytes/sample, views < 200 ms\n");
    return fns_tid.rows.empty() ? 1 : 0;
}
