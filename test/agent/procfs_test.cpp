#include "agent/metrics.hpp"
#include "agent/procfs.hpp"
#include "protocol/build_id.hpp"
#include "support/fixtures.hpp"

#include <catch2/catch.hpp>

#include <filesystem>
#include <unistd.h>

using namespace agent::procfs;
using test_support::fixture;

TEST_CASE("/proc/stat: totals, per core, counters", "[agent][procfs]") {
    const auto s = parse_stat(fixture("agent/fixtures/proc_stat.txt"));
    // cpu  48189 0 6051 97471 314 0 108 113 0 0   (user nice system idle iowait irq softirq steal)
    CHECK(s.all.total == 48189 + 6051 + 97471 + 314 + 108 + 113);
    CHECK(s.all.busy == 48189 + 6051 + 108 + 113);
    REQUIRE(s.per_core.size() == 2);
    CHECK(s.per_core[1].busy == 22343 + 2855 + 84 + 60);
    CHECK(s.context_switches == 425442);
    CHECK(s.interrupts == 349691);
    CHECK(s.procs_running == 2);
    CHECK(s.procs_blocked == 0);
    CHECK(busy_pct({0, 0}, {50, 100}) == Approx(50.0));
    CHECK(busy_pct({50, 100}, {50, 100}) == 0.0);
}

TEST_CASE("/proc/meminfo, loadavg, uptime", "[agent][procfs]") {
    const auto m = parse_meminfo(fixture("agent/fixtures/meminfo.txt"));
    CHECK(m.total_kb > 1000000);
    CHECK(m.available_kb > 0);
    CHECK(m.available_kb <= m.total_kb);
    CHECK(m.used_kb == m.total_kb - m.available_kb);
    CHECK(m.used_pct == Approx(100.0 * m.used_kb / m.total_kb));
    const auto l = parse_loadavg("1.50 0.75 0.25 3/210 6000\n");
    CHECK(l.avg_1m == 1.5);
    CHECK(l.avg_15m == 0.25);
    CHECK(parse_uptime(fixture("agent/fixtures/uptime.txt")) > 0);
}

TEST_CASE("/proc/net/dev skips lo and reads rx/tx columns", "[agent][procfs]") {
    const auto n = parse_net_dev(fixture("agent/fixtures/net_dev.txt"));
    CHECK_FALSE(n.count("lo"));
    REQUIRE(n.count("eth0"));
    CHECK(n.at("eth0").rx_bytes == 38348342);
    CHECK(n.at("eth0").rx_packets == 1151);
    CHECK(n.at("eth0").tx_bytes == 55909);
    CHECK(n.at("eth0").tx_packets == 728);
}

TEST_CASE("/proc/diskstats: sectors become bytes, loop devices skipped", "[agent][procfs]") {
    const auto d = parse_diskstats("   7       0 loop0 5 0 10 0 0 0 0 0 0 0 0\n"
                                   " 254       0 vda 100 20 800 30 40 5 1600 70 0 90 100\n");
    CHECK_FALSE(d.count("loop0"));
    REQUIRE(d.count("vda"));
    CHECK(d.at("vda").reads == 100);
    CHECK(d.at("vda").read_bytes == 800 * 512);
    CHECK(d.at("vda").writes == 40);
    CHECK(d.at("vda").write_bytes == 1600 * 512);
    CHECK(d.at("vda").read_ms == 30);
    CHECK(d.at("vda").write_ms == 70);
    CHECK_FALSE(parse_diskstats(fixture("agent/fixtures/diskstats.txt")).empty());
}

TEST_CASE("/proc/PID/stat with spaces and parentheses in comm", "[agent][procfs]") {
    const auto s = parse_pid_stat(fixture("agent/fixtures/pid_stat.txt"));
    REQUIRE(s);
    CHECK(s->comm == "perfwire-demo");
    CHECK(s->state == 'R');
    CHECK(s->threads == 4);
    CHECK(s->utime == 162);
    CHECK(s->stime == 1);
    CHECK(s->vsize_bytes == 166244352);
    CHECK(s->rss_pages == 888);
    const auto t = parse_pid_stat(fixture("agent/fixtures/task_stat.txt"));
    REQUIRE(t);
    CHECK(t->comm == "demo-matrix");

    const auto odd = parse_pid_stat("77 (a (b) c) S 1 77 77 0 -1 4194560 10 0 2 0 3 4 0 0 20 0 "
                                    "1 0 500 1000 5 18446744073709551615 0 0");
    REQUIRE(odd);
    CHECK(odd->comm == "a (b) c");
    CHECK(odd->state == 'S');
    CHECK(odd->minor_faults == 10);
    CHECK(odd->major_faults == 2);
    CHECK(odd->utime == 3);
    CHECK(odd->stime == 4);
    CHECK_FALSE(parse_pid_stat("garbage"));
    CHECK_FALSE(parse_pid_stat("12 (x) R 1 2"));
}

