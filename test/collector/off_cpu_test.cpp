// Off-CPU time from real perf: an agent recording with --off-cpu a workload whose threads
// measure their own waits (test/workloads/waits.cpp); the collector's parser turns the
// scheduler switches into waiting time, which must be what the threads measured.
#include "collector/model/views.hpp"
#include "collector/parse/perf_script.hpp"
#include "support/agents.hpp"
#include "support/fixtures.hpp"
#include "support/spawn.hpp"

#include <catch2/catch.hpp>

#include <csignal>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>

using namespace std::chrono_literals;
using namespace collector;

namespace {

struct self_measured {
    std::uint32_t tid = 0;
    std::uint64_t waits = 0, total_ns = 0;
};

// What each waiting thread of the workload measured: "<name> <tid> <waits> <total ns>".
std::map<std::string, self_measured> read_measured(const std::filesystem::path& file) {
    std::map<std::string, self_measured> out;
    std::ifstream in(file);
    std::string name;
    self_measured m;
    while (in >> name >> m.tid >> m.waits >> m.total_ns)
        out[name] = m;
    return out;
}

// A thread's off-cpu weight and count under the function whose name starts with `function`
// (its total; "clock_nanosleep" is "clock_nanosleep@GLIBC_2.2.5" in some C libraries).
std::pair<std::uint64_t, std::uint64_t> waited_in(const profile& p, std::uint8_t event,
                                                  std::uint32_t tid, std::string_view function) {
    std::pair<std::uint64_t, std::uint64_t> got{0, 0};
    for (const bool by_period : {true, false}) {
        view_filter f;
        f.event = event;
        f.tid = tid;
        f.by_period = by_period;
        for (const auto& r : functions(p, f).rows)
            if (p.symbol(r.frame).starts_with(function))
                (by_period ? got.first : got.second) = r.total;
    }
    return got;
}

} // namespace

TEST_CASE("off-cpu: a thread's waits are on the stack it waited in and as long as it measured "
          "them",
          "[agent][collector][perf][off-cpu][integration]") {
    const auto flavour = test_support::each_agent();
    INFO(flavour);
    test_support::temp_dir dir;
    const auto measured_file = dir.path / "measured.txt";
    test_support::spawned work(PERFWIRE_WAITS_BIN, {"60"}, measured_file.string());
    std::this_thread::sleep_for(300ms); // its threads named and waiting
    const auto recording = dir.path / "recording.txt";
    auto agent = test_support::start_agent(
        flavour, {"--output", recording.string(), "--pid", std::to_string(work.pid()), "--off-cpu",
                  "--duration", "3", "--rounds", "1", "--state-dir", ""});
    const auto status = agent->wait(90s);
    INFO(agent->stderr_text());
    REQUIRE(status == 0);
    work.signal(SIGTERM);
    REQUIRE(work.wait(10s) == 0);
    const auto measured = read_measured(measured_file);
    REQUIRE(measured.count("napper"));
    REQUIRE(measured.count("reader"));

    std::ifstream in(recording);
    std::stringstream text;
    text << in.rdbuf();
    profile p;
    script_parser parser(p);
    const auto whole = text.str();
    parser.feed(split_perf_stat(whole).first); // (one round: its perf stat report after it)
    parser.finish();
    CHECK(parser.stats().skipped_lines == 0);
    CHECK(parser.stats().waits > 100);
    std::optional<std::uint8_t> off_cpu, cpu;
    for (std::size_t e = 0; e < p.event_count(); ++e) {
        const auto name = p.event_name(static_cast<std::uint8_t>(e));
        if (name == off_cpu_event)
            off_cpu = static_cast<std::uint8_t>(e);
        else if (name.starts_with("cpu-clock") || name.starts_with("cycles"))
            cpu = static_cast<std::uint8_t>(e);
    }
    REQUIRE(off_cpu);
    REQUIRE(cpu);

    // Each wait as long as the thread measured its own (their means, within 10 %), in the C
    // library's call it waited in (frame pointers skip its caller, nap() or read_pipe(): the C
    // library keeps none), as a sleep.
    for (const auto& [thread, function] :
         {std::pair{"napper", "clock_nanosleep"}, std::pair{"reader", "read"}}) {
        const auto& m = measured.at(thread);
        const double self_mean = static_cast<double>(m.total_ns) /
                                 static_cast<double>(std::max<std::uint64_t>(1, m.waits));
        const auto [ns, waits] = waited_in(p, *off_cpu, m.tid, function);
        const auto [asleep, naps] = waited_in(p, *off_cpu, m.tid, "[sleeping]");
        INFO(thread << ": " << waits << " waits, " << ns << " ns in " << function << "; " << naps
                    << " asleep, " << asleep << " ns; measured " << m.waits << " waits, "
                    << m.total_ns << " ns");
        REQUIRE(waits > 20);
        const double mean = static_cast<double>(ns) / static_cast<double>(waits);
        CHECK(mean == Approx(self_mean).epsilon(0.10));
        CHECK(static_cast<double>(asleep) >= 0.9 * static_cast<double>(ns));
        // Every wait, not a sample of them: the napper, asleep but for microseconds a nap, is
        // seen asleep most of the recording (perf's rate throttling the switch tracepoint kept
        // about a third of its naps).
        if (std::string_view(thread) == "napper") {
            const auto span = p.last_time() - p.first_time();
            INFO("recording span " << span << " ns");
            CHECK(static_cast<double>(asleep) >= 0.8 * static_cast<double>(span));
        }
    }
    // The spinner's CPU is on-CPU samples, not waits; the on-CPU view is unchanged by them.
    view_filter on;
    on.event = *cpu;
    std::uint64_t spinning = 0, asleep_on_cpu = 0;
    for (const auto& r : functions(p, on).rows) {
        spinning += p.symbol(r.frame).ends_with("spin_a_while") ? r.self : 0;
        asleep_on_cpu += p.module(r.frame) == off_cpu_module ? r.total : 0;
    }
    CHECK(spinning > 0);
    CHECK(asleep_on_cpu == 0);
}
