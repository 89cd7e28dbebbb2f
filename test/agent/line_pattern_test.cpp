// The flight recorder's log patterns (agent/line_pattern.hpp): grep -E's meaning, refused
// where it would need backtracking, linear whatever the pattern, the two agents alike.
#include "agent/line_pattern.hpp"
#include "support/fixtures.hpp"
#include "support/spawn.hpp"

#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <variant>
#include <vector>

using agent::line_pattern;

namespace {

line_pattern compiled(const std::string& p) {
    auto r = line_pattern::compile(p);
    INFO(p << ": " << (std::holds_alternative<std::string>(r) ? std::get<std::string>(r) : ""));
    REQUIRE(std::holds_alternative<line_pattern>(r));
    return std::get<line_pattern>(std::move(r));
}

std::string refused(const std::string& p) {
    const auto r = line_pattern::compile(p);
    return std::holds_alternative<std::string>(r) ? std::get<std::string>(r) : "(compiled)";
}

struct vector_case {
    const char* pattern;
    const char* line;
    bool match;
};

// What GNU grep 3.8 -E answers for each (LC_ALL=C), but for \d and \t, which grep -E does not
// know: they mean what Python's re and PCRE make of them.
const vector_case cases[] = {
    {"watchdog", "kernel: watchdog: BUG: soft lockup", true},
    {"watchdog", "all quiet", false},
    {"^ERROR", "ERROR: disk", true},
    {"^ERROR", "an ERROR", false},
    {"done$", "all done", true},
    {"done$", "done twice", false},
    {"^$", "", true},
    {"a.c", "xabcx", true},
    {"a.c", "ac", false},
    {"colou?r", "color", true},
    {"colou?r", "colour", true},
    {"colou?r", "colouur", false},
    {"ab+c", "ac", false},
    {"ab+c", "abbbc", true},
    {"ab*c", "ac", true},
    {"(cat|dog)s", "hot dogs", true},
    {"(cat|dog)s", "cows", false},
    {"x{3}", "axxb", false},
    {"x{3}", "axxxb", true},
    {"^x{2,3}$", "xxxx", false},
    {"^x{2,}$", "xxxxxx", true},
    {"^(ab){1,2}$", "ababab", false},
    {"[0-9]+ ms", "took 250 ms", true},
    {"[^a-z]", "abc", false},
    {"[^a-z]", "abC", true},
    {"[]x]", "]", true},
    {"[a-]", "-", true},
    {"\\d{3}-\\d{4}", "call 555-1234 now", true},
    {"\\w+@\\w+", "mail bob@host", true},
    {"\\s\\S", "a b", true},
    {"\\.", "abc", false},
    {"\\.", "a.c", true},
    {"[[:digit:]]+", "v12", true},
    {"[[:upper:]][[:lower:]]", "aB", false},
    {"[[:upper:]][[:lower:]]", "Ab", true},
    {"\\{\"level\":\"error\"", "{\"level\":\"error\",\"msg\":1}", true},
    {"a{", "a{", true},
    {"()", "anything", true},
    {"(a|)b", "b", true},
    {"(a*)*b", "aaaac", false},
    {"t\\tx", "t\tx", true},
    {"\xc3\xa9t\xc3\xa9", "\xc3\xa9t\xc3\xa9", true},
};

const char* const bad[][2] = {
    {"(a", "unbalanced '('"},
    {"a)", "unbalanced ')'"},
    {"*a", "nothing to repeat before '*'"},
    {"a|+", "nothing to repeat before '+'"},
    {"(a)\\1", "back-references (\\1) are not supported"},
    {"[z-a]", "a range from 'z' down to 'a'"},
    {"[abc", "a '[' without its ']'"},
    {"a{2,1}", "a repetition {m,n} needs m <= n <= 100"},
    {"a{101}", "a repetition {m,n} needs m <= n <= 100"},
    {"a{2", "a repetition {m,n} without its '}'"},
    {"\\q", "unknown escape \\q"},
    {"a\\", "a '\\' at the end"},
    {"[[:nope:]]", "unknown class [:nope:]"},
    {"((a{100}){100}){100}", "the pattern makes more than 1024 steps (its repetitions multiply)"},
    {"(((((){100}){100}){100}){100}){100}",
     "the pattern makes more than 1024 steps (its repetitions multiply)"},
    {"((a{0}){100}){100}", "the pattern makes more than 1024 steps (its repetitions multiply)"},
};

} // namespace

