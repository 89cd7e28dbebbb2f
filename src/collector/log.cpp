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
