#include "collector/model/reshape.hpp"
#include "collector/model/views.hpp"
#include "collector/parse/perf_script.hpp"
#include "support/fixtures.hpp"

#include <catch2/catch.hpp>

#include <map>
#include <random>
#include <set>
#include <sstream>

using namespace collector;
using test_support::fixture;

namespace {

std::size_t count_headers(const std::string& text) {
    std::size_t n = 0, pos = 0;
    while (pos < text.size()) {
        const auto nl = text.find('\n', pos);
        const auto line = text.substr(pos, nl - pos);
        if (!line.empty() && line[0] != '\t')
            ++n;
        pos = nl == std::string::npos ? text.size() : nl + 1;
    }
    return n;
}

struct parsed {
    profile prof;
    script_stats stats;
};

std::unique_ptr<parsed> parse(const std::string& text) {
    auto out = std::make_unique<parsed>();
    script_parser parser(out->prof);
    parser.feed(text);
    parser.finish();
    out->stats = parser.stats();
    return out;
}

// function name -> (self, total) under the default filter (first event, by period).
std::map<std::string, std::pair<std::uint64_t, std::uint64_t>> function_map(const profile& p,
                                                                            bool by_period = true) {
    view_filter f;
    f.by_period = by_period;
    std::map<std::string, std::pair<std::uint64_t, std::uint64_t>> m;
    for (const auto& r : functions(p, f).rows)
        m[std::string(p.symbol(r.frame))] = {r.self, r.total};
    return m;
}

// The offsets of a site's path, root first.
std::vector<std::uint32_t> offsets_to(const profile& p, std::uint32_t site) {
    std::vector<std::uint32_t> offsets;
    for (auto s = site; s != 0; s = p.site_parent(s))
        offsets.insert(offsets.begin(), p.site_offset(s));
    return offsets;
}

} // namespace

TEST_CASE("real captures parse completely", "[collector][parser]") {
    for (const char* name : {"callchain_fields.txt", "default_format.txt", "system_wide_cpu.txt",
                             "no_period.txt", "flat.txt"}) {
        INFO(name);
        const std::string text = fixture(std::string("collector/fixtures/") + name);
        const auto r = parse(text);
        CHECK(r->stats.skipped_lines == 0);
        CHECK(r->stats.samples == count_headers(text));
        CHECK(r->prof.sample_count() == r->stats.samples);
        CHECK(r->prof.event_count() == 1);
        CHECK(r->prof.event_name(0) == "cpu-clock");
    }
}

TEST_CASE("the demo's hot functions and stacks come out of a real capture", "[collector][parser]") {
    const auto r = parse(fixture("collector/fixtures/callchain_fields.txt"));
    const auto& p = r->prof;
    const auto fns = function_map(p);
    for (const char* hot :
         {"(anonymous namespace)::matrix_multiply", "(anonymous namespace)::hash_strings",
          "(anonymous namespace)::recursive_fib"})
        REQUIRE(fns.count(hot));
    // Every sample here has period 10101010: weights are sample counts times that.
    const auto by_samples = function_map(p, false);
    const auto& mm = by_samples.at("(anonymous namespace)::matrix_multiply");
    CHECK(fns.at("(anonymous namespace)::matrix_multiply").first == mm.first * 10101010ULL);
    // The worker calls matrix_multiply: its total covers it, its self is (nearly) nothing.
    const auto& worker = by_samples.at("(anonymous namespace)::matrix_worker");
    CHECK(worker.second >= mm.second);
    // Self adds up to the whole; no total exceeds it.
    view_filter f;
    const auto table = functions(p, f);
    std::uint64_t self_sum = 0;
    for (const auto& row : table.rows) {
        self_sum += row.self;
        CHECK(row.total <= table.total_weight);
        CHECK(row.self <= row.total);
    }
    CHECK(self_sum == table.total_weight);
    CHECK(table.total_weight == 10101010ULL * p.sample_count());
}

TEST_CASE("recursion counts a function once per stack in total", "[collector][parser]") {
    const auto r = parse("app 1/1 1.000000: 1 cpu-clock:\n"
                         "\t10 fib+0x1 (/bin/app)\n"
                         "\t20 fib+0x2 (/bin/app)\n"
                         "\t30 fib+0x2 (/bin/app)\n"
                         "\t40 main+0x5 (/bin/app)\n\n"
                         "app 1/1 1.010000: 1 cpu-clock:\n"
                         "\t50 main+0x9 (/bin/app)\n\n");
    const auto fns = function_map(r->prof, false);
    CHECK(fns.at("fib") == std::make_pair<std::uint64_t, std::uint64_t>(1, 1));
    CHECK(fns.at("main") == std::make_pair<std::uint64_t, std::uint64_t>(1, 2));
    // The real demo recurses 10+ deep; its total still cannot exceed the sample count.
    const auto demo = parse(fixture("collector/fixtures/default_format.txt"));
    const auto dfns = function_map(demo->prof, false);
    CHECK(dfns.at("(anonymous namespace)::recursive_fib").second <= demo->prof.sample_count());
}

TEST_CASE("header variants across perf versions", "[collector][parser]") {
    const std::string text =
        // comm with spaces, right-aligned, pid/tid and cpu
        "     Web Content  4242/4250 [003]  5000.123456:     250000 cycles:u: \n"
        "\t7f00 js::RunScript(JSContext*, JS::Handle<JSScript*>)+0x10 (/usr/lib/libxul.so)\n"
        "\t7f10 operator+(std::string const&, char const*)+0x3 (/usr/lib/libstdc++.so.6)\n"
        "\n"
        // hybrid PMU event, irq flags, pid only
        "swapper 0 [001] d.h.  5000.200000:  100 cpu_core/cycles/: \n"
        "\tffffffff81000000 native_safe_halt+0xe ([kernel.kallsyms])\n"
        "\n"
        // old perf: no period; [unknown] symbol and module
        "old-app 77/78  5000.300000: cpu-clock: \n"
        "\t  0 [unknown] ([unknown])\n"
        "\t4005d0 main (/opt/old-app)\n"
        "\n"
        // flat output: the frame on the header line
        "  flat 9/9  5000.400000:   10 cpu-clock:pp:      55d0c0ffee (anonymous namespace)::f+0x1 "
        "(/bin/flat (deleted))\n"
        // lost records and garbage
        "demo 1/2  5000.500000: PERF_RECORD_LOST lost 17\n"
        "this is not perf output\n"
        "\tnot a frame either\n";
    const auto r = parse(text);
    const auto& p = r->prof;
    CHECK(r->stats.samples == 4);
    CHECK(r->stats.lost_events == 17);
    CHECK(r->stats.skipped_lines == 2);
    REQUIRE(p.sample_count() == 4);

    CHECK(p.threads().at(4250).pid == 4242);
    CHECK(p.strings()[p.threads().at(4250).comm] == "Web Content");
    CHECK(p.sample_time(0) == 5000123456000ULL);
    CHECK(p.sample_period(0) == 250000);
    CHECK(p.event_name(p.sample_event(0)) == "cycles:u");
    CHECK(p.event_name(p.sample_event(1)) == "cpu_core/cycles/");
    CHECK(p.sample_tid(1) == 0);
    CHECK(p.sample_period(2) == 1); // no period: each sample weighs one
    CHECK(p.event_name(p.sample_event(3)) == "cpu-clock:pp");

    // Frames: leaf first in the text, root first in the trie.
    const auto leaf0 = p.sample_node(0);
    CHECK(p.symbol(p.node_frame(leaf0)) == "js::RunScript(JSContext*, JS::Handle<JSScript*>)");
    CHECK(p.module(p.node_frame(leaf0)) == "/usr/lib/libxul.so");
    const auto parent0 = p.node_parent(leaf0);
    CHECK(p.symbol(p.node_frame(parent0)) == "operator+(std::string const&, char const*)");
    CHECK(p.node_parent(parent0) == profile::root);
    CHECK(p.module(p.node_frame(p.sample_node(1))) == "[kernel.kallsyms]");
    CHECK(p.symbol(p.node_frame(p.sample_node(2))) == "[unknown]");
    const auto flat = p.sample_node(3);
    CHECK(p.symbol(p.node_frame(flat)) == "(anonymous namespace)::f");
    CHECK(p.module(p.node_frame(flat)) == "/bin/flat (deleted)");

    // Where in the leaf function each sample landed: the leaf's +0x offset, none for
    // [unknown] leaves; every sample has a site on its own call path.
    for (std::size_t i = 0; i < p.sample_count(); ++i)
        CHECK(p.site_node(p.sample_site(i)) == p.sample_node(i));
    CHECK(p.site_offset(p.sample_site(2)) == profile::no_offset);
    std::map<std::pair<std::string, std::uint32_t>, std::uint64_t> sites;
    for (std::uint8_t e = 0; e < p.event_count(); ++e) {
        view_filter f;
        f.event = e;
        f.by_period = false;
        const auto weights = site_self_weights(p, f);
        for (std::uint32_t s = 0; s < p.site_count(); ++s)
            if (p.site_offset(s) != profile::no_offset && weights[s])
                sites[{std::string(p.symbol(p.site_frame(s))), p.site_offset(s)}] += weights[s];
    }
    CHECK(sites == decltype(sites){{{"js::RunScript(JSContext*, JS::Handle<JSScript*>)", 0x10}, 1},
                                   {{"native_safe_halt", 0xe}, 1},
                                   {{"(anonymous namespace)::f", 0x1}, 1}});
}

