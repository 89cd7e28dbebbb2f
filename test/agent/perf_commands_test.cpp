#include "agent/perf_commands.hpp"
#include "agent/probe.hpp"
#include "support/fixtures.hpp"

#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <unistd.h>

using namespace agent;
using test_support::fixture;

TEST_CASE("perf stat on a machine without a PMU counts only software events", "[agent][perf]") {
    const std::vector<std::string> asked = {"cycles",      "instructions",     "cache-misses",
                                            "page-faults", "context-switches", "cpu-migrations",
                                            "cpu-clock",   "task-clock"};
    const auto counted = counted_events(fixture("agent/fixtures/perf_stat_no_pmu.txt"), asked);
    CHECK(counted == std::vector<std::string>{"page-faults", "context-switches", "cpu-migrations",
                                              "cpu-clock", "task-clock"});
}

TEST_CASE("counted events: thousands separators, msec, not counted", "[agent][perf]") {
    const std::string text = "     1,234,567      cycles   #  3.0 GHz   (50.00%)\n"
                             "   <not counted>      instructions\n"
                             "          2,001.5 msec task-clock   #  1.9 CPUs utilized\n";
    CHECK(counted_events(text, {"cycles", "instructions", "task-clock"}) ==
          std::vector<std::string>{"cycles", "task-clock"});
}

TEST_CASE("call chains are detected in real script output", "[agent][perf]") {
    CHECK(has_call_chains(fixture("agent/fixtures/script_callchain.txt")));
    CHECK_FALSE(has_call_chains(fixture("agent/fixtures/script_flat.txt")));
    CHECK_FALSE(has_call_chains(""));
    CHECK(evlist_events(fixture("agent/fixtures/evlist.txt")) ==
          std::vector<std::string>{"cpu-clock"});
}

TEST_CASE("perf command lines", "[agent][perf]") {
    record_settings s{{"cpu-clock"}, 99, "fp", 42};
    const auto rec = record_args(s, "-");
    const std::vector<std::string> want = {
        "record", "-e", "cpu-clock", "-F", "99", "--call-graph=fp",
        "-m",     "8",  "-p",        "42", "-o", "-"};
    CHECK(rec == want);
    s.pid.reset();
    s.callgraph.clear();
    const auto sys = record_args(s, "/tmp/x.data", {"sleep", "1"});
    CHECK(std::find(sys.begin(), sys.end(), "-a") != sys.end());
    CHECK(sys.back() == "1");
    CHECK(script_args("-", true, true).back() ==
          "comm,tid,pid,cpu,time,period,event,ip,sym,symoff,dso");
    CHECK(script_args("-", false, false).size() == 4);
    CHECK(stat_args({"cpu-clock", "task-clock"}, 7) ==
          std::vector<std::string>{"stat", "-e", "cpu-clock,task-clock", "-p", "7"});
    // Ring buffer grows with frequency but stays a power of two.
    for (int f : {1, 99, 999, 4999, 99999}) {
        const int p = mmap_pages_for(f);
        CHECK(p >= 8);
        CHECK((p & (p - 1)) == 0);
    }
    CHECK(mmap_pages_for(4999) > mmap_pages_for(99));
    CHECK(mmap_pages_for(999, true) > mmap_pages_for(999, false));
    CHECK(perf_version_line("perf version 6.1.192\n") == "perf version 6.1.192");
    CHECK(perf_version_line("bash: perf: not found") == "");
}

TEST_CASE("off-CPU command lines: the switches recorded and printed with their kind, without "
          "--no-buffering",
          "[agent][perf][off-cpu]") {
    record_settings s{{"cpu-clock"}, 99, "fp", 42};
    s.prompt = true;
    s.off_cpu = true;
    const auto rec = record_args(s, "-");
    // The sampled event at its rate by a term of its own, every switch kept (a global -F would
    // throttle the tracepoint to that rate: a thread napping 50 times a second kept 36 % of them).
    const std::vector<std::string> want = {"record",
                                           "-e",
                                           "cpu-clock/freq=99,name=cpu-clock/",
                                           "-c",
                                           "1",
                                           "--call-graph=fp",
                                           "-m",
                                           "128",
                                           "-e",
                                           "sched:sched_switch",
                                           "--switch-events",
                                           "-p",
                                           "42",
                                           "-o",
                                           "-"};
    CHECK(rec == want);
    const auto scr = script_args("-", true, false, true);
    CHECK(std::find(scr.begin(), scr.end(), "--show-switch-events") != scr.end());
    CHECK(scr.back() == "comm,tid,pid,time,period,event,trace,ip,sym,symoff,dso");
    s.off_cpu = false;
    const auto plain = record_args(s, "-");
    CHECK(std::find(plain.begin(), plain.end(), "--no-buffering") != plain.end());
}

