#include "agent/flight.hpp"

#include <charconv>
#include <cmath>

namespace agent {

flight_ring::flight_ring(flight_clock::duration window, std::size_t memory_cap,
                         std::optional<flight_clock::time_point> began)
    : window_(window)
    , cap_(memory_cap)
    , before_front_(began) {}

void flight_ring::add(flight_clock::time_point at, std::string chunk) {
    bytes_ += chunk.size();
    held_.push_back({at, std::move(chunk)});
    const auto let_go = [this] {
        before_front_ = held_.front().at;
        bytes_ -= held_.front().chunk.size();
        held_.pop_front();
    };
    // A chunk that ended before the window began holds nothing of it.
    while (held_.size() > 1 && held_.front().at < at - window_)
        let_go();
    while (held_.size() > 1 && bytes_ > cap_) {
        ++dropped_for_room_;
        let_go();
    }
}

std::vector<std::string> flight_ring::take() {
    std::vector<std::string> out;
    out.reserve(held_.size());
    for (auto& h : held_)
        out.push_back(std::move(h.chunk));
    if (!held_.empty())
        before_front_ = held_.back().at;
    held_.clear();
    bytes_ = 0;
    return out;
}

flight_clock::duration flight_ring::held_span() const {
    if (held_.empty())
        return {};
    return held_.back().at - before_front_.value_or(held_.front().at);
}

flight_clock::duration flight_ring::span_to(flight_clock::time_point now) const {
    if (held_.empty())
        return {};
    return std::max(now - before_front_.value_or(held_.front().at), held_span());
}

capture_plan::capture_plan(settings s)
    : s_(s) {
    s_.after = std::min(s_.after, s_.max_length);
}

capture_plan::answer capture_plan::fire(flight_clock::time_point now, std::string what) {
    if (capturing_) {
        ++fired_;
        if (fires_.size() < max_fires)
            fires_.push_back({std::move(what), now});
        // Never shorter than it was; never past max_length from its beginning.
        until_ = std::max(until_, std::min(now + s_.after, began_ + s_.max_length));
        return answer::extended;
    }
    if (last_began_ && now - *last_began_ < s_.min_gap) {
        ++refused_;
        return answer::refused;
    }
    capturing_ = true;
    began_ = now;
    last_began_ = now;
    until_ = now + s_.after;
    fires_.clear();
    fires_.push_back({std::move(what), now});
    fired_ = 1;
    return answer::begun;
}

void capture_plan::extend(flight_clock::time_point now) {
    if (capturing_)
        until_ = std::max(until_, std::min(now + s_.after, began_ + s_.max_length));
}

bool capture_plan::over(flight_clock::time_point now) {
    if (!capturing_ || now < until_)
        return false;
    capturing_ = false;
    return true;
}

threshold_trigger::threshold_trigger(double level, flight_clock::duration hold)
    : level_(level)
    , hold_(hold) {}

bool threshold_trigger::feed(flight_clock::time_point at, double value) {
    if (!(value >= level_)) { // (NaN is below)
        above_since_.reset();
        fired_ = false;
        return false;
    }
    if (!above_since_)
        above_since_ = at;
    if (fired_ || at - *above_since_ < hold_)
        return false;
    fired_ = true;
    return true;
}

std::variant<threshold_spec, std::string> parse_threshold(std::string_view spec, double max_level) {
    const auto colon = spec.find(':');
    const auto level_text = spec.substr(0, colon);
    const auto number = [](std::string_view t, double& out) {
        // (from_chars for double: GCC 12 has it)
        const auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), out);
        return ec == std::errc() && end == t.data() + t.size() && std::isfinite(out);
    };
    threshold_spec s;
    if (!number(level_text, s.level) || !(s.level > 0 && s.level <= max_level))
        return "the level must be a number above 0 and at most " +
               std::to_string(static_cast<long long>(max_level)) + ": '" + std::string(level_text) +
               "'";
    if (colon != std::string_view::npos) {
        double seconds = 0;
        if (!number(spec.substr(colon + 1), seconds) || !(seconds >= 0 && seconds <= 3600))
            return "how long it must hold is seconds from 0 to 3600: '" +
                   std::string(spec.substr(colon + 1)) + "'";
        s.hold = std::chrono::duration_cast<flight_clock::duration>(
            std::chrono::duration<double>(seconds));
    }
    return s;
}

} // namespace agent
