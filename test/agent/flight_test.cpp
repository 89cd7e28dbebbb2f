// The flight recorder's window, captures and thresholds (agent/flight.hpp), on given times.
#include "agent/flight.hpp"

#include <catch2/catch.hpp>

#include <cmath>
#include <string>
#include <variant>

using namespace agent;
using namespace std::chrono_literals;

namespace {

const flight_clock::time_point t0{};

} // namespace

TEST_CASE("the flight ring holds the last window of chunks, and says when its memory cut it "
          "shorter",
          "[agent][flight]") {
    flight_ring ring(2s, 1000);
    for (int i = 1; i <= 12; ++i) // a chunk every third of a second, 4 s in all
        ring.add(t0 + i * 333ms, std::string(10, static_cast<char>('a' + i)));
    // The chunks that end within the last 2 s, and the one the window begins in.
    CHECK(ring.count() == 7);
    CHECK(ring.held_span() >= 2s);
    CHECK(ring.held_span() < 2s + 333ms);
    CHECK(ring.bytes() == 70);
    CHECK(ring.dropped_for_room() == 0);
    const auto taken = ring.take();
    REQUIRE(taken.size() == 7);
    CHECK(taken.front() == std::string(10, static_cast<char>('a' + 6)));
    CHECK(taken.back() == std::string(10, static_cast<char>('a' + 12)));
    CHECK(ring.count() == 0);
    CHECK(ring.bytes() == 0);

    // Past its memory: the oldest go, counted, and the span held says how much is left.
    flight_ring small(10s, 100);
    for (int i = 1; i <= 30; ++i)
        small.add(t0 + i * 333ms, std::string(30, 'x'));
    CHECK(small.count() == 3);
    CHECK(small.bytes() == 90);
    CHECK(small.dropped_for_room() == 27);
    CHECK(small.held_span() == 3 * 333ms);
    // From when the recording began, before any chunk was let go.
    flight_ring fresh(10s, 1000, t0);
    fresh.add(t0 + 2s, "x");
    CHECK(fresh.held_span() == 2s);
    // One chunk larger than the cap is kept (the newest is never let go).
    small.add(t0 + 31 * 333ms, std::string(500, 'y'));
    CHECK(small.count() == 1);
}

TEST_CASE("a capture begins once, grows while its trigger fires again, ends, and a flapping "
          "trigger cannot begin another before the gap",
          "[agent][flight]") {
    capture_plan plan({10s, 60s, 30s});
    CHECK_FALSE(plan.over(t0));
    CHECK(plan.fire(t0, "cpu 93 % of a core for 1 s") == capture_plan::answer::begun);
    CHECK(plan.capturing());
    CHECK(plan.until() == t0 + 10s);
    CHECK(plan.fire(t0 + 6s, "log: watchdog") == capture_plan::answer::extended);
    CHECK(plan.until() == t0 + 16s);
    CHECK(plan.fire(t0 + 25s, "again") == capture_plan::answer::extended);
    CHECK(plan.until() == t0 + 30s); // at most max_length from its beginning
    REQUIRE(plan.fires().size() == 3);
    CHECK(plan.fires()[0].what == "cpu 93 % of a core for 1 s");
    CHECK_FALSE(plan.over(t0 + 29s));
    CHECK(plan.over(t0 + 30s));
    CHECK_FALSE(plan.over(t0 + 31s)); // once
    CHECK_FALSE(plan.capturing());
    // Within a minute of the last beginning: refused, counted.
    CHECK(plan.fire(t0 + 40s, "flap") == capture_plan::answer::refused);
    CHECK(plan.fire(t0 + 59s, "flap") == capture_plan::answer::refused);
    CHECK(plan.refused() == 2);
    CHECK(plan.fire(t0 + 60s, "later") == capture_plan::answer::begun);
    REQUIRE(plan.fires().size() == 1);
    CHECK(plan.fires()[0].what == "later");
    // A condition that lasts keeps the capture going, --after past its last reading.
    plan.extend(t0 + 65s);
    CHECK(plan.until() == t0 + 75s);
    // Firings kept bounded, all counted.
    for (int i = 0; i < 100; ++i)
        plan.fire(t0 + 61s, "again");
    CHECK(plan.fires().size() == capture_plan::max_fires);
    CHECK(plan.fired() == 101);
    // An extension never shortens a capture: --after past max_length is max_length.
    capture_plan long_after({3600s, 60s, 600s});
    CHECK(long_after.fire(t0, "first") == capture_plan::answer::begun);
    CHECK(long_after.until() == t0 + 600s);
    CHECK(long_after.fire(t0 + 10s, "second") == capture_plan::answer::extended);
    CHECK(long_after.until() == t0 + 600s);
}

TEST_CASE("a threshold fires once its reading held long enough, and again only after it fell "
          "below",
          "[agent][flight]") {
    threshold_trigger cpu(50, 1s);
    CHECK_FALSE(cpu.feed(t0, 80));
    CHECK_FALSE(cpu.feed(t0 + 500ms, 90));
    CHECK_FALSE(cpu.feed(t0 + 900ms, 20)); // fell below: counted from the start again
    CHECK_FALSE(cpu.feed(t0 + 1s, 60));
    CHECK_FALSE(cpu.feed(t0 + 1500ms, 50));
    CHECK(cpu.feed(t0 + 2s, 70));
    CHECK_FALSE(cpu.feed(t0 + 3s, 99)); // fired already: not again while it stays
    CHECK(cpu.above());
    CHECK_FALSE(cpu.feed(t0 + 4s, 10));
    CHECK_FALSE(cpu.feed(t0 + 5s, 55));
    CHECK(cpu.feed(t0 + 6s, 55));
    // A firing not taken (its capture refused) fires again at the next reading still above.
    cpu.unlatch();
    CHECK(cpu.feed(t0 + 6250ms, 60));
    threshold_trigger at_once(80, 0s);
    CHECK(at_once.feed(t0, 81));
    CHECK_FALSE(at_once.feed(t0, std::nan("")));
}

TEST_CASE("a threshold is read from PCT[:SECONDS], else refused saying why", "[agent][flight]") {
    const auto ok = [](std::string_view s) {
        auto r = parse_threshold(s, 6400);
        INFO(s);
        REQUIRE(std::holds_alternative<threshold_spec>(r));
        return std::get<threshold_spec>(r);
    };
    CHECK(ok("50").level == 50);
    CHECK(ok("50").hold == 1s);
    CHECK(ok("80:3").hold == 3s);
    CHECK(ok("12.5:0.5").hold == 500ms);
    CHECK(ok("200").level == 200); // two cores' worth of a multithreaded process
    for (const char* bad :
         {"", "0", "-5", "abc", "50:", "50:-1", "50:4000", "nan", "1e9", "50:x"}) {
        INFO(bad);
        CHECK(std::holds_alternative<std::string>(parse_threshold(bad, 6400)));
    }
    CHECK(std::get<std::string>(parse_threshold("7000", 6400)) ==
          "the level must be a number above 0 and at most 6400: '7000'");
}
