// agent_overhead: what perfwire-agent costs the device it profiles, and what it delivers.
//
// Runs the real agent against a loopback framing peer while it profiles perfwire-demo (four
// CPU-bound threads). For each run it prints the agent's own CPU use (utime+stime of the agent
// process, which excludes its perf children), its peak RSS (VmHWM), and coverage: samples
// received / (frequency x CPU-seconds the target used), measured between the `start` and
// `stop` responses so the capability probe is not counted; the probe's own time (what perf can
// do, found before the first start) is a column of its own.
//
// Software clocks on a VM deliver fewer samples than frequency x CPU time even to a plain
// `perf record` (hrtimer delivery), so a reference `perf record -o FILE` runs on the same
// target over the same window; coverage_vs_perf = agent samples / reference samples is the
// share of what perf could record that the agent delivered (gaps between chunks, drops).
//
// Usage: agent_overhead [seconds per run, default 30] [coverage seconds, default 60]
#include "protocol/compression.hpp"
#include "support.hpp"
#include "support/framing_peer.hpp"
#include "support/proc_status.hpp"
#include "support/spawn.hpp"

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <unistd.h>

using namespace std::chrono;
using protocol::frame_flag;

namespace {

// Sample headers in a chunk: non-empty lines not starting with TAB, before the stat marker.
long count_samples(const std::string& text) {
    const auto end = text.find("\n### PERF_STAT ###\n");
    std::istringstream in(text.substr(0, end));
    std::string line;
    long n = 0;
    while (std::getline(in, line))
        if (!line.empty() && line[0] != '\t' && line.find("PERF_RECORD_LOST") == std::string::npos)
            ++n;
    return n;
}

struct result {
    double seconds = 0, agent_cpu_pct = 0, target_cpu_s = 0, coverage = 0, vs_perf = 0;
    double probe_s = 0;
    long samples = 0, peak_rss_kb = 0, chunks = 0, reference_samples = 0;
    std::size_t wire_bytes = 0, text_bytes = 0;
};

void count_chunk(const protocol::frame& f, result& r) {
    if (f.flag != frame_flag::zstd)
        return;
    auto text = protocol::decompress(f.payload);
    if (!text)
        throw std::runtime_error("bad zstd frame: " + text.error().message());
    r.samples += count_samples(*text);
    r.wire_bytes += f.payload.size();
    r.text_bytes += text->size();
    ++r.chunks;
}

void drain(test_support::framing_peer& peer, result& r, milliseconds for_how_long) {
    const auto until = steady_clock::now() + for_how_long;
    while (steady_clock::now() < until) {
        auto f = peer.next(duration_cast<milliseconds>(until - steady_clock::now()));
        if (!f)
            return;
        count_chunk(*f, r);
    }
}

result measure(int demo_pid, int frequency, int seconds) {
    result r;
    test_support::listener l;
    test_support::spawned agent(
        PERFWIRE_AGENT_BIN,
        {"--server", "127.0.0.1:" + std::to_string(l.port()), "--duration", "2"});
    const int fd = l.accept(milliseconds(10000));
    if (fd < 0)
        throw std::runtime_error("agent did not connect");
    test_support::framing_peer peer(fd);
    peer.next(milliseconds(5000)); // hello
    auto start = peer.command("start",
                              R"({"pid":)" + std::to_string(demo_pid) + R"(,"frequency":)" +
                                  std::to_string(frequency) + "}",
                              milliseconds(30000));
    if (!start || !start->ok)
        throw std::runtime_error("start failed: " + (start ? start->error : "no answer"));
    if (const auto status = peer.command("status", "{}", milliseconds(10000)); status && status->ok)
        if (const auto* probe =
                status->fields.at("capabilities").as_object().if_contains("probe_seconds"))
            r.probe_s = probe->to_number<double>();
    const double agent0 = bench::cpu_seconds(agent.pid()), target0 = bench::cpu_seconds(demo_pid);
    const std::string ref_path = "/tmp/perfwire-bench-reference.data";
    auto reference = std::make_unique<test_support::spawned>(
        "/usr/bin/perf",
        std::vector<std::string>{"record", "-q", "-e", "cpu-clock", "-F", std::to_string(frequency),
                                 "-p", std::to_string(demo_pid), "-o", ref_path});
    const auto t0 = steady_clock::now();
    drain(peer, r, milliseconds(seconds * 1000));
    // stop answers after the final chunk is queued, so the chunk arrives before the answer.
    auto stop = peer.command("stop", "{}", milliseconds(10000),
                             [&r](const protocol::frame& f) { count_chunk(f, r); });
    reference->signal(SIGINT);
    const double agent1 = bench::cpu_seconds(agent.pid()), target1 = bench::cpu_seconds(demo_pid);
    reference->wait(milliseconds(10000));
    reference.reset();
    test_support::spawned counter(
        "/bin/sh",
        {"-c", "perf script -i " + ref_path + " -F event 2>/dev/null | grep -c cpu-clock"},
        "/tmp/perfwire-bench-reference.count");
    counter.wait(milliseconds(30000));
    std::ifstream count_file("/tmp/perfwire-bench-reference.count");
    count_file >> r.reference_samples;
    std::remove(ref_path.c_str());
    r.seconds = duration<double>(steady_clock::now() - t0).count();
    if (!stop || !stop->ok)
        throw std::runtime_error("stop failed");
    r.agent_cpu_pct = 100.0 * (agent1 - agent0) / r.seconds;
    r.peak_rss_kb = test_support::status_kb(agent.pid(), "VmHWM:");
    r.target_cpu_s = target1 - target0;
    r.coverage = static_cast<double>(r.samples) / (frequency * r.target_cpu_s);
    r.vs_perf = r.reference_samples
                    ? static_cast<double>(r.samples) / static_cast<double>(r.reference_samples)
                    : 0;
    return r;
}

} // namespace

int main(int argc, char** argv) {
    const int run_s = argc > 1 ? std::atoi(argv[1]) : 30;
    const int coverage_s = argc > 2 ? std::atoi(argv[2]) : 60;
    test_support::spawned demo(PERFWIRE_DEMO_BIN, {});
    std::this_thread::sleep_for(milliseconds(300));

    std::printf("%-9s %5s %9s %10s %8s %8s %8s %9s %8s %6s %6s %7s\n", "run", "secs", "agent_cpu",
                "agent_rss", "target_s", "samples", "perf_ref", "coverage", "vs_perf", "chunks",
                "zstd", "probe");
    auto print = [](const char* name, const result& r) {
        std::printf(
            "%-9s %5.1f %8.3f%% %6.1f MiB %8.1f %8ld %8ld %8.1f%% %7.1f%% %6ld %5.1fx %5.2f s\n",
            name, r.seconds, r.agent_cpu_pct, static_cast<double>(r.peak_rss_kb) / 1024.0,
            r.target_cpu_s, r.samples, r.reference_samples, 100.0 * r.coverage, 100.0 * r.vs_perf,
            r.chunks,
            r.wire_bytes ? static_cast<double>(r.text_bytes) / static_cast<double>(r.wire_bytes)
                         : 0.0,
            r.probe_s);
    };
    print("99 Hz", measure(demo.pid(), 99, run_s));
    print("999 Hz", measure(demo.pid(), 999, run_s));
    print("coverage", measure(demo.pid(), 99, coverage_s));
    std::printf("targets: agent_cpu < 1%% at 99 Hz, agent_rss < 8 MiB, coverage >= 97%%, "
                "probe < 5 s\n");
    return 0;
}
