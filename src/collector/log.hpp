// The collector's log: one line per event on stderr, "perfwire-collector: [peer] what".
//
// Peers choose what is logged (a flood of connections each says "connected" and "gone"), so
// the log is rate-limited: lines of one shape (the text with its digits and the peer left out)
// have a bucket of their own, and all lines share one more. A line past either is counted,
// not written; the count is told with the next line of its shape that is written, and the
// lines lost to the shared bucket with the next line written at all.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>

namespace collector {

void log(std::string_view what);
void log(std::string_view who, std::string_view what);

// `line` as the log writes it: peers choose names, paths and messages, so a control character
// (a newline, a terminal's escape sequence) is shown as \xNN and no peer writes a line of its
// own or moves the terminal's cursor.
std::string printable(std::string_view line);

// A peer's short text (a reason, a label) as the collector keeps and shows it: at most `max`
// bytes cut where a character ends, invalid UTF-8, control characters (C0, DEL, C1) and the
// bidirectional overrides and isolates each one '?'.
std::string peer_text(std::string_view text, std::size_t max);

class log_limiter {
public:
    struct rates {
        double shape_burst = 50, shape_per_second = 5;
        double all_burst = 2000, all_per_second = 50;
    };
    using clock = std::chrono::steady_clock;

    log_limiter() = default;
    explicit log_limiter(rates r)
        : rates_(r) {}

    // Whether the line `what` may be written now; if so, `note` is what to add to it (lines
    // of its shape not shown since the last one) and `lost` the lines of any shape not shown
    // for want of the shared bucket since the last line written.
    bool admit(std::string_view what, clock::time_point now, std::string& note,
               std::uint64_t& lost);

    // "[peer] agent connected (t12)" and "[peer] agent connected (t13)": one shape.
    static std::string shape(std::string_view what);

private:
    struct bucket {
        double tokens = -1; // full at first use
        clock::time_point at{};
        std::uint64_t hidden = 0;
        bool take(double burst, double per_second, clock::time_point now);
    };
    static constexpr std::size_t max_shapes = 4096;
    rates rates_;
    std::unordered_map<std::string, bucket> shapes_;
    bucket all_;
};

} // namespace collector