TEST_CASE("perf script: a nameless frame in a named module keeps its address there",
          "[collector][parser]") {
    const auto r = parse("app 1/1 1.0: 1 cpu-clock:\n"
                         "\t           d44a3 [unknown] (/usr/lib/libstdc++.so.6)\n"
                         "\t            2437 worker+0x1f (/bin/app)\n\n"
                         "app 1/1 1.1: 1 cpu-clock:\n"
                         "\tffffffffc0001234 [unknown] ([kernel.kallsyms])\n\n"
                         "app 1/1 1.2: 1 cpu-clock:\n"
                         "\t        7f001234 [unknown] ([unknown])\n\n"
                         // A 32-bit kernel's address fits 8 digits: still not a module's.
                         "app 1/1 1.3: 1 cpu-clock:\n"
                         "\t        c0123456 [unknown] ([kernel.kallsyms])\n\n"
                         // Leading zeros: the value counts, not the digits.
                         "app 1/1 1.4: 1 cpu-clock:\n"
                         "\t       000401136 [unknown] (/bin/app)\n\n"
                         // The largest 32-bit values are not offsets (no_offset and the clamp).
                         "app 1/1 1.5: 1 cpu-clock:\n"
                         "\t        fffffffe [unknown] (/bin/app)\n\n");
    const auto& p = r->prof;
    REQUIRE(p.sample_count() == 6);
    CHECK(p.site_offset(p.sample_site(4)) == 0x401136);
    CHECK(p.site_offset(p.sample_site(5)) == profile::no_offset);
    CHECK(p.module(p.site_frame(p.sample_site(0))) == "/usr/lib/libstdc++.so.6");
    CHECK(p.site_offset(p.sample_site(0)) == 0xd44a3);
    CHECK(p.site_offset(p.sample_site(1)) == profile::no_offset); // beyond 32 bits: none
    CHECK(p.site_offset(p.sample_site(2)) == profile::no_offset); // no module to be in
    CHECK(p.site_offset(p.sample_site(3)) == profile::no_offset);
}

TEST_CASE("perf script: callers keep their call sites, a recurring one at its outermost call only",
          "[collector][parser]") {
    // fib called itself from two lines (returns at +0x20 and +0x30), in both orders.
    const auto r = parse("app 1/1 1.0: 1 cpu-clock:\n"
                         "\t 1010 fib+0x10 (/bin/app)\n"
                         "\t 1020 fib+0x20 (/bin/app)\n"
                         "\t 1030 fib+0x30 (/bin/app)\n"
                         "\t 2005 main+0x5 (/bin/app)\n\n"
                         "app 1/1 1.1: 1 cpu-clock:\n"
                         "\t 1010 fib+0x10 (/bin/app)\n"
                         "\t 1030 fib+0x30 (/bin/app)\n"
                         "\t 1020 fib+0x20 (/bin/app)\n"
                         "\t 2005 main+0x5 (/bin/app)\n\n"
                         "app 1/1 1.2: 1 cpu-clock:\n"
                         "\t 1010 fib+0x10 (/bin/app)\n"
                         "\t 1020 fib+0x20 (/bin/app)\n"
                         "\t 1020 fib+0x20 (/bin/app)\n"
                         "\t 2005 main+0x5 (/bin/app)\n\n");
    const auto& p = r->prof;
    REQUIRE(p.sample_count() == 3);
    // One stack of frames, so one node path; the sites say where each call was.
    CHECK(p.sample_node(0) == p.sample_node(1));
    auto path = [&](std::size_t i) { return offsets_to(p, p.sample_site(i)); };
    constexpr auto none = profile::no_offset;
    CHECK(path(0) == std::vector<std::uint32_t>{0x5, 0x30, none, 0x10});
    CHECK(path(1) == std::vector<std::uint32_t>{0x5, 0x20, none, 0x10});
    CHECK(path(2) == std::vector<std::uint32_t>{0x5, 0x20, none, 0x10});
    CHECK(p.sample_site(1) == p.sample_site(2)); // the inner calls do not multiply sites
    CHECK(r->stats.call_sites_dropped == 0);
}

TEST_CASE("perf script: nameless callers of one module keep their addresses, however many are on "
          "the stack",
          "[collector][parser]") {
    // A stripped program: every frame is "[unknown]" of the one module, one frame to the
    // model, so each would recur closer to the root; their addresses are what names them
    // later, so every one keeps its own. A named one recurring still keeps none.
    const auto r = parse("app 1/1 1.0: 1 cpu-clock:\n"
                         "\t 1010 [unknown] (/bin/stripped)\n"
                         "\t 1234 [unknown] (/bin/stripped)\n"
                         "\t 2040 [unknown] (/bin/stripped)\n"
                         "\t 3005 main+0x5 (/bin/app)\n"
                         "\t 3020 fib+0x20 (/bin/app)\n"
                         "\t 3010 main+0x10 (/bin/app)\n\n");
    const auto& p = r->prof;
    REQUIRE(p.sample_count() == 1);
    CHECK(offsets_to(p, p.sample_site(0)) ==
          std::vector<std::uint32_t>{0x10, 0x20, profile::no_offset, 0x2040, 0x1234, 0x1010});
}

