// Off-CPU time from real perf, on a workload whose threads measure their own waits
// (test/workloads/waits.cpp): the collector's parser turns a recording of the scheduler
// switches into waiting time, which must be what the threads measured; the agent folds the
// switches into that time on the device (agent/wait_folder.hpp), to the same figures.
#include "agent/perf_commands.hpp"
#include "agent/wait_folder.hpp"
#include "collector/model/views.hpp"
#include "collector/parse/perf_script.hpp"
#include "support/agents.hpp"
#include "support/collector_proc.hpp"
#include "support/fixtures.hpp"
#include "support/spawn.hpp"

#include <catch2/catch.hpp>

#include <csignal>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <thread>

using namespace std::chrono_literals;
using namespace collector;
namespace json = boost::json;

namespace {

struct self_measured {
    std::uint32_t tid = 0;
    std::uint64_t waits = 0, total_ns = 0, alive_ns = 0;
};

// What each waiting thread of the workload measured: "<name> <tid> <waits> <total ns> <alive
// ns>".
std::map<std::string, self_measured> read_measured(const std::filesystem::path& file) {
    std::map<std::string, self_measured> out;
    std::ifstream in(file);
    std::string name;
    self_measured m;
    while (in >> name >> m.tid >> m.waits >> m.total_ns >> m.alive_ns)
        out[name] = m;
    return out;
}

// A thread's off-cpu weight and count under the function whose name starts with `function`
// (its total; "clock_nanosleep" is "clock_nanosleep@GLIBC_2.2.5" in some C libraries).
// A frame of `function` (its name with glibc's internal prefixes taken off: the lock's wait
// is __GI___lll_lock_wait where libc's local symbols are known, __lll_lock_wait where not).
bool in_function(std::string_view symbol, std::string_view function) {
    if (symbol.starts_with("__GI_"))
        symbol.remove_prefix(5);
    while (symbol.starts_with("_") && !function.starts_with("_"))
        symbol.remove_prefix(1);
    return symbol.starts_with(function);
}

std::pair<std::uint64_t, std::uint64_t> waited_in(const profile& p, std::uint8_t event,
                                                  std::uint32_t tid, std::string_view function) {
    std::pair<std::uint64_t, std::uint64_t> got{0, 0};
    for (const bool by_period : {true, false}) {
        view_filter f;
        f.event = event;
        f.tid = tid;
        f.by_period = by_period;
        for (const auto& r : functions(p, f).rows)
            if (in_function(p.symbol(r.frame), function))
                (by_period ? got.first : got.second) = r.total;
    }
    return got;
}

// A workload of PERFWIRE_WAITS_BIN running (its threads named and waiting), and what it measured
// once stopped.
struct workload {
    test_support::temp_dir dir;
    std::filesystem::path measured_file = dir.path / "measured.txt";
    test_support::spawned work{PERFWIRE_WAITS_BIN, {"60"}, measured_file.string()};
    workload() { std::this_thread::sleep_for(300ms); }
    std::map<std::string, self_measured> stop() {
        work.signal(SIGTERM);
        REQUIRE(work.wait(10s) == 0);
        auto m = read_measured(measured_file);
        REQUIRE(m.count("napper"));
        REQUIRE(m.count("reader"));
        REQUIRE(m.count("waiter"));
        return m;
    }
};

std::string read_text(const std::filesystem::path& file) {
    std::ifstream in(file);
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
}

struct events {
    std::uint8_t off_cpu = 0, cpu = 0;
};

events events_of(const profile& p) {
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
    return {*off_cpu, *cpu};
}

// An event's whole weight (every function's self).
std::uint64_t self_total(const profile& p, std::uint8_t event) {
    view_filter f;
    f.event = event;
    std::uint64_t total = 0;
    for (const auto& r : functions(p, f).rows)
        total += r.self;
    return total;
}

// The spinner's CPU is on-CPU samples, not waits; the on-CPU view holds no wait.
void on_cpu_unchanged(const profile& p, std::uint8_t cpu) {
    view_filter on;
    on.event = cpu;
    std::uint64_t spinning = 0, asleep_on_cpu = 0;
    for (const auto& r : functions(p, on).rows) {
        spinning += p.symbol(r.frame).ends_with("spin_a_while") ? r.self : 0;
        asleep_on_cpu += p.module(r.frame) == off_cpu_module ? r.total : 0;
    }
    CHECK(spinning > 0);
    CHECK(asleep_on_cpu == 0);
}

// Where each waiting thread waited (the C library's call: frame pointers skip its caller,
// nap() or read_pipe(), which keeps none) and how.
constexpr std::pair<const char*, const char*> waiting_in[] = {
    {"napper", "clock_nanosleep"}, {"reader", "read"}, {"waiter", "lll_lock_wait"}};

// perf as the agent runs it with --off-cpu, for 2 s of `pid`, and perf script's text;
// `switch_events` false: as a recording made elsewhere may be, with the tracepoint alone.
std::string record_switches(int pid, const std::filesystem::path& dir, bool switch_events) {
    agent::record_settings s{{"cpu-clock"}, 99, "fp", pid};
    s.off_cpu = true;
    const auto data = (dir / "perf.data").string();
    auto rec = agent::record_args(s, data, {"sleep", "2"});
    if (!switch_events)
        rec.erase(std::find(rec.begin(), rec.end(), "--switch-events"));
    rec.insert(rec.begin() + 1, "-q");
    test_support::spawned record("/usr/bin/perf", rec);
    REQUIRE(record.wait(60s) == 0);
    const auto text = dir / "script.txt";
    test_support::spawned script("/usr/bin/perf", agent::script_args(data, true, false, true),
                                 text.string());
    REQUIRE(script.wait(60s) == 0);
    return read_text(text);
}

} // namespace

