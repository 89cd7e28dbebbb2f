// What the perf script and perf stat parsers share of reading perf's text.
#pragma once

#include <string_view>

namespace collector {

// `s` without the blanks perf pads its columns with at either end (spaces, tabs, a CR).
inline std::string_view trim_blanks(std::string_view s) noexcept {
    std::size_t b = 0, e = s.size();
    while (b < e && (s[b] == ' ' || s[b] == '\t' || s[b] == '\r'))
        ++b;
    while (e > b && (s[e - 1] == ' ' || s[e - 1] == '\t' || s[e - 1] == '\r'))
        --e;
    return s.substr(b, e - b);
}

} // namespace collector