TEST_CASE("perf script: a frame that was a caller in the thread's last sample and is the leaf now "
          "(or the other way round) gets its own site",
          "[collector][parser]") {
    const auto r = parse("app 1/1 1.0: 1 cpu-clock:\n"
                         "\t 1005 g+0x5 (/bin/app)\n"
                         "\t 1030 f+0x30 (/bin/app)\n"
                         "\t 1030 f+0x30 (/bin/app)\n"
                         "\t 2010 main+0x10 (/bin/app)\n\n"
                         // the inner f is the leaf now, sampled at the same address
                         "app 1/1 1.1: 1 cpu-clock:\n"
                         "\t 1030 f+0x30 (/bin/app)\n"
                         "\t 1030 f+0x30 (/bin/app)\n"
                         "\t 2010 main+0x10 (/bin/app)\n\n"
                         // and a caller again
                         "app 1/1 1.2: 1 cpu-clock:\n"
                         "\t 1005 g+0x5 (/bin/app)\n"
                         "\t 1030 f+0x30 (/bin/app)\n"
                         "\t 1030 f+0x30 (/bin/app)\n"
                         "\t 2010 main+0x10 (/bin/app)\n\n");
    const auto& p = r->prof;
    REQUIRE(p.sample_count() == 3);
    // The leaf keeps the instruction sampled; the recurring caller keeps none.
    CHECK(p.site_offset(p.sample_site(1)) == 0x30);
    CHECK(p.site_offset(p.site_parent(p.sample_site(0))) == profile::no_offset);
    CHECK(p.site_offset(p.site_parent(p.sample_site(2))) == profile::no_offset);
    CHECK(p.sample_site(0) == p.sample_site(2));
}

TEST_CASE(
    "call sites: an entry into the kernel from the program is placed where perf printed it, and "
    "a kernel module's call into the kernel is a call",
    "[collector][parser][views]") {
    const auto r = parse("app 1/1 1.0: 1 cpu-clock:\n"
                         "\tffffffff81001000 asm_sysvec_apic_timer_interrupt+0x1a "
                         "([kernel.kallsyms])\n"
                         "\t 1010 loop+0x10 (/bin/app)\n\n"
                         "app 1/1 1.1: 1 cpu-clock:\n"
                         "\tffffffff81002000 submit_bio+0x8 ([kernel.kallsyms])\n"
                         "\tffffffffc0001010 ext4_writepages+0x20 ([ext4])\n\n"
                         "app 1/1 1.2: 1 cpu-clock:\n"
                         "\tffffffff81003000 do_syscall_64+0x4 ([kernel.kallsyms])\n"
                         "\t 7ffc1000 __vdso_clock_gettime+0x30 ([vdso])\n\n");
    const auto& p = r->prof;
    REQUIRE(p.sample_count() == 3);
    auto place = [&](std::size_t i) {
        const auto leaf = p.sample_site(i);
        return call_offset(p, p.site_parent(leaf), leaf);
    };
    CHECK(place(0).into_kernel);
    CHECK(place(0).offset == 0x10); // the instruction interrupted
    CHECK_FALSE(place(1).into_kernel);
    CHECK(place(1).offset == 0x1f); // inside the call instruction
    CHECK(place(2).into_kernel);    // the vDSO is the process's
    CHECK(place(2).offset == 0x30);
}

TEST_CASE("perf script: past its allowance of sites a profile keeps no more call sites, and "
          "counts what it left out",
          "[collector][parser]") {
    // Each sample's caller returns to another address: a site each, until the allowance.
    std::string text;
    constexpr int samples = 20000;
    for (int k = 0; k < samples; ++k) {
        char offset[16];
        std::snprintf(offset, sizeof offset, "%x", k);
        text += "app 1/1 1." + std::to_string(k) +
                ": 1 cpu-clock:\n\t 1010 leaf+0x10 (/bin/app)\n"
                "\t 1020 caller+0x" +
                offset + " (/bin/app)\n\t 2005 main+0x5 (/bin/app)\n\n";
    }
    const auto r = parse(text);
    const auto& p = r->prof;
    REQUIRE(p.sample_count() == samples);
    CHECK(p.node_count() == 4); // root, main, caller, leaf
    CHECK(p.caller_sites_full());
    const auto kept = p.site_count();
    CHECK(kept <= 4 * p.node_count() + 16384 + 3);
    // Every sample past the allowance lost only its caller's offset.
    const auto dropped = r->stats.call_sites_dropped;
    CHECK(dropped > 0);
    CHECK(dropped == static_cast<std::uint64_t>(samples) - (kept - 4) / 2);
    CHECK(p.site_offset(p.site_parent(p.sample_site(samples - 1))) == profile::no_offset);
    CHECK(p.site_offset(p.sample_site(samples - 1)) == 0x10);
    CHECK(p.site_offset(p.site_parent(p.sample_site(0))) == 0);

    // Callers nobody named keep every address (what names them later), and count in no
    // allowance: the named callers of a later sample still keep theirs.
    std::string stripped;
    for (int k = 0; k < samples; ++k) {
        char address[16];
        std::snprintf(address, sizeof address, "%x", 0x10000 + k);
        stripped += "app 1/1 2." + std::to_string(k) +
                    ": 1 cpu-clock:\n\t 1010 [unknown] (/bin/stripped)\n\t " + address +
                    " [unknown] (/bin/stripped)\n\t 2005 main+0x5 (/bin/app)\n\n";
    }
    stripped += "app 1/1 3.0: 1 cpu-clock:\n\t 1010 leaf+0x10 (/bin/app)\n"
                "\t 1020 caller+0x7777 (/bin/app)\n\t 2005 main+0x5 (/bin/app)\n\n";
    const auto s = parse(stripped);
    const auto& q = s->prof;
    REQUIRE(q.sample_count() == samples + 1);
    CHECK(s->stats.call_sites_dropped == 0);
    CHECK_FALSE(q.caller_sites_full());
    CHECK(q.site_offset(q.site_parent(q.sample_site(samples - 1))) == 0x10000 + samples - 1);
    CHECK(q.site_offset(q.site_parent(q.sample_site(samples))) == 0x7777);
}

TEST_CASE("perf script: a stack deeper than any perf makes is cut, and says so",
          "[collector][parser]") {
    std::string text = "app 1/1 1.0: 1 cpu-clock:\n";
    for (std::size_t i = 0; i < max_stack_frames + 10; ++i)
        text += "\t 1 f" + std::to_string(i) + " (/bin/app)\n";
    const auto r = parse(text + "\n");
    const auto& p = r->prof;
    REQUIRE(p.sample_count() == 1);
    std::size_t depth = 0;
    for (auto n = p.sample_node(0); n != profile::root; n = p.node_parent(n))
        ++depth;
    CHECK(depth == max_stack_frames);
    CHECK(r->stats.deep_frames == 10);
    CHECK(r->stats.skipped_lines == 0);
    CHECK(p.symbol(p.node_frame(p.sample_node(0))) == "f0"); // the leaf is kept
}

namespace {

struct header_shape {
    std::string header, comm, event, leaf;
    std::uint32_t pid = 0, tid = 0;
};

// test/collector/fixtures/header_shapes.tsv: header, comm, pid, tid, event, leaf per line.
std::vector<header_shape> header_shapes() {
    std::vector<header_shape> rows;
    std::istringstream in(fixture("collector/fixtures/header_shapes.tsv"));
    for (std::string line; std::getline(in, line);) {
        if (line.empty() || line[0] == '#')
            continue;
        std::vector<std::string> f;
        for (std::size_t pos = 0;;) {
            const auto tab = line.find('\t', pos);
            f.push_back(line.substr(pos, tab - pos));
            if (tab == std::string::npos)
                break;
            pos = tab + 1;
        }
        REQUIRE(f.size() == 6);
        rows.push_back({f[0], f[1], f[4], f[5], static_cast<std::uint32_t>(std::stoul(f[2])),
                        static_cast<std::uint32_t>(std::stoul(f[3]))});
    }
    return rows;
}

} // namespace