TEST_CASE("off-cpu: each wait of a recording of the switches is as long as the thread measured "
          "it, and the device's folding keeps every ns",
          "[collector][perf][off-cpu][integration]") {
    workload w;
    const auto raw = record_switches(w.work.pid(), w.dir.path, true);
    const auto measured = w.stop();

    profile p;
    script_parser parser(p);
    parser.feed(raw);
    parser.finish();
    parser.end_waits();
    CHECK(parser.stats().skipped_lines == 0);
    CHECK(parser.stats().waits > 100);
    const auto [off_cpu, cpu] = events_of(p);
    // Each wait as long as the thread measured its own (their means, within 10 %), as a sleep.
    for (const auto& [thread, function] : waiting_in) {
        const auto& m = measured.at(thread);
        const double self_mean = static_cast<double>(m.total_ns) /
                                 static_cast<double>(std::max<std::uint64_t>(1, m.waits));
        const auto [ns, waits] = waited_in(p, off_cpu, m.tid, function);
        const auto [asleep, naps] = waited_in(p, off_cpu, m.tid, "[sleeping]");
        INFO(thread << ": " << waits << " waits, " << ns << " ns in " << function << "; " << naps
                    << " asleep, " << asleep << " ns; measured " << m.waits << " waits, "
                    << m.total_ns << " ns");
        REQUIRE(waits > 20);
        const double mean = static_cast<double>(ns) / static_cast<double>(waits);
        CHECK(mean == Approx(self_mean).epsilon(0.10));
        CHECK(static_cast<double>(asleep) >= 0.9 * static_cast<double>(ns));
    }
    on_cpu_unchanged(p, cpu);

    // Folded as the agent folds them: the same time on every thread's every function, the
    // CPU samples as they were, in far fewer bytes.
    agent::wait_folder folder({});
    std::string folded;
    folder.fold(raw, folded);
    folder.flush(folded, true);
    profile q;
    script_parser again(q);
    again.feed(folded);
    again.finish();
    CHECK(again.stats().skipped_lines == 0);
    const auto [q_off_cpu, q_cpu] = events_of(q);
    for (const auto& [thread, function] : waiting_in) {
        const auto tid = measured.at(thread).tid;
        for (const char* in : {function, "[sleeping]", "[preempted]"}) {
            INFO(thread << " in " << in);
            CHECK(waited_in(q, q_off_cpu, tid, in).first == waited_in(p, off_cpu, tid, in).first);
        }
    }
    CHECK(self_total(q, q_cpu) == self_total(p, cpu));
    CHECK(folder.stats().waits == parser.stats().waits);
    CHECK(folded.size() < raw.size() / 2);

    // The Python agent folds them byte for byte alike.
    const auto raw_file = w.dir.path / "raw.txt", py_file = w.dir.path / "folded.txt";
    std::ofstream(raw_file) << raw;
    test_support::spawned python(
        PERFWIRE_PYTHON,
        {"-c",
         "import sys; sys.path.insert(0, sys.argv[1]); import perfwire_agent as a; "
         "f = a.WaitFolder(); raw = open(sys.argv[2], 'rb').read(); "
         "sys.stdout.buffer.write(f.fold(raw) + f.flush(True))",
         std::filesystem::path(PERFWIRE_PYTHON_AGENT).parent_path().string(), raw_file.string()},
        py_file.string());
    REQUIRE(python.wait(60s) == 0);
    CHECK(read_text(py_file) == folded);
}

TEST_CASE("off-cpu: a recording of the tracepoint without switch records still tells the waits",
          "[collector][perf][off-cpu][integration]") {
    // Each wait ends at the thread's next sample: for a thread that sleeps between two
    // switches, the time it ran (microseconds) is counted waiting too.
    workload w;
    const auto raw = record_switches(w.work.pid(), w.dir.path, false);
    const auto measured = w.stop();
    REQUIRE(raw.find("PERF_RECORD_SWITCH") == std::string::npos);
    profile p;
    script_parser parser(p);
    parser.feed(raw);
    parser.finish();
    const auto [off_cpu, cpu] = events_of(p);
    const auto& m = measured.at("napper");
    const auto [ns, waits] = waited_in(p, off_cpu, m.tid, "clock_nanosleep");
    INFO(waits << " waits, " << ns << " ns; measured " << m.waits << " waits, " << m.total_ns
               << " ns");
    REQUIRE(waits > 20);
    CHECK(static_cast<double>(ns) / static_cast<double>(waits) ==
          Approx(static_cast<double>(m.total_ns) / static_cast<double>(m.waits)).epsilon(0.10));
    on_cpu_unchanged(p, cpu);
}

