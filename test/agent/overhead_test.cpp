// An overhead budget (agent/overhead.hpp): the rate a governor answers for each interval's cost,
// and the meter that reads what the agent and its children used.
#include "agent/overhead.hpp"

#include "agent/child.hpp"
#include "agent/run.hpp"
#include "support/agents.hpp"
#include "support/fixtures.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>

#include <catch2/catch.hpp>

#include <chrono>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

using namespace agent;

namespace {

// The intervals after a start or a change, which the governor does not judge.
void settle(overhead_governor& g, double cost) {
    for (int i = 0; i < overhead_governor::settle_intervals; ++i)
        CHECK_FALSE(g.feed(cost));
}

} // namespace

TEST_CASE("the overhead governor gives up DWARF first, then aims the rate under the budget",
          "[agent][overhead]") {
    overhead_governor g({1.0, 999, true, true, 1});
    settle(g, 50.0); // perf starting is not judged
    CHECK(g.hz() == 999);
    // Far over: DWARF goes first at once, the rate stays.
    auto c = g.feed(12.0);
    REQUIRE(c);
    CHECK(c->to_fp);
    CHECK(c->frequency == 999);
    CHECK_THAT(c->why, Catch::Contains("frame-pointer call graphs instead of DWARF"));
    CHECK_FALSE(g.dwarf());
    settle(g, 12.0);
    // Still far over: the rate the cost says, a tenth under the budget.
    c = g.feed(4.0);
    REQUIRE(c);
    CHECK_FALSE(c->to_fp);
    CHECK(c->frequency == 224); // 999 × 1 × 0.9 / 4
    CHECK(g.hz() == 224);
    CHECK_THAT(c->why, Catch::Contains("4.00 % of a core at 999 Hz, over --max-overhead 1.00 %: "
                                       "sampling at 224 Hz"));
    settle(g, 3.0);
    // A little over once, then not: averaged, nothing moves; one interval that jumps (a
    // restart's tail, perf stat starting) among steady ones moves nothing either (the median).
    CHECK_FALSE(g.feed(1.3));
    CHECK_FALSE(g.feed(0.8));
    CHECK_FALSE(g.feed(1.1));
    CHECK_FALSE(g.feed(0.9));
    CHECK_FALSE(g.feed(3.5)); // (the mean, 1.52 %, would have gone down)
    CHECK(g.hz() == 224);
    // At a rate it chose, over by less than a fifth holds (a restart would cost more than it
    // saves); over by more goes down once the median says so.
    for (int i = 0; i < 3; ++i)
        CHECK_FALSE(g.feed(1.15));
    int readings = 0;
    do
        c = g.feed(1.4);
    while (!c && ++readings < 8);
    REQUIRE(c);
    CHECK(readings >= 2);
    CHECK(c->frequency < 224);
    // A little over twice: down.
    overhead_governor o({1.0, 400, false, true, 1});
    settle(o, 9.0);
    CHECK_FALSE(o.feed(1.5));
    c = o.feed(1.5);
    REQUIRE(c);
    CHECK(c->frequency == 240);

    // Well under, six readings: up, at most doubling, never past what was asked.
    overhead_governor u({1.0, 600, false, true, 1});
    settle(u, 9.0);
    REQUIRE(u.feed(5.0));
    CHECK(u.hz() == 108);
    for (const int want : {216, 432, 600}) {
        settle(u, 2.0);
        for (int i = 0; i < 5; ++i)
            CHECK_FALSE(u.feed(0.1)); // five readings are not yet enough
        c = u.feed(0.1);
        REQUIRE(c);
        CHECK(c->frequency == want);
    }
    CHECK_THAT(c->why,
               Catch::Contains("under --max-overhead 1.00 %: sampling at 600 Hz (asked: 600)"));
    settle(u, 2.0);
    for (int i = 0; i < 8; ++i)
        CHECK_FALSE(u.feed(0.1)); // at what was asked: stays

    // Over half the budget holds: going up would restart perf for little.
    overhead_governor w({1.0, 600, false, true, 1});
    settle(w, 9.0);
    REQUIRE(w.feed(5.0));
    settle(w, 2.0);
    for (int i = 0; i < 8; ++i)
        CHECK_FALSE(w.feed(0.55));
    CHECK(w.hz() == 108);

    // Without frame pointers to fall back to, and at the floor.
    overhead_governor h({0.5, 50, true, false, 10});
    settle(h, 5.0);
    c = h.feed(5.0);
    REQUIRE(c);
    CHECK_FALSE(c->to_fp);
    CHECK(c->frequency == 10);
    settle(h, 5.0);
    for (int i = 0; i < 3; ++i)
        CHECK_FALSE(h.feed(5.0)); // as low as it goes: said once
}

