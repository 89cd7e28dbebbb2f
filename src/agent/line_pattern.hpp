// What a log line must hold for the flight recorder's --trigger-log FILE:REGEX to fire.
//
// A pattern comes from the device's owner but is matched against every line a log gets, as
// root: a backtracking engine (std::regex, Python's re) takes exponential time on patterns such
// as (a+)+$ and one log line would stall the agent. This one compiles the pattern to a program
// and runs every thread of it in step over the line (Thompson's construction, a Pike VM without
// captures): time linear in the line times the program, whatever the pattern.
//
// The syntax (POSIX extended, as grep -E reads it, less what needs backtracking, plus \d \w \s
// and \t as PCRE reads them): literals;
// `.` (any byte); `[abc]`, `[a-z]`, `[^…]`; `\d \w \s \D \W \S`; `\` before any punctuation for
// itself, `\t`, `\n`; groups `( )`; `|`; `* + ?` and `{m}`, `{m,}`, `{m,n}` (n at most 100);
// anchors `^ $`. A match anywhere in the line counts (as grep does). Bytes, case as written.
// The Python agent's LinePattern reads and matches alike (test/agent/line_pattern_test.cpp).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace agent {

class line_pattern {
public:
    // A pattern of at most max_pattern bytes whose program has at most max_program
    // instructions; else why not, in words.
    static std::variant<line_pattern, std::string> compile(std::string_view pattern);

    // Whether the pattern matches somewhere in `line` (its first max_line bytes).
    bool matches(std::string_view line) const;

    // (A line costs its bytes times the program's steps at worst: 16 Mi steps.)
    static constexpr std::size_t max_pattern = 512, max_program = 1024, max_line = 16384;
    static constexpr int max_repeat = 100;

    // The program, one instruction a line (what the tests compare between the two agents).
    std::string listing() const;

private:
    enum class op : std::uint8_t { byte, any, set, split, jump, bol, eol, match };
    struct inst {
        op code;
        std::uint8_t byte = 0;
        std::uint32_t x = 0, y = 0; // split: both; jump: x; set: x is the set's index
    };
    using byte_set = std::array<std::uint64_t, 4>;

    friend class pattern_compiler;
    std::vector<inst> program_;
    std::vector<byte_set> sets_;
};

} // namespace agent