TEST_CASE("off-cpu: through either agent, the waiting threads are seen waiting as much as they "
          "measured",
          "[agent][collector][perf][off-cpu][integration]") {
    const auto flavour = test_support::each_agent();
    INFO(flavour);
    workload w;
    const auto recording = w.dir.path / "recording.txt";
    auto agent = test_support::start_agent(
        flavour, {"--output", recording.string(), "--pid", std::to_string(w.work.pid()),
                  "--off-cpu", "--duration", "3", "--rounds", "1", "--state-dir", ""});
    const auto status = agent->wait(90s);
    INFO(agent->stderr_text());
    REQUIRE(status == 0);
    const auto measured = w.stop();

    profile p;
    script_parser parser(p);
    parser.feed(split_perf_stat(read_text(recording)).first); // (one round: its perf stat after)
    parser.finish();
    CHECK(parser.stats().skipped_lines == 0);
    const auto [off_cpu, cpu] = events_of(p);
    // The share of the recording each thread spent waiting where it waits, within 10 % of the
    // share of its life it measured waiting (the two wait nearly all the time: every wait, not
    // a sample of them — perf's rate throttling the switch tracepoint kept a third of them).
    const auto span = static_cast<double>(p.last_time() - p.first_time());
    for (const auto& [thread, function] : waiting_in) {
        const auto& m = measured.at(thread);
        const auto ns = static_cast<double>(waited_in(p, off_cpu, m.tid, function).first);
        const auto asleep = static_cast<double>(waited_in(p, off_cpu, m.tid, "[sleeping]").first);
        const double share = static_cast<double>(m.total_ns) / static_cast<double>(m.alive_ns);
        INFO(thread << ": " << ns << " ns in " << function << ", " << asleep << " asleep, of "
                    << span << " ns recorded; measured " << m.total_ns << " of " << m.alive_ns);
        CHECK(ns / span == Approx(share).epsilon(0.10));
        CHECK(asleep >= 0.9 * ns);
    }
    on_cpu_unchanged(p, cpu);
    // The agent says what it folded: as many samples as the recording holds.
    view_filter waits;
    waits.event = off_cpu;
    waits.by_period = false;
    std::uint64_t samples = 0;
    for_each_sample(p, waits, [&](const sample_row& r) { samples += r.count; });
    const std::regex said("off-CPU: ([0-9]+) waits sent in ([0-9]+) samples");
    std::smatch m;
    const auto log = agent->stderr_text();
    REQUIRE(std::regex_search(log, m, said));
    CHECK(std::stoull(m[2].str()) == samples);
    CHECK(std::stoull(m[1].str()) >= samples);
}

TEST_CASE("off-cpu live: a collector shows each waiting thread waiting as much as it measured, "
          "through either agent",
          "[agent][collector][perf][off-cpu][integration]") {
    const auto flavour = test_support::each_agent();
    INFO(flavour);
    workload w;
    test_support::collector_proc coll(w.dir.path / "sessions");
    auto agent = test_support::start_agent(
        flavour, {"--server", "127.0.0.1:" + std::to_string(coll.agent_port), "--pid",
                  std::to_string(w.work.pid()), "--off-cpu", "--duration", "1", "--state-dir", ""});
    // Three seconds of waits, then the run ends.
    const auto live = test_support::wait_for(coll, "/api/sessions", 60s, [](const json::value& v) {
        const auto& a = v.as_array();
        if (a.size() != 1)
            return false;
        const auto* d = a[0].as_object().if_contains("duration_sec");
        return d && d->to_number<double>() >= 3;
    });
    const std::string id(live.as_array()[0].at("id").as_string());
    agent->signal(SIGTERM);
    REQUIRE(agent->wait(30s));
    test_support::wait_for(coll, "/api/sessions", 30s, [](const json::value& v) {
        return !v.as_array()[0].at("live").as_bool();
    });
    const auto measured = w.stop();
    const auto timeline = coll.get("/api/sessions/" + id + "/timeline?width=10");
    const double span =
        (timeline.at("end_s").to_number<double>() - timeline.at("start_s").to_number<double>()) *
        1e9;
    for (const auto& [thread, function] : waiting_in) {
        const auto& m = measured.at(thread);
        const auto table =
            coll.get("/api/sessions/" + id +
                     "/functions?event=off-cpu&limit=100&tid=" + std::to_string(m.tid));
        double ns = 0;
        for (const auto& f : table.at("functions").as_array())
            if (in_function(f.at("name").as_string(), function))
                ns = std::max(ns, f.at("total").to_number<double>());
        const double share = static_cast<double>(m.total_ns) / static_cast<double>(m.alive_ns);
        INFO(thread << ": " << ns << " ns in " << function << " of " << span
                    << " ns of session; measured " << m.total_ns << " of " << m.alive_ns);
        CHECK(ns / span == Approx(share).epsilon(0.10));
    }
}