TEST_CASE("the overhead governor fits the part of the cost that does not grow with the rate",
          "[agent][overhead]") {
    overhead_governor g({1.0, 999, false, true, 1});
    settle(g, 9.0);
    auto c = g.feed(3.0); // one rate read: all of it the rate's
    REQUIRE(c);
    CHECK(c->frequency == 299);
    settle(g, 1.0);
    // At 299 Hz it still costs 1.24 %: 0.49 % of it does not go with the rate (three readings
    // after a change: the restart's tail is in the first).
    CHECK_FALSE(g.feed(1.24));
    CHECK_FALSE(g.feed(1.24));
    c = g.feed(1.24);
    REQUIRE(c);
    CHECK(c->frequency == 163); // (0.9 − 0.488) / 0.00251 per Hz
    settle(g, 1.0);
    for (int i = 0; i < 3; ++i)
        CHECK_FALSE(g.feed(0.94)); // the fit's rate holds
    // A fit that says much further down goes half the proportional step at most.
    overhead_governor f({1.0, 999, false, true, 1});
    settle(f, 9.0);
    REQUIRE(f.feed(3.0));
    settle(f, 1.0);
    CHECK_FALSE(f.feed(1.4));
    CHECK_FALSE(f.feed(1.4));
    c = f.feed(1.4);
    REQUIRE(c);
    CHECK(c->frequency == 96); // the fit says 80: 299 × 0.9 / 1.4 / 2
    // A fixed part at or over the budget is likelier two readings alike within their noise than
    // a cost no rate can meet: the proportional step, which still walks a cost truly fixed down
    // to the floor, step by step, then nothing more.
    overhead_governor h({1.0, 999, false, true, 5});
    settle(h, 9.0);
    REQUIRE(h.feed(3.0));
    CHECK(h.hz() == 299);
    settle(h, 2.0);
    CHECK_FALSE(h.feed(2.8)); // (after a change even a reading far over waits for two more)
    CHECK_FALSE(h.feed(2.8));
    c = h.feed(2.8);
    REQUIRE(c);
    CHECK(c->frequency == 96); // (the fit's fixed part, 2.71 %, is over: 299 × 0.9 / 2.8)
    for (const int want : {32, 10, 5}) {
        settle(h, 2.7);
        CHECK_FALSE(h.feed(2.7));
        CHECK_FALSE(h.feed(2.7));
        c = h.feed(2.7);
        REQUIRE(c);
        CHECK(c->frequency == want);
    }
    settle(h, 2.7);
    for (int i = 0; i < 4; ++i)
        CHECK_FALSE(h.feed(2.7));
}