TEST_CASE("log patterns match as grep -E does", "[agent][flight][line_pattern]") {
    for (const auto& c : cases) {
        INFO(c.pattern << " on " << c.line);
        CHECK(compiled(c.pattern).matches(c.line) == c.match);
    }
}

TEST_CASE("log patterns that need backtracking, or that would grow without bound, are refused "
          "with the reason",
          "[agent][flight][line_pattern]") {
    for (const auto& b : bad)
        CHECK(refused(b[0]) == b[1]);
    CHECK(refused(std::string(513, 'a')) == "the pattern is longer than 512 bytes");
    CHECK(refused(std::string(101, '(') + std::string(101, ')')) ==
          "groups nested deeper than 100");
}

TEST_CASE("a pattern that takes a backtracking engine exponential time is one pass here",
          "[agent][flight][line_pattern]") {
    // (a+)+$ against a's without an end: std::regex and Python's re try every split of them (2^n);
    // here each byte steps every thread once. (The whole suite would hang if it did not.)
    const auto p = compiled("(a+)+$");
    const std::string line = std::string(line_pattern::max_line - 1, 'a') + "!";
    CHECK_FALSE(p.matches(line));
    CHECK(p.matches(std::string(line_pattern::max_line - 1, 'a')));
    CHECK(compiled("(x|x|x|x)*y").matches(std::string(line_pattern::max_line - 1, 'x') + "y"));
    // Only the first 16 KiB of a line is read.
    CHECK_FALSE(compiled("needle").matches(std::string(line_pattern::max_line, ' ') + "needle"));
}

TEST_CASE("the Python agent reads and matches log patterns as the C++ agent does",
          "[agent][flight][line_pattern][python]") {
    test_support::temp_dir dir;
    // Each pattern: its program's listing or its error; then one bit per line.
    std::vector<std::string> patterns, lines;
    for (const auto& c : cases) {
        patterns.emplace_back(c.pattern);
        lines.emplace_back(c.line);
    }
    for (const auto& b : bad)
        patterns.emplace_back(b[0]);
    patterns.emplace_back(std::string(101, '(') + std::string(101, ')'));
    std::string want;
    for (const auto& p : patterns) {
        const auto r = line_pattern::compile(p);
        if (const auto* why = std::get_if<std::string>(&r)) {
            want += "error: " + *why + "\n";
            continue;
        }
        const auto& lp = std::get<line_pattern>(r);
        want += lp.listing();
        for (const auto& l : lines)
            want += lp.matches(l) ? '1' : '0';
        want += "\n";
    }
    // Patterns and lines as files of NUL-separated bytes.
    const auto joined = [](const std::vector<std::string>& v) {
        std::string s;
        for (const auto& x : v)
            s += x + '\0';
        return s;
    };
    const auto pf = dir.path / "patterns", lf = dir.path / "lines", out = dir.path / "out";
    std::ofstream(pf, std::ios::binary) << joined(patterns);
    std::ofstream(lf, std::ios::binary) << joined(lines);
    test_support::spawned python(
        PERFWIRE_PYTHON,
        {"-c",
         "import sys; sys.path.insert(0, sys.argv[1]); import perfwire_agent as a\n"
         "ps = open(sys.argv[2], 'rb').read().split(b'\\0')[:-1]\n"
         "ls = open(sys.argv[3], 'rb').read().split(b'\\0')[:-1]\n"
         "out = []\n"
         "for p in ps:\n"
         "    try:\n"
         "        lp = a.LinePattern(p)\n"
         "    except a.LinePattern.Error as e:\n"
         "        out.append('error: %s\\n' % e); continue\n"
         "    out.append(lp.listing() + ''.join('1' if lp.matches(l) else '0' for l in ls) + "
         "'\\n')\n"
         "sys.stdout.buffer.write(''.join(out).encode('latin-1'))",
         std::filesystem::path(PERFWIRE_PYTHON_AGENT).parent_path().string(), pf.string(),
         lf.string()},
        out.string());
    REQUIRE(python.wait(std::chrono::seconds(60)) == 0);
    std::ifstream got(out, std::ios::binary);
    std::stringstream text;
    text << got.rdbuf();
    CHECK(text.str() == want);
}