TEST_CASE("every header shape in the table parses to its comm, pid, tid, event and leaf",
          "[collector][parser]") {
    const auto rows = header_shapes();
    REQUIRE(rows.size() >= 30);
    std::string all;
    for (const auto& row : rows) {
        INFO(row.header);
        const std::string text = row.header + "\n\t 4005d6 table_leaf+0x4 (/bin/app)\n\n";
        all += text;
        const auto r = parse(text);
        const auto& p = r->prof;
        CHECK(r->stats.skipped_lines == 0);
        REQUIRE(p.sample_count() == 1);
        CHECK(p.sample_tid(0) == row.tid);
        const auto& t = p.threads().at(row.tid);
        CHECK(t.pid == row.pid);
        CHECK(p.strings()[t.comm] == row.comm);
        CHECK(p.event_name(p.sample_event(0)) == row.event);
        CHECK(p.symbol(p.node_frame(p.sample_node(0))) == row.leaf);
    }
    // All at once, as one recording: one sample per row, nothing skipped.
    const auto r = parse(all);
    CHECK(r->stats.samples == rows.size());
    CHECK(r->stats.skipped_lines == 0);
}

namespace {

// The collector's symbols for a module /bin/app with two static work(): a.c's at 0x1150 and
// b.c's at 0x2170 (0x170 into a page, as a.c's is 0x150), main at 0x3000 its own.
class two_works final : public frame_namer {
public:
    std::optional<name> name_frame(std::string_view, std::uint64_t) override {
        return std::nullopt;
    }
    bool names_all(std::string_view) const override { return false; }
    std::vector<start> starts_of(std::string_view module, std::string_view symbol) override {
        ++asked;
        if (module != "/bin/app")
            return {};
        if (symbol == "work")
            return {{0x1150, "work (a.c)"}, {page_clash ? 0x2150U : 0x2170U, "work (b.c)"}};
        if (symbol == "main")
            return {{0x3000, "main"}};
        return {};
    }
    int asked = 0;
    bool page_clash = false;
};

// A sample of `pid` in work() at runtime address `start` + 8, called from main (at `main`, or
// no caller when 0).
std::string work_sample(std::uint32_t pid, std::uint64_t start, std::uint64_t main = 0) {
    std::ostringstream s;
    s << "app " << pid << "/" << pid << " 1.0: 1000 cpu-clock:\n\t" << std::hex << start + 8
      << " work+0x8 (/bin/app)\n";
    if (main)
        s << "\t" << main + 0x20 << " main+0x20 (/bin/app)\n";
    s << "\n";
    return s.str();
}

std::vector<std::string> leaves(const profile& p) {
    std::vector<std::string> out;
    for (std::size_t r = 0; r < p.row_count(); ++r)
        out.emplace_back(p.symbol(p.node_frame(p.row_node(p.row(r)))));
    return out;
}

} // namespace

TEST_CASE("functions perf names alike are told apart by where they start: by their place in a "
          "page, else by where a function of their own name places the module in the process",
          "[collector][parser]") {
    // Frame lines memoized or not (an import's parse): a line read before is told apart again,
    // by its process (the same line is work, then work (b.c) once main placed the module).
    const bool memo = GENERATE(false, true);
    INFO("memoized: " << memo);
    two_works names;
    profile p;
    script_parser parser(p);
    parser.name_frames_with(&names);
    parser.memoize_frames(memo);
    // perf's file addresses (the module at 0): each by its place in a page.
    parser.feed(work_sample(1, 0x1150) + work_sample(1, 0x2170) + work_sample(1, 0x4150));
    // Loaded elsewhere in another process (runtime addresses): the page place still tells.
    parser.feed(work_sample(2, 0x7f0000002170) + work_sample(2, 0x7f0000001150));
    parser.finish();
    // 0x4150 is at a.c's place in a page, but the first sample placed the module at 0 in
    // that process: no function starts there (another build?), so it stays as perf named it.
    CHECK(leaves(p) ==
          std::vector<std::string>{"work (a.c)", "work (b.c)", "work", "work (b.c)", "work (a.c)"});
    CHECK(names.asked == 1); // once per frame perf named

    // Both at one place in a page: main, a function of its own name, places the module.
    two_works clash;
    clash.page_clash = true;
    profile q;
    script_parser clashing(q);
    clashing.name_frames_with(&clash);
    clashing.memoize_frames(memo);
    clashing.feed(work_sample(3, 0x5000002150) +               // not placed yet: as perf named it
                  work_sample(3, 0x5000001150, 0x5000003000) + // main places it
                  work_sample(3, 0x5000002150) + work_sample(4, 0x6000002150, 0x6000003000) +
                  work_sample(4, 0x6000009150) + // placed, but no function starts there
                  // pid 4 again, another program loaded elsewhere: its main says where.
                  work_sample(4, 0x7000001150, 0x7000003000));
    clashing.finish();
    CHECK(leaves(q) == std::vector<std::string>{"work", "work (a.c)", "work (b.c)", "work (b.c)",
                                                "work", "work (a.c)"});
}

namespace {

// The collector's symbols for a stripped /bin/stripped, learned as the test goes: function
// name -> [start, end) in the module's file.
class learning_namer final : public frame_namer {
public:
    std::optional<name> name_frame(std::string_view module, std::uint64_t address) override {
        ++asked;
        if (module != "/bin/stripped")
            return std::nullopt;
        for (const auto& [fn, range] : known)
            if (address >= range.first && address < range.second)
                return name{fn, static_cast<std::uint32_t>(address - range.first)};
        return std::nullopt;
    }
    bool names_all(std::string_view) const override { return false; }
    std::map<std::string, std::pair<std::uint64_t, std::uint64_t>> known;
    int asked = 0;
};

// A stripped program's samples: alpha (0x1000), beta (0x2000, recursing), gamma (0x3000),
// and an address no symbol covers (0x9000), called from a named main.
const char* const stripped_text = "app 1/1 1.0: 1 cpu-clock:\n"
                                  "\t 1010 [unknown] (/bin/stripped)\n"
                                  "\t 2040 [unknown] (/bin/stripped)\n"
                                  "\t 4005 main+0x5 (/bin/app)\n\n"
                                  "app 1/1 1.1: 1 cpu-clock:\n"
                                  "\t 1020 [unknown] (/bin/stripped)\n"
                                  "\t 2040 [unknown] (/bin/stripped)\n"
                                  "\t 4005 main+0x5 (/bin/app)\n\n"
                                  "app 2/2 1.2: 3 cpu-clock:\n"
                                  "\t 2050 [unknown] (/bin/stripped)\n"
                                  "\t 4005 main+0x5 (/bin/app)\n\n"
                                  "app 2/2 1.3: 1 cpu-clock:\n"
                                  "\t 1010 [unknown] (/bin/stripped)\n"
                                  "\t 2040 [unknown] (/bin/stripped)\n"
                                  "\t 2060 [unknown] (/bin/stripped)\n"
                                  "\t 2040 [unknown] (/bin/stripped)\n"
                                  "\t 3030 [unknown] (/bin/stripped)\n"
                                  "\t 4005 main+0x5 (/bin/app)\n\n"
                                  "app 1/1 1.4: 1 cpu-clock:\n"
                                  "\t 9000 [unknown] (/bin/stripped)\n"
                                  "\t 2040 [unknown] (/bin/stripped)\n"
                                  "\t 4005 main+0x5 (/bin/app)\n\n"
                                  "app 1/1 1.5: 2 cpu-clock:\n"
                                  "\t 2040 [unknown] (/bin/stripped)\n"
                                  "\t 4005 main+0x5 (/bin/app)\n\n";

// Each row's stack, root first, as "symbol+offset" ("symbol" without one), and its weight.
std::multiset<std::string> stacks_of(const profile& p) {
    std::multiset<std::string> out;
    for (std::size_t r = 0; r < p.row_count(); ++r) {
        const auto row = p.row(r);
        std::string stack;
        for (auto s = row.site; s != 0; s = p.site_parent(s)) {
            std::ostringstream f;
            f << p.symbol(p.site_frame(s));
            if (p.site_offset(s) != profile::no_offset)
                f << "+0x" << std::hex << p.site_offset(s);
            stack = f.str() + (stack.empty() ? "" : ";") + stack;
        }
        out.insert(stack + " " + std::to_string(row.period) + "/" + std::to_string(row.count));
    }
    return out;
}

} // namespace

