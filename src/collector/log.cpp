#include "collector/log.hpp"

#include <algorithm>
#include <iostream>
#include <mutex>
#include <utility>

namespace collector {

namespace {

std::mutex writing;
log_limiter limiter;

void write(std::string_view shape_of, std::string line) {
    std::string note;
    std::uint64_t lost = 0;
    {
        std::lock_guard lock(writing);
        if (!limiter.admit(shape_of, log_limiter::clock::now(), note, lost))
            return;
    }
    std::string out;
    if (lost)
        out = "perfwire-collector: " + std::to_string(lost) +
              " log lines not shown (more than the log takes a second)\n";
    out += "perfwire-collector: ";
    out += printable(line);
    out += note;
    out += '\n';
    std::cerr << out; // one write: lines from the pool's threads do not interleave
}

} // namespace

bool log_limiter::bucket::take(double burst, double per_second, clock::time_point now) {
    if (tokens < 0)
        tokens = burst;
    else
        tokens =
            std::min(burst, tokens + per_second * std::chrono::duration<double>(now - at).count());
    at = now;
    if (tokens < 1)
        return false;
    tokens -= 1;
    return true;
}

std::string log_limiter::shape(std::string_view what) {
    std::string out;
    out.reserve(std::min<std::size_t>(what.size(), 160));
    for (const char c : what.substr(0, 160))
        if (c < '0' || c > '9')
            out += c;
    return out;
}

bool log_limiter::admit(std::string_view what, clock::time_point now, std::string& note,
                        std::uint64_t& lost) {
    note.clear();
    lost = 0;
    if (shapes_.size() >= max_shapes)
        shapes_.clear(); // as many shapes as that is a flood itself: start over, not grow
    auto& b = shapes_[shape(what)];
    if (!b.take(rates_.shape_burst, rates_.shape_per_second, now)) {
        ++b.hidden;
        return false;
    }
    if (!all_.take(rates_.all_burst, rates_.all_per_second, now)) {
        ++all_.hidden;
        return false;
    }
    if (b.hidden)
        note = " [" + std::to_string(std::exchange(b.hidden, 0)) + " more like this not shown]";
    lost = std::exchange(all_.hidden, 0);
    return true;
}

std::string printable(std::string_view line) {
    std::string out;
    out.reserve(line.size());
    for (const char c : line) {
        const auto u = static_cast<unsigned char>(c);
        if (u >= 0x20 && u != 0x7f) {
            out += c;
            continue;
        }
        static constexpr char hex[] = "0123456789abcdef";
        out += "\\x";
        out += hex[u >> 4];
        out += hex[u & 15];
    }
    return out;
}

std::string peer_text(std::string_view text, std::size_t max) {
    std::string out;
    for (std::size_t i = 0; i < text.size();) {
        const auto u = static_cast<unsigned char>(text[i]);
        const std::size_t n = u < 0x80         ? 1
                              : (u >> 5) == 6  ? 2
                              : (u >> 4) == 14 ? 3
                              : (u >> 3) == 30 ? 4
                                               : 0;
        bool valid = n != 0 && i + n <= text.size();
        std::uint32_t cp = n == 1 ? u : n ? (u & (0x7f >> n)) : 0;
        for (std::size_t k = 1; valid && k < n; ++k) {
            const auto c = static_cast<unsigned char>(text[i + k]);
            valid = (c & 0xc0) == 0x80;
            cp = cp << 6 | (c & 0x3f);
        }
        // Overlong forms, surrogates and past U+10FFFF are not characters.
        valid = valid && !(n == 2 && cp < 0x80) && !(n == 3 && cp < 0x800) &&
                !(n == 4 && (cp < 0x10000 || cp > 0x10ffff)) && !(cp >= 0xd800 && cp < 0xe000);
        const bool control = cp < 0x20 || (cp >= 0x7f && cp < 0xa0);
        const bool bidi = (cp >= 0x202a && cp <= 0x202e) || (cp >= 0x2066 && cp <= 0x2069);
        const std::size_t take = valid ? n : 1;
        const std::string_view as = valid && !control && !bidi ? text.substr(i, n) : "?";
        if (out.size() + as.size() > max)
            break;
        out += as;
        i += take;
    }
    return out;
}

void log(std::string_view what) {
    write(what, std::string(what));
}

void log(std::string_view who, std::string_view what) {
    std::string line = "[";
    line += who;
    line += "] ";
    line += what;
    write(what, std::move(line));
}

} // namespace collector