TEST_CASE("/proc/PID/status context switches and RSS", "[agent][procfs]") {
    const auto s = parse_pid_status(fixture("agent/fixtures/pid_status.txt"));
    CHECK(s.rss_kb > 0);
    CHECK(s.voluntary_csw + s.involuntary_csw > 0);
}

TEST_CASE("metrics sampler reads this machine's /proc", "[agent][metrics]") {
    agent::metrics_sampler sampler;
    const auto first = sampler.system(1.0);
    CHECK(first.cpu.num_cores >= 1);
    CHECK(first.cpu.per_core.size() == static_cast<std::size_t>(first.cpu.num_cores));
    CHECK(first.mem.total_kb > 0);
    CHECK(first.uptime_sec > 0);
    const auto self = sampler.process(::getpid(), 1.0);
    REQUIRE(self);
    CHECK(self->pid == ::getpid());
    CHECK(self->threads >= 1);
    CHECK(self->fds >= 3);
    CHECK(self->rss_kb > 0);
    const auto threads = sampler.threads(::getpid(), 1.0);
    REQUIRE(threads);
    CHECK(threads->threads.front().tid == ::getpid());
    CHECK_FALSE(sampler.process(999999999, 1.0));
    CHECK_FALSE(sampler.network(1.0).interfaces.count("lo"));
}

TEST_CASE("list_processes ranks by CPU between snapshots", "[agent][metrics]") {
    std::map<int, std::pair<std::string, std::uint64_t>> before{{1, {"init", 100}},
                                                                {2, {"busy", 0}}},
        after{{1, {"init", 100}}, {2, {"busy", 50}}, {3, {"new", 10}}};
    const auto rows = agent::top_processes(before, after, 0.5, 2);
    REQUIRE(rows.size() == 2);
    CHECK(rows[0].pid == 2);
    CHECK(rows[0].cpu == Approx(100.0 * 50 / sysconf(_SC_CLK_TCK) / 0.5));
    CHECK(rows[1].pid == 1); // a process first seen in `after` counts from zero
}

TEST_CASE("/proc/PID/maps: executable files, once each", "[agent][procfs]") {
    // A real capture of the demo, started from a copy that was then deleted.
    const auto files = parse_maps_executables(fixture("agent/fixtures/maps.txt"));
    CHECK(files == std::vector<std::string>{"/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2",
                                            "/usr/lib/x86_64-linux-gnu/libc.so.6",
                                            "/usr/lib/x86_64-linux-gnu/libgcc_s.so.1",
                                            "/usr/lib/x86_64-linux-gnu/libm.so.6",
                                            "/usr/lib/x86_64-linux-gnu/libstdc++.so.6.0.30"});
}

TEST_CASE("metrics sampler: the target's binaries with build-ids, sent when they change",
          "[agent][metrics]") {
    agent::metrics_sampler sampler;
    const auto first = sampler.binaries(::getpid(), 1.0);
    REQUIRE(first);
    CHECK(first->pid == ::getpid());
    const auto self = std::filesystem::read_symlink("/proc/self/exe").string();
    bool found = false;
    for (const auto& b : first->binaries)
        if (b.path == self) {
            found = true;
            CHECK(b.build_id == protocol::read_build_id(self).value_or("?"));
            CHECK_FALSE(b.build_id.empty());
        }
    CHECK(found);
    CHECK_FALSE(sampler.binaries(::getpid(), 3.0)); // nothing changed
    CHECK_FALSE(sampler.binaries(999999999, 3.0));  // no such process
}

TEST_CASE("/proc/kallsyms: text symbols only, module tails dropped, hidden addresses refused",
          "[agent]") {
    const std::string text = "ffffffff81000000 T _stext\n"
                             "ffffffff81000010 t local_fn\n"
                             "ffffffff82000000 D some_data\n"
                             "ffffffff81000020 W weak_fn\n"
                             "ffffffffc0a01000 t nft_fn\t[nf_tables]\n"
                             "garbage\n";
    CHECK(agent::procfs::parse_kallsyms(text) == "ffffffff81000000 _stext\n"
                                                 "ffffffff81000010 local_fn\n"
                                                 "ffffffff81000020 weak_fn\n"
                                                 "ffffffffc0a01000 nft_fn\n");
    CHECK(agent::procfs::parse_kallsyms("0000000000000000 T _stext\n"
                                        "0000000000000000 t local_fn\n")
              .empty());
}