TEST_CASE("off-CPU gives each sampled event a rate of its own, and refuses an event that "
          "cannot take one",
          "[agent][perf][off-cpu]") {
    CHECK(at_own_rate("cpu-clock", 99) == "cpu-clock/freq=99,name=cpu-clock/");
    CHECK(at_own_rate("cycles:u", 4999) == "cycles/freq=4999,name=cycles:u/u");
    CHECK(at_own_rate("L1-dcache-load-misses", 99) ==
          "L1-dcache-load-misses/freq=99,name=L1-dcache-load-misses/");
    for (const char* e :
         {"sched:sched_wakeup", "cpu/cycles/", "cpu-clock:", "", "cpu clock", "cpu-clock:u,k"})
        CHECK_FALSE(at_own_rate(e, 99));
    CHECK(off_cpu_events_problem({"cpu-clock", "task-clock:u"}).empty());
    CHECK_THAT(off_cpu_events_problem({"cpu-clock", "cpu/cycles/"}),
               Catch::Contains("'cpu/cycles/' cannot take one"));
    // Never handed to perf as it is beside -c 1 (every event sampled at each occurrence): the
    // rate stays global, as without off-CPU.
    record_settings s{{"cpu/cycles/"}, 99, "fp", 42};
    s.off_cpu = true;
    const auto rec = record_args(s, "-");
    CHECK(std::find(rec.begin(), rec.end(), "-c") == rec.end());
    CHECK(std::find(rec.begin(), rec.end(), "-F") != rec.end());
}

TEST_CASE("a ladder of rates: each event at every rate by a name of its own, none sampling until "
          "perf's control descriptor says which",
          "[agent][perf][overhead]") {
    record_settings s{{"cpu-clock", "task-clock:u"}, 799, "fp", 42};
    s.ladder = {999, 799, 639};
    REQUIRE(ladder_possible(s));
    const auto rec = record_args(s, "-");
    const auto at = [&](std::string_view a) { return std::find(rec.begin(), rec.end(), a); };
    REQUIRE(at("-e") != rec.end());
    CHECK(*(at("-e") + 1) ==
          "cpu-clock/freq=999,name=cpu-clock.999hz/,task-clock/freq=999,name=task-clock:u.999hz/u,"
          "cpu-clock/freq=799,name=cpu-clock.799hz/,task-clock/freq=799,name=task-clock:u.799hz/u,"
          "cpu-clock/freq=639,name=cpu-clock.639hz/,task-clock/freq=639,name=task-clock:u.639hz/u");
    CHECK(at("-F") == rec.end());
    CHECK(at("-c") == rec.end());
    REQUIRE(at("-D") != rec.end());
    CHECK(*(at("-D") + 1) == "-1");
    REQUIRE(at("--control") != rec.end());
    CHECK(*(at("--control") + 1) == "fd:3");
    CHECK(*(at("-m") + 1) == std::to_string(mmap_pages_for(999))); // room for the highest
    CHECK(rung_commands(s, 0, 799) == "enable cpu-clock.799hz\nenable task-clock:u.799hz\n");
    CHECK(rung_commands(s, 799, 639) ==
          "disable cpu-clock.799hz\nenable cpu-clock.639hz\ndisable task-clock:u.799hz\n"
          "enable task-clock:u.639hz\n");
    // Events that cannot take a rate of their own, or off-CPU's: one rate, as before.
    for (auto t : {record_settings{{"cpu/cycles/"}, 99, "fp", 42},
                   record_settings{{"cpu-clock"}, 99, "fp", 42, false, true}}) {
        t.ladder = {99, 79};
        CHECK_FALSE(ladder_possible(t));
        const auto one = record_args(t, "-");
        CHECK(std::find(one.begin(), one.end(), "--control") == one.end());
    }
    // perf reads a control command of at most 63 bytes: an event whose "disable NAME" could be
    // longer holds one rate.
    record_settings longer{{std::string(45, 'a')}, 99, "fp", 42};
    CHECK(ladder_possible(longer));
    longer.events[0] += "b";
    CHECK_FALSE(ladder_possible(longer));
    // perf's control by event name: asked of 5.13 and later.
    CHECK(perf_enables_by_name("perf version 6.1.187"));
    CHECK(perf_enables_by_name("perf version 5.13.0-rc1"));
    CHECK_FALSE(perf_enables_by_name("perf version 5.10.209"));
    CHECK_FALSE(perf_enables_by_name("perf version 4.19"));
    CHECK_FALSE(perf_enables_by_name(""));
}

