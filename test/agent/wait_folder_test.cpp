#include "agent/chunker.hpp"
#include "agent/wait_folder.hpp"
#include "collector/model/views.hpp"
#include "collector/parse/perf_script.hpp"
#include "support/fixtures.hpp"
#include "support/spawn.hpp"

#include <catch2/catch.hpp>

#include <fstream>
#include <map>
#include <random>
#include <sstream>

using agent::wait_folder;

namespace {

// A thread (11) napping: its switch sample, OUT, back IN 20 ms later, 5 times; a spinner (12)
// sampled on the CPU between; one wait of 300 ms; one of 40 µs.
std::string naps() {
    std::string t;
    auto at = [](std::uint64_t ns) {
        const auto frac = std::to_string(ns % 1'000'000'000);
        return std::to_string(ns / 1'000'000'000) + "." + std::string(9 - frac.size(), '0') + frac;
    };
    auto nap = [&](std::uint64_t from, std::uint64_t ns, const char* state, const char* fn) {
        t += "napper 10/11 " + at(from) + ":          1 sched:sched_switch: prev_comm=napper " +
             "prev_pid=11 prev_prio=120 prev_state=" + state +
             " ==> next_comm=swapper/0 next_pid=0 next_prio=120\n"
             "\tffffffff8100 __schedule+0x10 ([kernel.kallsyms])\n"
             "\t401000 " +
             fn + "+0x4 (/bin/app)\n\t401100 main+0x8 (/bin/app)\n\n";
        t += "spinner 10/12 " + at(from + 1000) +
             ":    10101010 cpu-clock: \n"
             "\t401200 spin+0x1 (/bin/app)\n\t401100 main+0x8 (/bin/app)\n\n";
        t += "napper 10/11 " + at(from + 4000) + ": PERF_RECORD_SWITCH OUT\n";
        t += "napper 10/11 " + at(from + ns) + ": PERF_RECORD_SWITCH IN\n";
    };
    const std::uint64_t t0 = 100'000'000'000;
    for (int i = 0; i < 5; ++i)
        nap(t0 + static_cast<std::uint64_t>(i) * 20'010'000, 20'000'000, "S", "nap");
    nap(t0 + 200'000'000, 300'000'000, "D", "read_file");
    nap(t0 + 600'000'000, 40'000, "R+", "nap");
    return t;
}

struct totals {
    std::map<std::string, std::uint64_t> off_cpu; // by function, ns
    std::uint64_t on_cpu = 0, off_cpu_samples = 0;
};

// `odd`: lines the collector cannot read are in it on purpose.
totals parsed(std::string_view text, bool odd = false) {
    collector::profile p;
    collector::script_parser parser(p);
    parser.feed(text);
    parser.finish();
    parser.end_waits();
    CHECK((odd || parser.stats().skipped_lines == 0));
    totals t;
    for (std::size_t e = 0; e < p.event_count(); ++e) {
        collector::view_filter f;
        f.event = static_cast<std::uint8_t>(e);
        const bool off = p.event_name(f.event) == collector::off_cpu_event;
        for (const auto& r : collector::functions(p, f).rows)
            if (off)
                t.off_cpu[std::string(p.symbol(r.frame))] += r.total;
            else if (std::string(p.symbol(r.frame)) == "main")
                t.on_cpu += r.total;
        if (off) {
            f.by_period = false;
            for (const auto& r : collector::functions(p, f).rows)
                if (p.symbol(r.frame) == "main")
                    t.off_cpu_samples = r.total;
        }
    }
    return t;
}

std::string folded(std::string_view text, wait_folder::options o = {}) {
    wait_folder f(o);
    std::string out;
    f.fold(text, out);
    f.flush(out, true);
    return out;
}

} // namespace

TEST_CASE("folded waits weigh what the switches did, in fewer samples, the CPU samples as they "
          "were",
          "[agent][off-cpu][wait_folder]") {
    const auto raw = naps();
    const auto fold = folded(raw);
    INFO(fold);
    const auto want = parsed(raw), got = parsed(fold);
    REQUIRE(!want.off_cpu.empty());
    CHECK(got.off_cpu == want.off_cpu);
    CHECK(got.on_cpu == want.on_cpu);
    CHECK(want.off_cpu.at("[sleeping]") == 100'000'000);
    CHECK(want.off_cpu.at("[uninterruptible: I/O]") == 300'000'000);
    // The five 20 ms naps in one window are one sample; the long read one of its own; the
    // 40 µs preemption one more.
    CHECK(want.off_cpu_samples == 7);
    CHECK(got.off_cpu_samples == 3);
    CHECK(fold.find("PERF_RECORD_SWITCH") == std::string::npos);
    CHECK(fold.find("sched:sched_switch") == std::string::npos);
    CHECK(fold.size() < raw.size() / 2);
}

TEST_CASE("waits under the minimum are not sent, and counted", "[agent][off-cpu][wait_folder]") {
    wait_folder f({50'000, 100'000'000});
    std::string out;
    f.fold(naps(), out);
    f.flush(out);
    CHECK(f.stats().short_waits == 1);
    CHECK(f.stats().short_ns == 40'000);
    CHECK(f.stats().waits == 6);
    CHECK(f.summary() == "off-CPU: 6 waits sent in " + std::to_string(f.stats().samples) +
                             " samples; 1 shorter than 50 us left out (0 ms in all)");
    CHECK(parsed(out).off_cpu.count("[preempted]") == 0);
    CHECK(parsed(out).off_cpu.at("[sleeping]") == 100'000'000);
}

TEST_CASE("a switch record before its sample, and a wait ended by the thread's next sample",
          "[agent][off-cpu][wait_folder]") {
    const std::string raw =
        "app 10/11 5.000000000: PERF_RECORD_SWITCH OUT\n"
        "app 10/11 5.000000100:          1 sched:sched_switch: prev_comm=app prev_pid=11 "
        "prev_prio=120 prev_state=S ==> next_comm=x next_pid=0 next_prio=120\n"
        "\t401000 nap+0x4 (/bin/app)\n\n"
        "app 10/11 5.002000000:    1000000 cpu-clock: \n\t401000 spin+0x4 (/bin/app)\n\n"
        "app 10/12 6.000000000: PERF_RECORD_SWITCH OUT preempt\n"
        "app 10/12 6.500000000: PERF_RECORD_SWITCH IN\n";
    const auto got = parsed(folded(raw));
    CHECK(got.off_cpu.at("nap") == 2'000'000); // from the record's time
    CHECK(got.off_cpu.at("[sleeping]") == 2'000'000);
    CHECK(got.off_cpu.at("[preempted]") == 500'000'000); // no sample: where unknown
    CHECK(got.off_cpu.at("[unknown]") == 500'000'000);
    CHECK(parsed(raw).off_cpu == got.off_cpu);
}

TEST_CASE("the folder holds what it may and passes what it cannot read",
          "[agent][off-cpu][wait_folder]") {
    // More threads waiting at once than it remembers: the rest are dropped, counted.
    std::string raw;
    for (std::uint32_t tid = 1; tid <= wait_folder::max_open + 10; ++tid)
        raw += "app 1/" + std::to_string(tid) + " 7.000000: PERF_RECORD_SWITCH OUT\n";
    wait_folder f({});
    std::string out;
    f.fold(raw, out);
    CHECK(f.stats().dropped == 10);
    CHECK(f.summary().ends_with("; 10 dropped (more threads waiting at once than the agent "
                                "follows, or out of order)"));
    // Lines it cannot read pass as they are; a switch back before it left is no wait.
    const std::string odd = "not a header at all\n\tffff frame (x)\n\n"
                            "app 1/1 6.000000: PERF_RECORD_SWITCH IN\n"
                            "app 1/2 [003] 8.000000: PERF_RECORD_LOST lost 4\n";
    out.clear();
    f.fold(odd, out);
    CHECK(out == "not a header at all\n\tffff frame (x)\n\n"
                 "app 1/2 [003] 8.000000: PERF_RECORD_LOST lost 4\n");
    CHECK(f.stats().dropped == 11);
    // A stack past its bound is cut, not grown.
    std::string deep = "app 1/9999 9.000000: 1 sched:sched_switch: prev_state=S ==> x\n";
    for (int i = 0; i < 5000; ++i)
        deep += "\t401000 f" + std::to_string(i) + "+0x1 (/bin/app)\n";
    deep += "\napp 1/9999 9.000100: PERF_RECORD_SWITCH IN\n";
    wait_folder g({});
    out.clear();
    g.fold(deep, out);
    g.flush(out);
    CHECK(g.stats().waits == 1);
    CHECK(out.size() < wait_folder::max_stack_bytes + 200);
}

TEST_CASE("the chunker folds an off-CPU stream whatever pieces it comes in",
          "[agent][off-cpu][wait_folder][chunker]") {
    const auto raw = naps() + naps(); // (the second copy's waits go back in time: dropped alike)
    std::mt19937 rng(7);
    agent::chunker c(agent::chunker::encoding::text);
    c.fold_waits({});
    std::string whole;
    for (std::size_t pos = 0; pos < raw.size();) {
        const std::size_t n = std::min<std::size_t>(raw.size() - pos, 1 + rng() % 700);
        c.append(std::string_view(raw).substr(pos, n));
        pos += n;
        if (rng() % 3 == 0)
            if (auto chunk = c.cut())
                whole += *chunk;
    }
    if (auto chunk = c.cut({}, true))
        whole += *chunk;
    CHECK(parsed(whole).off_cpu == parsed(folded(raw)).off_cpu);
    CHECK(parsed(whole).on_cpu == parsed(raw).on_cpu);
}

TEST_CASE("a thread still waiting when the recording ends waited until its last time",
          "[agent][off-cpu][wait_folder]") {
    const std::string raw =
        "app 10/11 5.000000000:          1 sched:sched_switch: prev_comm=app prev_pid=11 "
        "prev_prio=120 prev_state=S ==> next_comm=x next_pid=0 next_prio=120\n"
        "\t401000 nap+0x4 (/bin/app)\n\n"
        "app 10/11 5.000000100: PERF_RECORD_SWITCH OUT\n"
        "app 10/12 5.300000000:    1000000 cpu-clock: \n\t401000 spin+0x4 (/bin/app)\n\n";
    wait_folder f({});
    std::string out;
    f.fold(raw, out);
    f.flush(out);
    CHECK(parsed(out).off_cpu.empty()); // a chunk's end is no recording's
    f.flush(out, true);
    CHECK(parsed(out).off_cpu.at("nap") == 300'000'000);
    CHECK(parsed(raw).off_cpu.at("nap") == 300'000'000); // the collector's, of the switches
}

TEST_CASE("the Python agent folds odd text byte for byte as this one does",
          "[agent][off-cpu][wait_folder]") {
    const std::string sw = " 1 sched:sched_switch: prev_comm=a prev_pid=1 prev_prio=120 "
                           "prev_state=S ==> next_comm=b next_pid=0 next_prio=120\n";
    const std::string raw =
        // perf's padding of comm and pid/tid; a CPU; times of 6, 9 and 12 digits.
        "app    10/11     5.000000:" + sw + "\t401000 nap+0x4 (/bin/app)\n\n" +
        "app    10/11 [003]  5.002000000: PERF_RECORD_SWITCH IN  \n"
        // A thread named like a header: its own thread and time are the last.
        "x 11 9999.0: 10/12 5.001000: 1000000 cpu-clock: \n\t401200 spin+0x1 (/bin/app)\n\n"
        // Out of range, or not quite a switch record: passed as they are.
        "app 4294967296/1 5.1: PERF_RECORD_SWITCH OUT\n"
        "app 1/1 5.0000000000000: PERF_RECORD_SWITCH OUT\n"
        "app 10/13 5.2: PERF_RECORD_SWITCH OUTPUT\n"
        "app 10/13 5.2: PERF_RECORD_SWITCH OUT\r\n"
        "app 10/13 5.21: 1sched:sched_switch: prev_state=S ==> x\n\n"
        // Two stacks at one time (sorted alike), one without frames.
        "a 1/7 6.0:" +
        sw + "\t\ta\n\tb\n\n" + "a 1/7 6.0001: PERF_RECORD_SWITCH IN\n" + "a 1/7 6.0002:" + sw +
        "\t\ta\x01\n\n" + "a 1/7 6.0003: PERF_RECORD_SWITCH IN\n" + "a 1/8 6.0:" + sw + "\n" +
        "a 1/8 6.0004: PERF_RECORD_SWITCH IN\n" +
        // Blank lines and frames outside any sample; a last line without its newline.
        "\n\n\tstray\nnot a header\n\n\na 1/9 7.0:" + sw + "\t401000 nap+0x4 (/bin/app)";
    test_support::temp_dir dir;
    const auto in = dir.path / "raw.txt", py = dir.path / "folded.txt";
    std::ofstream(in, std::ios::binary) << raw;
    test_support::spawned python(
        PERFWIRE_PYTHON,
        {"-c",
         "import sys; sys.path.insert(0, sys.argv[1]); import perfwire_agent as a; "
         "f = a.WaitFolder(); raw = open(sys.argv[2], 'rb').read(); "
         "sys.stdout.buffer.write(f.fold(raw[:100]) + f.fold(raw[100:]) + f.flush(True))",
         std::filesystem::path(PERFWIRE_PYTHON_AGENT).parent_path().string(), in.string()},
        py.string());
    REQUIRE(python.wait(std::chrono::seconds(60)) == 0);
    std::ifstream got(py, std::ios::binary);
    std::stringstream text;
    text << got.rdbuf();
    wait_folder f({});
    std::string out;
    f.fold(std::string_view(raw).substr(0, 100), out);
    f.fold(std::string_view(raw).substr(100), out);
    f.flush(out, true);
    CHECK(text.str() == out);
    // (Totals are not compared here: lines the folder passes as they are, which the
    // collector's parser reads in its own way — a 13-digit fraction, a CR — end their waits at
    // another last time than the raw text's.)
    CHECK(parsed(out, true).off_cpu.at("nap") == parsed(raw, true).off_cpu.at("nap"));
    CHECK(out.find("app 10/11 5.000000000: 2000000 off-cpu:\n") != std::string::npos);
    CHECK(out.find("app 4294967296/1 5.1: PERF_RECORD_SWITCH OUT\n") != std::string::npos);
    CHECK(out.find("\n\n\tstray\nnot a header\n\n\n") != std::string::npos);
}