TEST_CASE("perf script: symbols learned after a parse name its nameless frames in place, as a new "
          "parse with them would",
          "[collector][parser]") {
    learning_namer names;
    profile p;
    script_parser parser(p);
    parser.name_frames_with(&names);
    parser.feed(stripped_text);
    parser.finish();
    CHECK(function_map(p).count("[unknown]") == 1);
    const auto nodes_before = p.node_count();

    // Nothing learned: nothing to rename.
    CHECK(parser.name_again() == script_parser::renaming::unchanged);

    names.known = {
        {"alpha", {0x1000, 0x1100}}, {"beta", {0x2000, 0x2100}}, {"gamma", {0x3000, 0x3100}}};
    REQUIRE(parser.name_again() == script_parser::renaming::renamed);
    // The oracle: a new parse of the same text with the symbols known.
    learning_namer knowing;
    knowing.known = names.known;
    profile fresh;
    script_parser again(fresh);
    again.name_frames_with(&knowing);
    again.feed(stripped_text);
    again.finish();
    CHECK(stacks_of(p) == stacks_of(fresh));
    CHECK(function_map(p) == function_map(fresh));
    CHECK(function_map(p, false) == function_map(fresh, false));
    CHECK(p.node_count() == fresh.node_count());
    CHECK(p.site_count() == fresh.site_count());
    CHECK(p.node_count() > nodes_before); // one nameless frame became several functions
    // beta's inner calls recur: they keep no offset now that they are one named function.
    CHECK(stacks_of(p).count("main+0x5;gamma+0x30;beta+0x40;beta;beta;alpha+0x10 1/1") == 1);
    CHECK(stacks_of(p).count("main+0x5;beta+0x40;[unknown]+0x9000 1/1") == 1);

    // Samples that come after are named as a new parse names them, onto the same sites.
    parser.feed(stripped_text);
    parser.finish();
    again.feed(stripped_text);
    again.finish();
    CHECK(stacks_of(p) == stacks_of(fresh));
    CHECK(p.site_count() == fresh.site_count());

    // Folded rows move with their sites too.
    profile folded;
    learning_namer late;
    script_parser folding(folded);
    folding.name_frames_with(&late);
    for (int i = 0; i < 2000; ++i)
        folding.feed(stripped_text);
    folding.finish();
    folded.compact(100, 1'000'000'000);
    REQUIRE(folded.compacted_rows() > 0);
    late.known = names.known;
    REQUIRE(folding.name_again() == script_parser::renaming::renamed);
    const auto fm = function_map(folded);
    CHECK(fm.at("alpha").first == 2000 * 3);
    CHECK(fm.at("beta").second == 2000 * 9);
    CHECK(fm.at("[unknown]").first == 2000);

    // Functions told apart keep what was learned of where their module is loaded: pid 3's
    // main placed it before the renaming, and places work() after it.
    {
        two_works apart;
        struct both final : frame_namer {
            learning_namer* names;
            two_works* works;
            std::optional<name> name_frame(std::string_view m, std::uint64_t a) override {
                return names->name_frame(m, a);
            }
            bool names_all(std::string_view) const override { return false; }
            std::vector<start> starts_of(std::string_view m, std::string_view s) override {
                return works->starts_of(m, s);
            }
        } namer;
        learning_namer learner;
        apart.page_clash = true;
        namer.names = &learner;
        namer.works = &apart;
        profile r;
        script_parser placing(r);
        placing.name_frames_with(&namer);
        placing.feed(work_sample(3, 0x5000002150, 0x5000003000) + stripped_text);
        placing.finish();
        learner.known = names.known;
        REQUIRE(placing.name_again() == script_parser::renaming::renamed);
        placing.feed(work_sample(3, 0x5000001150));
        placing.finish();
        CHECK(r.symbol(r.site_frame(r.sample_site(r.sample_count() - 1))) == "work (a.c)");
    }

    // A name given before that would now be another: only a new parse is exact, and the
    // profile is left as it was.
    const auto before = stacks_of(p);
    names.known["alpha"] = {0x1008, 0x1100};
    CHECK(parser.name_again() == script_parser::renaming::reparse);
    CHECK(stacks_of(p) == before);
}

TEST_CASE("side-band records are recognised, lost ones counted, unreadable lines counted",
          "[collector][parser]") {
    const auto r = parse("            :-1    -1/-1   [000]     0.000000: PERF_RECORD_LOST lost 12\n"
                         "perf 7/7 [001] 1.000000: PERF_RECORD_LOST_SAMPLES lost 3\n"
                         "app 7/7 [001] 1.000000: PERF_RECORD_COMM: app:7/7\n"
                         "# ========\n# captured on    : Mon Nov 23 10:00:00 2026\n"
                         "# Total Lost Samples: 5\n"
                         "app 7/7 [001] 1.000000: 1 cycles:\n\t1 f (/x)\n\n"
                         "app 7/7 [001] 1.000000 cycles:\n"    // no colon after the time
                         "app x/7 [001] 1.000000: 1 cycles:\n" // pid is not a number
                         "\t1 f (/x)\n"                        // a frame with no header
                         "random words: here\n");
    CHECK(r->stats.samples == 1);
    CHECK(r->stats.lost_events == 12 + 3 + 5);
    CHECK(r->stats.records == 3);
    CHECK(r->stats.comments == 3);
    CHECK(r->stats.skipped_lines == 4);
}

TEST_CASE("feeding in any pieces equals feeding whole", "[collector][parser]") {
    const std::string text = fixture("collector/fixtures/system_wide_cpu.txt") +
                             fixture("collector/fixtures/callchain_fields.txt");
    const auto whole = parse(text);
    std::mt19937 rng(11);
    profile pieces;
    script_parser parser(pieces);
    for (std::size_t pos = 0; pos < text.size();) {
        const std::size_t n = std::min<std::size_t>(text.size() - pos, 1 + rng() % 200);
        parser.feed(std::string_view(text).substr(pos, n));
        pos += n;
    }
    parser.finish();
    CHECK(parser.stats().samples == whole->stats.samples);
    CHECK(parser.stats().skipped_lines == 0);
    CHECK(function_map(pieces) == function_map(whole->prof));
    CHECK(pieces.node_count() == whole->prof.node_count());
}

TEST_CASE("chunk by chunk aggregation equals one batch", "[collector][parser]") {
    const std::string text = fixture("collector/fixtures/callchain_fields.txt");
    const auto batch = parse(text);
    profile incremental;
    script_parser parser(incremental);
    // Cut where the agent would: on blank lines, in four chunks, views read between them.
    std::size_t pos = 0;
    for (int i = 1; i <= 4; ++i) {
        std::size_t cut = i == 4 ? text.size() : text.find("\n\n", text.size() * i / 4) + 2;
        parser.feed(std::string_view(text).substr(pos, cut - pos));
        pos = cut;
        CHECK_FALSE(functions(incremental, {}).rows.empty());
    }
    parser.finish();
    CHECK(function_map(incremental) == function_map(batch->prof));
}

TEST_CASE("thread and time filters, threads view", "[collector][views]") {
    const auto r = parse(fixture("collector/fixtures/callchain_fields.txt"));
    const auto& p = r->prof;
    const auto rows = threads(p, {});
    REQUIRE(rows.size() == 4);
    std::uint64_t samples = 0;
    for (const auto& t : rows)
        samples += t.samples;
    CHECK(samples == p.sample_count());
    const auto matrix = std::find_if(rows.begin(), rows.end(),
                                     [](const thread_row& t) { return t.comm == "demo-matrix"; });
    REQUIRE(matrix != rows.end());
    REQUIRE_FALSE(matrix->top_functions.empty());
    CHECK(p.symbol(matrix->top_functions.front().frame) ==
          "(anonymous namespace)::matrix_multiply");

    view_filter only;
    only.tid = matrix->tid;
    only.by_period = false;
    const auto fns = functions(p, only);
    CHECK(fns.total_weight == matrix->samples);
    for (const auto& row : fns.rows)
        CHECK(p.symbol(row.frame).find("hash_strings") == std::string_view::npos);

    view_filter window;
    window.by_period = false;
    window.start_ns = p.first_time();
    window.end_ns = p.first_time() + (p.last_time() - p.first_time()) / 2;
    const auto half = functions(p, window).total_weight;
    CHECK(half > 0);
    CHECK(half < p.sample_count());
}

TEST_CASE("events resolve by exact or base name", "[collector][views]") {
    const auto r = parse("a 1/1 1.0: 5 cpu_core/cycles/: \n\t1 f (/x)\n\n"
                         "a 1/1 1.1: 5 cpu_atom/cycles/: \n\t1 f (/x)\n\n"
                         "a 1/1 1.2: 5 instructions:u: \n\t1 f (/x)\n\n"
                         "a 1/1 1.3: 5 instructions:u: \n\t1 f (/x)\n\n");
    const auto& p = r->prof;
    CHECK(event_base_name("cycles:u") == "cycles");
    CHECK(event_base_name("cpu_core/cycles/") == "cycles");
    CHECK(resolve_event(p, "cpu_atom/cycles/").event == 1);
    CHECK(resolve_event(p, "instructions").event == 2);
    CHECK(resolve_event(p, "").event == 2); // most samples
    const auto ambiguous = resolve_event(p, "cycles");
    CHECK_FALSE(ambiguous.event);
    CHECK(ambiguous.candidates == std::vector<std::string>{"cpu_core/cycles/", "cpu_atom/cycles/"});
    CHECK(resolve_event(p, "branches").candidates.size() == 3);
}

TEST_CASE("an event sampled along a ladder of rates is the event, its samples weighed by their "
          "periods",
          "[collector][parser]") {
    // An agent held to a budget names each rate perf holds (agent rung_name); a name that only
    // looks alike stays its own.
    const auto r = parse("a 1/1 1.0: 1001001 cpu-clock.999hz: \n\t1 f (/x)\n\n"
                         "a 1/1 2.0: 1250000 cpu-clock.799hz: \n\t1 g (/x)\n\n"
                         "a 1/1 2.5: 3000 cycles:u.99hz: \n\t1 g (/x)\n\n"
                         "a 1/1 3.0: 5 probe:f.hz: \n\t1 f (/x)\n\n"
                         "a 1/1 3.1: 5 my.3xhz: \n\t1 f (/x)\n\n");
    const auto& p = r->prof;
    CHECK(r->stats.skipped_lines == 0);
    REQUIRE(p.sample_count() == 5);
    CHECK(p.event_name(p.sample_event(0)) == "cpu-clock");
    CHECK(p.sample_event(1) == p.sample_event(0));
    CHECK(p.sample_period(1) == 1250000);
    CHECK(p.event_name(p.sample_event(2)) == "cycles:u");
    CHECK(p.event_name(p.sample_event(3)) == "probe:f.hz");
    CHECK(p.event_name(p.sample_event(4)) == "my.3xhz");
    // Not a tracepoint: its samples' stacks are read as any sampled event's.
    CHECK(p.symbol(p.node_frame(p.sample_node(2))) == "g");
}

TEST_CASE("the perf stat section is split off a chunk", "[collector][parser]") {
    const auto [script, stat] = split_perf_stat("a 1/1 1.0: 1 cpu-clock: \n\t1 f (/x)\n\n"
                                                "\n### PERF_STAT ###\n 1,234.5 msec task-clock\n");
    CHECK(script == "a 1/1 1.0: 1 cpu-clock: \n\t1 f (/x)\n\n");
    CHECK(stat == " 1,234.5 msec task-clock\n");
    CHECK(split_perf_stat("no marker").second.empty());
}

TEST_CASE("folding the oldest samples into per-interval rows keeps every count and view, a time "
          "window exact to the interval",
          "[collector][views][memory]") {
    // Two identical profiles of 200,000 samples over 10 s, 6 threads, 40 call paths, two
    // events; one is then folded.
    profile whole, folded;
    std::mt19937 rng(7);
    for (auto* p : {&whole, &folded}) {
        rng.seed(7);
        std::vector<std::uint32_t> nodes;
        for (int i = 0; i < 40; ++i) {
            const auto a = p->child(profile::root, p->intern_frame("main", "/app"));
            nodes.push_back(p->child(a, p->intern_frame("f" + std::to_string(i % 13), "/app")));
            if (i % 3 == 0)
                nodes.back() = p->child(nodes.back(), p->intern_frame("leaf", "/lib"));
        }
        const std::uint8_t clock = p->intern_event("cpu-clock");
        const std::uint8_t other = p->intern_event("task-clock");
        for (std::uint64_t t = 0; t < 200000; ++t) {
            const std::uint32_t tid = 100 + static_cast<std::uint32_t>(rng() % 6);
            p->add_sample(t * 50000 + rng() % 50000, nodes[rng() % nodes.size()], 100, tid,
                          "worker", rng() % 5 ? clock : other, 1000000 + rng() % 1000,
                          static_cast<std::uint32_t>(rng() % 4));
        }
    }
    const std::size_t block = column<std::uint64_t>::block_size;
    const std::size_t first = (200000 - 70000) / block * block; // whole blocks only
    CHECK(folded.compact(70000, 1'000'000'000) == first);
    CHECK(folded.raw_begin() == first);
    CHECK(folded.raw_samples() == 200000 - first);
    CHECK(folded.sample_count() == 200000);
    CHECK(folded.sample_bytes() < whole.sample_bytes());
    std::uint64_t counted = 0;
    for (std::size_t r = 0; r < folded.row_count(); ++r)
        counted += folded.row(r).count;
    CHECK(counted == 200000);
    CHECK(folded.row_count() < whole.row_count());

    const auto same = [&](const view_filter& f) {
        const auto a = functions(whole, f), b = functions(folded, f);
        REQUIRE(a.rows.size() == b.rows.size());
        CHECK(a.total_weight == b.total_weight);
        for (std::size_t i = 0; i < a.rows.size(); ++i) {
            CHECK(a.rows[i].frame == b.rows[i].frame);
            CHECK(a.rows[i].self == b.rows[i].self);
            CHECK(a.rows[i].total == b.rows[i].total);
        }
        CHECK(node_self_weights(whole, f) == node_self_weights(folded, f));
        CHECK(site_self_weights(whole, f) == site_self_weights(folded, f));
    };
    for (const bool by_period : {true, false}) {
        view_filter f;
        f.by_period = by_period;
        same(f); // from the running aggregates
        f.tid = 103;
        same(f); // a scan of rows and samples
        f.event = 1;
        same(f);
        // Windows on whole seconds are exact; so is one over folded and whole samples alike.
        view_filter w;
        w.by_period = by_period;
        w.start_ns = 2'000'000'000;
        w.end_ns = 5'000'000'000 - 1;
        same(w);
        w.start_ns = 6'000'000'000;
        w.end_ns = 9'000'000'000 - 1;
        same(w);
    }
    const auto threads_of = [](const profile& p) {
        std::map<std::uint32_t, std::pair<std::uint64_t, std::uint64_t>> out;
        for (const auto& t : threads(p, {}))
            out[t.tid] = {t.samples, t.weight};
        return out;
    };
    CHECK(threads_of(whole) == threads_of(folded));

    // Wider intervals: fewer rows, windows on their bounds still exact; more samples fold at
    // the width now in use.
    const auto rows_before = folded.compacted_rows();
    folded.coarsen(4'000'000'000);
    CHECK(folded.compact_width() == 4'000'000'000);
    CHECK(folded.compacted_rows() < rows_before);
    CHECK(folded.compact(0, 1'000'000'000) == (200000 - first) / block * block); // at 4 s
    CHECK(folded.compact_width() == 4'000'000'000);
    view_filter w;
    w.start_ns = 4'000'000'000;
    w.end_ns = 8'000'000'000 - 1;
    same(w);
    same({});
}

TEST_CASE("a profile whose frames, call paths and threads fill their room makes no new ones — "
          "every sample is counted, those that needed one at one frame that says so",
          "[collector][parse][budget]") {
    // 20,000 samples, each with a function, a caller and a thread never seen before (what a
    // hostile agent sends to grow a session past its memory share).
    std::ostringstream text;
    for (int i = 0; i < 20000; ++i)
        text << "w" << i << " " << 1000 + i << "/" << 1000 + i << " " << 100 + i
             << ".000001: 1 cpu-clock:\n\t1 f" << i << "+0x1 (/bin/m" << i % 7 << ")\n\t2 caller"
             << i << "+0x2 (/bin/m)\n\t3 main+0x3 (/bin/m)\n\n";
    profile whole;
    script_parser all(whole);
    all.feed(text.str());
    all.finish();
    REQUIRE(whole.frame_count() > 40000);
    const std::size_t room = whole.shape_bytes() / 8;

    profile p;
    p.set_shape_room(room);
    script_parser parser(p);
    parser.feed(text.str());
    parser.finish();
    CHECK(p.sample_count() == 20000);
    // (Checked by capacity: the growth that crossed the room is the last.)
    CHECK(p.shape_bytes() <= 2 * room + (std::size_t{64} << 10));
    CHECK(p.frame_count() < whole.frame_count() / 2);
    CHECK(p.threads().size() < whole.threads().size() / 2);
    const auto past = p.past_room_samples();
    CHECK(past > 10000);
    CHECK(past < 20000);
    const auto fm = function_map(p, false);
    REQUIRE(fm.count(std::string(profile::past_room_symbol)));
    CHECK(fm.at(std::string(profile::past_room_symbol)).first == past);
    std::uint64_t self = 0;
    for (const auto& [name, counts] : fm)
        self += counts.first;
    CHECK(self == 20000);          // every sample counted once
    CHECK(fm.at("f0").first == 1); // the first ones are whole
    CHECK(fm.at("main").second == 20000 - past);
    const auto past_thread = p.threads().find(profile::past_room_tid);
    REQUIRE(past_thread != p.threads().end());
    CHECK(p.strings()[past_thread->second.comm] == profile::past_room_symbol);

    // More room later (another session ended): new ones are made again.
    p.set_shape_room(SIZE_MAX);
    parser.feed("late 9/9 99999.000001: 1 cpu-clock:\n\t1 newcomer+0x1 (/bin/m)\n\n");
    parser.finish();
    CHECK(function_map(p, false).at("newcomer").first == 1);
}

TEST_CASE("off-cpu: a thread's wait runs from its sched_switch to its switch back in, on the "
          "stack where it left",
          "[collector][parser][off-cpu]") {
    // As perf script --show-switch-events prints `perf record -e cpu-clock -e
    // sched:sched_switch --switch-events -g`: thread 11 sleeps 20 ms in nap, is preempted for
    // 1.5 ms in spin, and waits for I/O 4 ms without a switch back in (its next sample ends
    // it); thread 12 runs.
    const std::string text =
        "app 10/11 [000] 100.000000: sched:sched_switch: prev_comm=app prev_pid=11 "
        "prev_prio=120 prev_state=S ==> next_comm=swapper/0 next_pid=0 next_prio=120\n"
        "\tffffffff8100 __schedule+0x10 ([kernel.kallsyms])\n"
        "\t401000 nap+0x4 (/bin/app)\n"
        "\t401100 main+0x8 (/bin/app)\n\n"
        "app 11 100.000004: PERF_RECORD_SWITCH OUT\n"
        "app 10/12 [001] 100.010000:    5000000 cpu-clock: \n"
        "\t401200 spin+0x1 (/bin/app)\n"
        "\t401100 main+0x8 (/bin/app)\n\n"
        "app 11 100.020000: PERF_RECORD_SWITCH IN\n"
        "app 10/11 [000] 100.030000: sched:sched_switch: prev_comm=app prev_pid=11 "
        "prev_prio=120 prev_state=R+ ==> next_comm=other next_pid=99 next_prio=120\n"
        "\t401200 spin+0x1 (/bin/app)\n"
        "\t401100 main+0x8 (/bin/app)\n\n"
        "app 11 100.031500: PERF_RECORD_SWITCH IN\n"
        "app 10/11 [000] 100.040000: sched:sched_switch: prev_comm=a ==> b prev_state=S "
        "prev_pid=11 prev_prio=120 prev_state=D ==> next_comm=swapper/0 next_pid=0 "
        "next_prio=120\n"
        "\t401300 read_file+0x2 (/bin/app)\n"
        "\t401100 main+0x8 (/bin/app)\n\n"
        "app 10/11 [000] 100.044000:    5000000 cpu-clock: \n"
        "\t401200 spin+0x1 (/bin/app)\n"
        "\t401100 main+0x8 (/bin/app)\n\n"
        // Left and never back: no wait can be told.
        "app 10/12 [001] 100.050000: sched:sched_switch: prev_comm=app prev_pid=12 "
        "prev_prio=120 prev_state=S ==> next_comm=swapper/1 next_pid=0 next_prio=120\n"
        "\t401200 spin+0x1 (/bin/app)\n\n";
    // Fed in pieces, each sample a chunk of its own: a wait spans chunks.
    profile prof;
    script_parser parser(prof);
    for (std::size_t at = 0; at < text.size();) {
        const auto end = std::min(text.find("\n\n", at), text.find("\napp 1", at));
        const auto next = end == std::string::npos ? text.size() : end + 1;
        const auto piece = std::string_view(text).substr(at, next - at);
        for (std::size_t k = 0; k < piece.size(); k += 37)
            parser.feed(piece.substr(k, 37));
        parser.finish();
        at = next;
    }
    CHECK(parser.stats().waits == 3);
    CHECK(parser.waiting() == 1);
    CHECK(parser.stats().skipped_lines == 0);
    // No tracepoint event of its own: cpu-clock and off-cpu.
    REQUIRE(prof.event_count() == 2);
    CHECK(prof.event_name(0) == "cpu-clock");
    CHECK(prof.event_name(1) == "off-cpu");
    view_filter f;
    f.event = 1;
    std::map<std::string, std::pair<std::uint64_t, std::uint64_t>> m;
    for (const auto& r : functions(prof, f).rows)
        m[std::string(prof.symbol(r.frame))] = {r.self, r.total};
    CHECK(m["[sleeping]"] == std::pair<std::uint64_t, std::uint64_t>{20'000'000, 20'000'000});
    CHECK(m["[preempted]"] == std::pair<std::uint64_t, std::uint64_t>{1'500'000, 1'500'000});
    CHECK(m["[uninterruptible: I/O]"] ==
          std::pair<std::uint64_t, std::uint64_t>{4'000'000, 4'000'000});
    CHECK(m["nap"].second == 20'000'000);
    CHECK(m["__schedule"].second == 20'000'000);
    CHECK(m["read_file"].second == 4'000'000);
    CHECK(m["main"].second == 25'500'000);
    // On-CPU views unchanged: the two cpu-clock samples alone.
    f.event = 0;
    std::uint64_t cpu = 0;
    for (const auto& r : functions(prof, f).rows)
        cpu += r.self;
    CHECK(cpu == 10'000'000);
}

TEST_CASE("off-cpu: the kind of wait is the kernel's prev_state", "[collector][parser][off-cpu]") {
    CHECK(wait_kind("S") == "[sleeping]");
    CHECK(wait_kind("D") == "[uninterruptible: I/O]");
    CHECK(wait_kind("R") == "[preempted]");
    CHECK(wait_kind("R+") == "[preempted]");
    CHECK(wait_kind("T") == "[stopped]");
    CHECK(wait_kind("") == "[off-cpu]");
    CHECK(switch_prev_state("prev_comm=x prev_pid=1 prev_prio=120 prev_state=D ==> "
                            "next_comm=y next_pid=2 next_prio=120") == "D");
    // A thread named to look like the arguments does not decide its state.
    CHECK(switch_prev_state("prev_comm=a prev_state=R ==> prev_pid=1 prev_prio=120 "
                            "prev_state=S ==> next_comm=y") == "R");
    CHECK(switch_prev_state("prev_comm=x prev_state=<script> ==> n") == "");
    CHECK(switch_prev_state("no state here") == "");
}

TEST_CASE("an export's reshaped view of a folded session stays folded: its counts exact, its "
          "samples never all held whole",
          "[collector][model]") {
    profile p;
    const auto main_ = p.child(profile::root, p.intern_frame("main", "/app"));
    const auto hot = p.child(main_, p.intern_frame("hot", "/app"));
    const auto cold = p.child(main_, p.intern_frame("cold", "/app"));
    const std::uint8_t clock = p.intern_event("cpu-clock");
    constexpr std::uint64_t n = 1'500'000; // 1.5 s at 1 MHz: a session the budget folded
    for (std::uint64_t t = 0; t < n; ++t)
        p.add_sample(t * 1000, t % 3 ? hot : cold, 7, 7, "app", clock, 1000);
    p.compact(0, 100'000'000);
    REQUIRE(p.compacted_rows() > 0);
    view_filter f;
    const auto shaped = reshape(p, f, tree_shape{}, "hot");
    REQUIRE(shaped);
    CHECK(shaped->prof.compacted_rows() > 0);
    CHECK(shaped->prof.raw_samples() < std::size_t{1} << 18);
    CHECK(shaped->prof.sample_bytes() < p.sample_bytes() * 2);
    std::map<std::string, std::uint64_t> self;
    for (const auto& r : functions(shaped->prof, shaped->filter).rows)
        self[std::string(shaped->prof.symbol(r.frame))] = r.self;
    CHECK(self["hot"] == (n - (n + 2) / 3) * 1000); // every sample whose stack holds "hot"
    CHECK(self.count("cold") == 0);
}

namespace {

// Names /bin/app's address 0x1040 "nap", once it knows it.
class late_nap final : public frame_namer {
public:
    bool knows = false;
    std::optional<name> name_frame(std::string_view module, std::uint64_t address) override {
        if (!knows || module != "/bin/app" || address != 0x1040)
            return std::nullopt;
        return name{"nap", 0};
    }
    bool names_all(std::string_view) const override { return false; }
};

} // namespace

TEST_CASE("off-cpu: a wait open while the frames are named again ends on the named stack",
          "[collector][parser][off-cpu]") {
    profile p;
    script_parser parser(p);
    late_nap namer;
    parser.name_frames_with(&namer);
    parser.feed("app 10/11 [000] 100.000000: 1 sched:sched_switch: prev_comm=app prev_pid=11 "
                "prev_prio=120 prev_state=S ==> next_comm=swapper/0 next_pid=0 next_prio=120\n"
                "\t1040 [unknown] (/bin/app)\n"
                "\t1100 main+0x8 (/bin/app)\n\n");
    parser.finish();
    CHECK(parser.waiting() == 1);
    namer.knows = true;
    REQUIRE(parser.name_again() == script_parser::renaming::renamed);
    parser.feed("app 11 100.020000: PERF_RECORD_SWITCH IN\n");
    parser.finish();
    REQUIRE(p.sample_count() == 1);
    std::string stack;
    for (auto s = p.sample_site(0); s != 0; s = p.site_parent(s))
        stack = std::string(p.symbol(p.site_frame(s))) + (stack.empty() ? "" : ";") + stack;
    CHECK(stack == "main;nap;[sleeping]");
    CHECK(p.sample_period(0) == 20'000'000);
}

TEST_CASE("off-cpu: a switch record read before its sample is one wait, on the sample's stack",
          "[collector][parser][off-cpu]") {
    profile p;
    script_parser parser(p);
    parser.feed("app 10/11 100.000000: PERF_RECORD_SWITCH OUT\n"
                "app 10/11 [000] 100.000002: 1 sched:sched_switch: prev_comm=app prev_pid=11 "
                "prev_prio=120 prev_state=S ==> next_comm=swapper/0 next_pid=0 next_prio=120\n"
                "\t401000 nap+0x4 (/bin/app)\n\n"
                "app 10/11 100.010000: PERF_RECORD_SWITCH IN\n");
    parser.finish();
    REQUIRE(p.sample_count() == 1);
    CHECK(parser.stats().waits == 1);
    CHECK(p.sample_period(0) == 10'000'000);
    std::string stack;
    for (auto s = p.sample_site(0); s != 0; s = p.site_parent(s))
        stack = std::string(p.symbol(p.site_frame(s))) + (stack.empty() ? "" : ";") + stack;
    CHECK(stack == "nap;[sleeping]");
}