TEST_CASE("off-CPU is refused, saying why, where the kernel shows no sched_switch tracepoint",
          "[agent][perf][off-cpu]") {
    test_support::temp_dir sys;
    CHECK_THAT(off_cpu_problem("/proc", sys.path.string()),
               Catch::Contains("sched:sched_switch tracepoint"));
    const auto events = sys.path / "kernel/tracing/events/sched/sched_switch";
    std::filesystem::create_directories(events);
    std::ofstream(events / "format") << "name: sched_switch\n";
    if (::geteuid() == 0)
        CHECK(off_cpu_problem("/proc", sys.path.string()).empty());
    else
        CHECK_THAT(off_cpu_problem("/proc", sys.path.string()), Catch::Contains("root"));
}

TEST_CASE("perf's complaint: the first line that says something, with the reason after a bare "
          "Error:",
          "[agent][perf]") {
    CHECK(perf_complaint("[ perf record: Woken up 1 times ]\n\nevent syntax error: 'foo'\n"
                         "  \\___ parser error\n") == "event syntax error: 'foo'");
    CHECK(perf_complaint("Error:\nThe sys_perf_event_open() syscall returned with 3 (No such "
                         "process) for event (cpu-clock).\n/bin/dmesg | grep -i perf may "
                         "provide additional information.\n") ==
          "Error: The sys_perf_event_open() syscall returned with 3 (No such process) for event "
          "(cpu-clock).");
    CHECK(perf_complaint("Error:\n") == "Error:");
    CHECK(perf_complaint("\n \n") == "");
    // What perf says of a ladder's control commands is not the complaint.
    CHECK(perf_complaint("Events disabled\nEvent cpu-clock.999hz enabled\nfailed to mmap: No "
                         "memory\n") == "failed to mmap: No memory");
}

TEST_CASE("a probe sweeps the scratch directories killed agents left, and nothing else",
          "[agent][probe]") {
    namespace fs = std::filesystem;
    test_support::temp_dir tmp;
    const auto made = [&](const std::string& name, fs::perms mode, bool old) {
        const auto dir = tmp.path / name;
        fs::create_directory(dir);
        std::ofstream(dir / "perf.data") << "x";
        fs::permissions(dir, mode);
        if (old)
            fs::last_write_time(dir, fs::file_time_type::clock::now() - std::chrono::hours(1));
        return dir;
    };
    const auto left = made("perfwire-probe-ab12cd", fs::perms::owner_all, true);
    const auto fresh = made("perfwire-probe-ef34gh", fs::perms::owner_all, false);
    const auto shared =
        made("perfwire-probe-open12", fs::perms::owner_all | fs::perms::others_all, true);
    const auto other = made("someone-else", fs::perms::owner_all, true);
    const auto target = made("kept", fs::perms::owner_all, true);
    fs::create_directory_symlink(target, tmp.path / "perfwire-probe-link12");
    agent::sweep_probe_dirs(tmp.path.string(), std::chrono::minutes(10));
    CHECK_FALSE(fs::exists(left));
    CHECK(fs::exists(fresh / "perf.data")); // (a probe under way)
    CHECK(fs::exists(shared / "perf.data"));
    CHECK(fs::exists(other / "perf.data"));
    CHECK(fs::exists(target / "perf.data")); // a link is never followed
    CHECK(fs::is_symlink(tmp.path / "perfwire-probe-link12"));
}
