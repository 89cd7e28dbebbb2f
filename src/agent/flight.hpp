// The flight recorder's parts that hold no I/O: the window of chunks kept on the device, when
// a capture begins, grows and ends, and a reading that stays above a level long enough.
//
//   collection ──chunk──▶ flight_ring (the last N seconds, within a memory cap)
//                               │ a trigger fires (capture_plan::fire → begin)
//                               ▼
//                          the window, then --after seconds of chunks, go out as one session;
//                          a trigger that fires again meanwhile extends it (not a second one)
//
// Sans-IO: times are given, nothing is read or sent here.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <variant>
#include <vector>

namespace agent {

using flight_clock = std::chrono::steady_clock;

// The last `window` of chunks, oldest first, within `memory_cap` bytes. A chunk older than the
// window is let go; past the cap the oldest go too, and the window held is then shorter than
// asked: counted, and said by held_span() — never silently.
class flight_ring {
public:
    // `began`: when the recording began (what the first chunk holds is from then on).
    flight_ring(flight_clock::duration window, std::size_t memory_cap,
                std::optional<flight_clock::time_point> began = std::nullopt);

    // Keeps `chunk`, made at `at` (it holds what perf printed up to then).
    void add(flight_clock::time_point at, std::string chunk);
    // What is held, oldest first; the ring is empty after.
    std::vector<std::string> take();
    // What it holds from now on begins at `at` (a capture's end: what came before was sent).
    void restart(flight_clock::time_point at) { before_front_ = at; }

    std::size_t count() const noexcept { return held_.size(); }
    std::size_t bytes() const noexcept { return bytes_; }
    // From the oldest chunk's start (the chunk before it's time, as far as known) to the newest.
    flight_clock::duration held_span() const;
    // From the oldest chunk's start to `now` (a capture's window: up to the moment it fired).
    flight_clock::duration span_to(flight_clock::time_point now) const;
    // Chunks let go while younger than the window (the memory cap), and their bytes.
    std::uint64_t dropped_for_room() const noexcept { return dropped_for_room_; }
    flight_clock::duration window() const noexcept { return window_; }

private:
    struct held {
        flight_clock::time_point at;
        std::string chunk;
    };
    flight_clock::duration window_;
    std::size_t cap_;
    std::deque<held> held_;
    std::size_t bytes_ = 0;
    std::optional<flight_clock::time_point> before_front_; // the chunk let go last: its time
    std::uint64_t dropped_for_room_ = 0;
};

// When captures begin, grow and end. A trigger that fires while none runs begins one (its
// window, then `after`); one that fires during a capture extends it to `after` past then, up to
// `max_length` from its beginning. At most one capture begins per `min_gap`: a trigger that
// flaps cannot flood the link (its fires are counted).
class capture_plan {
public:
    struct settings {
        flight_clock::duration after = std::chrono::seconds(10);
        flight_clock::duration min_gap = std::chrono::seconds(60);
        flight_clock::duration max_length = std::chrono::minutes(10);
    };
    enum class answer { begun, extended, refused };
    struct fire_record {
        std::string what;
        flight_clock::time_point at;
    };

    explicit capture_plan(settings s);

    answer fire(flight_clock::time_point now, std::string what);
    // The condition that fired still holds: the running capture goes on to `after` past now
    // (within max_length), nothing new said.
    void extend(flight_clock::time_point now);
    // True once, when the running capture's time is over (then none runs).
    bool over(flight_clock::time_point now);

    bool capturing() const noexcept { return capturing_; }
    flight_clock::time_point until() const noexcept { return until_; }
    flight_clock::time_point began() const noexcept { return began_; }
    // What fired during the running (or last) capture, the first its cause (at most
    // max_fires kept; fired() counts them all).
    const std::vector<fire_record>& fires() const noexcept { return fires_; }
    std::uint64_t fired() const noexcept { return fired_; }
    static constexpr std::size_t max_fires = 16;
    std::uint64_t refused() const noexcept { return refused_; }

private:
    settings s_;
    bool capturing_ = false;
    flight_clock::time_point began_{}, until_{};
    std::optional<flight_clock::time_point> last_began_;
    std::vector<fire_record> fires_;
    std::uint64_t fired_ = 0, refused_ = 0;
};

// A reading (a process's CPU in % of a core, the device's memory in use, its load) that stays
// at or above `level` for `hold` fires once; it fires again only after it fell below.
class threshold_trigger {
public:
    threshold_trigger(double level, flight_clock::duration hold);
    // True when this reading makes it fire.
    bool feed(flight_clock::time_point at, double value);
    // Its firing was not taken (a capture refused): the next reading still above fires again.
    void unlatch() noexcept { fired_ = false; }
    // The last reading was at or above the level.
    bool above() const noexcept { return above_since_.has_value(); }
    double level() const noexcept { return level_; }
    flight_clock::duration hold() const noexcept { return hold_; }

private:
    double level_;
    flight_clock::duration hold_;
    std::optional<flight_clock::time_point> above_since_;
    bool fired_ = false;
};

// "PCT[:SECONDS]" (--trigger-cpu 50, 80:3): the level, from above 0 to `max_level`, and how
// long it must hold (1 s when not given; up to an hour); else why not.
struct threshold_spec {
    double level = 0;
    flight_clock::duration hold = std::chrono::seconds(1);
};
std::variant<threshold_spec, std::string> parse_threshold(std::string_view spec, double max_level);

} // namespace agent
