#include "collector/parse/perf_stat.hpp"
#include "support/fixtures.hpp"

#include <catch2/catch.hpp>

using namespace collector;

TEST_CASE("perf stat on a machine without a PMU", "[collector][stat]") {
    const auto r = parse_perf_stat(test_support::fixture("agent/fixtures/perf_stat_no_pmu.txt"));
    const auto* cycles = r.find("cycles");
    REQUIRE(cycles);
    CHECK_FALSE(cycles->supported);
    CHECK_FALSE(cycles->value);
    const auto* clock = r.find("cpu-clock");
    REQUIRE(clock);
    CHECK(clock->unit == "msec");
    REQUIRE(clock->value);
    CHECK(*clock->value > 0);
    CHECK_THAT(clock->note, Catch::Contains("CPUs utilized"));
    const auto* cs = r.find("context-switches");
    REQUIRE(cs);
    CHECK(cs->value);
    REQUIRE(r.elapsed_seconds);
    CHECK(*r.elapsed_seconds > 0.1);
    CHECK_FALSE(r.ipc); // cycles not supported: nothing to derive
    CHECK_FALSE(r.scaled());
}

TEST_CASE("perf stat with hardware counters, separators and multiplexing", "[collector][stat]") {
    const auto r = parse_perf_stat(
        "\n Performance counter stats for 'system wide':\n\n"
        "          2,001.50 msec task-clock                #    1.999 CPUs utilized\n"
        "     4,000,000,000      cycles:u                  #    2.000 GHz    (83.33%)\n"
        "     6,000,000,000      instructions:u            #    1.50  insn per cycle  (83.33%)\n"
        "        10,000,000      cache-references                                  (66.67%)\n"
        "         1,000,000      cache-misses              #   10.00 %% of all cache refs\n"
        "       500,000,000      branch-instructions\n"
        "         5,000,000      branch-misses             #    1.00%% of all branches\n"
        "     <not counted>      L1-dcache-loads                                   (0.00%)\n"
        "\n       1.001234567 seconds time elapsed\n\n"
        "       1.900000000 seconds user\n");
    REQUIRE(r.counters.size() == 8);
    CHECK(*r.find("cycles")->value == 4e9);
    CHECK(r.find("cycles")->event == "cycles:u");
    CHECK(*r.find("cycles")->running_pct == Approx(83.33));
    CHECK(*r.find("task-clock")->value == Approx(2001.5));
    CHECK(r.find("L1-dcache-loads")->supported);
    CHECK_FALSE(r.find("L1-dcache-loads")->counted);
    CHECK(*r.ipc == Approx(1.5));
    CHECK(*r.cache_miss_pct == Approx(10.0));
    CHECK(*r.branch_miss_pct == Approx(1.0));
    CHECK(*r.elapsed_seconds == Approx(1.001234567));
    CHECK(r.scaled());
    CHECK(parse_perf_stat("garbage\n\n<<>>\n").counters.empty());
}
