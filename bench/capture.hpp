// The benchmarks' input: perf script text of any size, rewritten from the real captures in
// test/collector/fixtures. Each copy is shifted in time, given fresh thread ids and one of 512
// suffixes on every function name, so the profile holds tens of thousands of functions and
// stacks as a large program would.
#pragma once

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <string_view>

namespace bench {

inline std::string read(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

// Copy `n` of a capture: every header's time moves by `n` seconds and its tid by 100000 * n;
// function names get one of 512 suffixes.
inline std::string rewrite(const std::string& text, int n) {
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

// The three real captures the benchmarks start from.
inline std::string base_capture() {
    const std::string dir = std::string(PERFWIRE_SOURCE_DIR) + "/test/collector/fixtures/";
    return read(dir + "callchain_fields.txt") + read(dir + "system_wide_cpu.txt") +
           read(dir + "default_format.txt");
}

// At least `megabytes` MiB of text, copies of `base` one after another.
inline std::string build_capture(const std::string& base, std::size_t megabytes) {
    std::string capture;
    capture.reserve((megabytes << 20) + base.size() * 2);
    for (int n = 0; capture.size() < (megabytes << 20); ++n)
        capture += rewrite(base, n);
    return capture;
}

} // namespace bench
