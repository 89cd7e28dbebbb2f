// What the perf script and perf stat parsers share of reading perf's text.
#pragma once

#include <cstdint>
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

inline bool is_digit(char c) noexcept {
    return c >= '0' && c <= '9';
}
inline bool is_hex(char c) noexcept {
    return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

inline int hex_value(char c) noexcept {
    if (is_digit(c))
        return c - '0';
    return (c | 0x20) - 'a' + 10;
}

// Up to 16 hex digits.
inline std::uint64_t hex_u64(std::string_view digits) noexcept {
    std::uint64_t v = 0;
    for (const char c : digits)
        v = v * 16 + static_cast<std::uint64_t>(hex_value(c));
    return v;
}

} // namespace collector