namespace {

// The meter's clock: seconds since the first call.
double now() {
    static const auto t0 = std::chrono::steady_clock::now();
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// CPU seconds of this process, and of its children reaped so far.
std::pair<double, double> own_and_reaped() {
    rusage self{}, children{};
    ::getrusage(RUSAGE_SELF, &self);
    ::getrusage(RUSAGE_CHILDREN, &children);
    const auto s = [](const timeval& t) { return t.tv_sec + t.tv_usec / 1e6; };
    return {s(self.ru_utime) + s(self.ru_stime), s(children.ru_utime) + s(children.ru_stime)};
}

// A shell that counts: CPU time without a descendant (its loop is built in).
const std::vector<std::string> counting_shell = {
    "-c", "i=0; while [ $i -lt 400000 ]; do i=$((i+1)); done"};

} // namespace

TEST_CASE("along a ladder of rates perf holds, the governor picks the ladder's and judges the next "
          "interval on",
          "[agent][overhead]") {
    overhead_governor::settings s{1.0, 999, false, true, 1};
    s.rungs = 6;
    overhead_governor g(s);
    CHECK(g.ladder() == std::vector<int>{999, 799, 639, 511, 409, 327});
    settle(g, 9.0); // perf's start
    CHECK_FALSE(g.feed(1.3));
    auto c = g.feed(1.3); // 999 × 0.9 / 1.3 = 691 → the ladder's 639
    REQUIRE(c);
    CHECK(c->frequency == 639);
    CHECK(g.hz() == 639);
    CHECK_FALSE(g.feed(5.0)); // the interval of the change alone is not judged: no restart
    CHECK_FALSE(g.feed(1.4));
    CHECK_FALSE(g.feed(1.4));
    c = g.feed(1.4); // a fifth over after three: 639 × 0.9 / 1.4 = 410 → 409
    REQUIRE(c);
    CHECK(c->frequency == 409);
    CHECK_FALSE(g.feed(5.0));
    // Well under: one rate up as soon as three readings say the next one's cost (grown with the
    // rate) stays under the aim — 0.6 × 511 / 409 = 0.75 — and no further while it would not.
    CHECK_FALSE(g.feed(0.6));
    CHECK_FALSE(g.feed(0.6));
    c = g.feed(0.6);
    REQUIRE(c);
    CHECK(c->frequency == 511);
    CHECK_THAT(c->why, Catch::Contains("under --max-overhead 1.00 %: sampling at 511 Hz"));
    CHECK_FALSE(g.feed(0.8));
    for (int i = 0; i < 6; ++i)
        CHECK_FALSE(g.feed(0.8)); // 0.8 × 639 / 511 = 1.0: stays

    // Under the ladder's lowest rate: the rate itself, perf restarted (a restart's settling).
    overhead_governor h(s);
    settle(h, 9.0);
    c = h.feed(3.0); // far over: at once, 999 × 0.9 / 3 = 299
    REQUIRE(c);
    CHECK(c->frequency == 299);
    settle(h, 1.0);
    // Back up after six readings under half: min(299 × 0.9 / 0.2, 2 × 299) = 598 → the ladder's
    // 511 (a restart again: perf held one rate).
    for (int i = 0; i < 5; ++i)
        CHECK_FALSE(h.feed(0.2));
    c = h.feed(0.2);
    REQUIRE(c);
    CHECK(c->frequency == 511);
    settle(h, 0.2);
    // A rate of the ladder whose aim lies under it: the proportional step itself (the fit of
    // 299 Hz at 0.2 % and 511 Hz at 1.5 % leaves no fixed part), 511 × 0.9 / 1.5 = 306.
    CHECK_FALSE(h.feed(1.5));
    CHECK_FALSE(h.feed(1.5));
    c = h.feed(1.5);
    REQUIRE(c);
    CHECK(c->frequency == 306);
    // Without a ladder (0 or 1 rung), every rate is its own.
    s.rungs = 1;
    CHECK(overhead_governor(s).ladder().empty());
}

TEST_CASE("the cost meter counts the agent's own CPU and its children's", "[agent][overhead]") {
    cost_meter m;
    const double first = now();
    CHECK_FALSE(m.read(first));
    // A child that spins for 0.4 s of CPU, then says so and waits, alive while the parent reads
    // (a child's CPU counts while it runs): the parent sleeps in read(2) meanwhile.
    int done[2];
    REQUIRE(::pipe(done) == 0);
    const pid_t child = ::fork();
    REQUIRE(child >= 0);
    if (child == 0) {
        timespec ts{};
        do
            ::clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
        while (ts.tv_sec * 1'000'000'000L + ts.tv_nsec < 400'000'000L);
        (void)!::write(done[1], "x", 1);
        ::pause();
        ::_exit(0);
    }
    ::close(done[1]);
    char byte;
    REQUIRE(::read(done[0], &byte, 1) == 1);
    ::close(done[0]);
    const double second = now();
    const auto pct = m.read(second);
    ::kill(child, SIGKILL);
    ::waitpid(child, nullptr, 0);
    REQUIRE(pct);
    const double cpu = *pct / 100 * (second - first);
    CHECK(cpu >= 0.39);
    CHECK(cpu < 0.6); // (this process slept: not the whole machine's)
    ::usleep(300'000);
    const auto idle = m.read(now());
    REQUIRE(idle);
    CHECK(*idle < 20); // the child gone, this process sleeping
}

TEST_CASE("the cost meter counts a child that ended between two readings, up to its end",
          "[agent][overhead]") {
    // A perf stat that runs between two readings, or a perf the governor restarted, is gone from
    // /proc by the next reading: the agent's child handling notes its CPU before reaping it.
    cost_meter m;
    const double first = now();
    CHECK_FALSE(m.read(first));
    const auto [self0, reaped0] = own_and_reaped();
    boost::asio::io_context io;
    std::optional<run_result> r;
    const std::string shell =
        "/bin/sh"; // (the coroutine holds it by reference: it must outlive it)
    boost::asio::co_spawn(io, run_command(shell, counting_shell, std::chrono::seconds(60)),
                          [&](std::exception_ptr e, run_result v) {
                              if (!e)
                                  r = std::move(v);
                          });
    io.run();
    REQUIRE(r);
    REQUIRE(r->exit_code == 0);
    const double second = now();
    const auto pct = m.read(second);
    const auto [self1, reaped1] = own_and_reaped();
    REQUIRE(pct);
    const double child = reaped1 - reaped0; // the kernel's own account of the shell
    const double counted = *pct / 100 * (second - first);
    INFO("the shell used " << child << " s, this process " << self1 - self0 << " s; counted "
                           << counted << " s");
    REQUIRE(child > 0.1);
    CHECK(counted >= child - 0.03); // (clock ticks of 10 ms)
    CHECK(counted <= child + (self1 - self0) + 0.03);
}

TEST_CASE("the Python agent's cost meter counts a child that ended between two readings",
          "[agent][overhead][python]") {
    // The shell spawned and polled as the agent does: the meter's second reading, as CPU seconds.
    const std::string script =
        "import os\n"
        "m = a.CostMeter()\n"
        "first = a.monotonic()\n"
        "m.read(first)\n"
        "t0 = os.times()\n"
        "p = a.spawn(['/bin/sh', '-c', '" +
        counting_shell[1] +
        "'])\n"
        "while p.poll() is None:\n"
        "    a.time.sleep(0.01)\n"
        "second = a.monotonic()\n"
        "pct = m.read(second)\n"
        "t1 = os.times()\n"
        "child = t1.children_user + t1.children_system - t0.children_user - "
        "t0.children_system\n"
        "own = t1.user + t1.system - t0.user - t0.system\n"
        "counted = pct / 100 * (second - first)\n"
        "print(child > 0.1, counted >= child - 0.03, counted <= child + own + 0.03, child, "
        "own, counted)\n";
    const auto out = test_support::python_agent_output(script);
    INFO(out);
    CHECK(out.rfind("True True True ", 0) == 0);
}

TEST_CASE("the Python agent's governor answers the same readings alike",
          "[agent][overhead][python]") {
    // budget, asked, dwarf, fp works, floor (, rungs); then the readings (% of a core), each at the
    // rate the governor last chose
    const std::vector<std::pair<overhead_governor::settings, std::vector<double>>> cases = {
        // DWARF given up, the first rate's proportional step, the way up twice (the second by
        // the two-rate fit), and down again after three readings
        {{1.0, 999, true, true, 1},
         {12, 12, 0.3, 0.3, 0.3, 0.3, 0.3, 0.3, 0.45, 0.45, 0.45, 0.45, 0.45, 0.45, 1.5, 1.5, 1.5}},
        // the floor
        {{0.5, 50, true, false, 10}, {5, 5, 5, 5}},
        // the fit distrusted (its fixed part over the aim), then up by the fit
        {{2.5, 4000, false, true, 1}, {30, 9, 9, 9, 1, 1, 1, 1, 1, 1}},
        // one jump among steady readings moves nothing; a median over the budget does
        {{1.0, 999, false, true, 1}, {3.0, 1, 3.5, 1, 0.9, 2, 2, 2, 2}},
        // a fixed part over the budget walks the rate to the floor
        {{1.0, 999, false, true, 5}, {3.0, 2, 2.8, 2.7, 2.7, 2.7, 2.7, 2.7, 2.7, 2.7, 2.7, 2.7}},
        // along a ladder of rates perf holds: down onto it, along it (the next interval judged),
        // under it (a restart), and back up onto it
        {{1.0, 999, false, true, 1, 6},
         {1.3, 1.3, 1.4, 1.4, 1.4, 2.5, 2.5, 2.5, 0.2, 0.2, 0.2, 0.2, 0.2, 0.2}},
    };
    std::string want, script;
    int changes = 0;
    for (const auto& [s, readings] : cases) {
        overhead_governor g(s);
        char line[64];
        std::snprintf(line, sizeof line, "g = a.OverheadGovernor(%g, %d, %s, %s, %d, %d)\n",
                      s.budget_pct, s.asked_hz, s.dwarf ? "True" : "False",
                      s.fp_works ? "True" : "False", s.min_hz, s.rungs);
        script += line;
        int hz = s.asked_hz;
        // Each reading to both; the intervals a start or a change leaves unjudged filled with
        // the reading that led there, so every listed one is judged.
        const auto feed = [&](double cost) {
            const auto c = g.feed(cost, hz);
            want += c ? std::to_string(c->frequency) + (c->to_fp ? " fp " : " - ") + c->why
                      : std::string("none");
            want += "\n";
            changes += c ? 1 : 0;
            std::snprintf(line, sizeof line, "c = g.feed(%g, %d)\n", cost, hz);
            script += line;
            script += "print('none' if c is None else '%d %s %s' % (c[0], 'fp' if c[1] else "
                      "'-', c[2]))\n";
            if (c)
                hz = c->frequency;
            return c;
        };
        for (int i = 0; i < overhead_governor::settle_intervals; ++i)
            feed(readings.front());
        for (const double cost : readings)
            if (feed(cost))
                for (int i = 0; i < overhead_governor::settle_intervals; ++i)
                    feed(cost);
    }
    INFO(want);
    // (the cases reach DWARF's fallback, the proportional step, the fit, its half step, the fit
    // distrusted, the floor and the way up: a governor that answered otherwise in one language
    // fails here)
    CHECK(changes >= 15);
    CHECK(test_support::python_agent_output(script) == want);
}

TEST_CASE("a run held to an overhead budget is not woken per sample", "[agent][overhead]") {
    // perf woken for every sample (--no-buffering, live views within half a second) costs more
    // at 300 Hz than buffered at 999 Hz: a cost that falls as the rate rises cannot be governed.
    boost::asio::io_context io;
    run_state run(io.get_executor(), outbox(1 << 20), std::chrono::seconds(60));
    run.settings.prompt = true;
    run.settings.record.frequency = 999;
    run.settings.record.callgraph = "dwarf";
    CHECK(run.effective().prompt);
    run.governor.emplace(overhead_governor::settings{1.0, 999, true, true, 1});
    settle(*run.governor, 9);
    REQUIRE(run.governor->feed(9)); // DWARF given up
    CHECK_FALSE(run.effective().prompt);
    CHECK(run.effective().record.callgraph == "fp");
    CHECK(run.settings.record.callgraph == "dwarf"); // (the run keeps what was asked)
    // The Python agent alike.
    CHECK(test_support::python_agent_output("s = a.Settings()\n"
                                            "g = a.OverheadGovernor(1.0, 999, False, True, 1)\n"
                                            "e = g.effective(s)\n"
                                            "print(s.prompt, e.prompt)\n") == "True False\n");
}
