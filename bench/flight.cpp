// flight: what a flight recorder costs the device, against streaming the same profile.
//
// The real agent profiles the whole system at 99 Hz (software cpu-clock, frame-pointer call
// graphs) while perfwire-demo keeps the cores busy, once streaming everything to a loopback
// peer and once as a flight recorder holding its last --window seconds on the device. For each
// it prints, over --seconds once the window is full: the agent's own CPU (% of a core), perf's
// (perf record and perf script, the agent's children), the agent's memory (VmRSS now, VmHWM its
// peak) and, for the flight recorder, the seconds and bytes its window holds.
//
// The goal (docs/benchmarks.md): at most 16 MiB of agent memory for a 60 s window of the demo,
// CPU as streaming (the flight recorder compresses and keeps what streaming compresses and
// sends).
//
// Usage: flight [--window SECONDS (60)] [--seconds SECONDS (30)]
#include "support.hpp"
#include "support/framing_peer.hpp"
#include "support/proc_status.hpp"
#include "support/spawn.hpp"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <thread>

using namespace std::chrono;

namespace {

milliseconds seconds_to_ms(int s) {
    return milliseconds(static_cast<long long>(s) * 1000);
}

struct cost {
    double agent_pct = 0, perf_pct = 0, rss_mib = 0, hwm_mib = 0, held_s = 0, held_mib = 0;
    long chunks_sent = 0;
};

// Reads what the agent sends for `d` (chunks counted, the rest dropped).
void drain(test_support::framing_peer& peer, milliseconds d, cost& c) {
    const auto until = steady_clock::now() + d;
    while (steady_clock::now() < until)
        if (const auto f = peer.next(duration_cast<milliseconds>(until - steady_clock::now()));
            f && (f->flag == protocol::frame_flag::zstd || f->flag == protocol::frame_flag::text))
            ++c.chunks_sent;
}

cost measure(int window, int seconds) {
    cost c;
    auto dialled = bench::dial_agent(PERFWIRE_AGENT_BIN, {"--duration", "2"});
    auto& agent = *dialled.proc;
    auto& peer = *dialled.peer;
    std::string args = R"({"pid":null,"frequency":99,"callgraph":"fp")";
    if (window)
        args += R"(,"flight_recorder":)" + std::to_string(window);
    args += "}";
    const auto start = peer.command("start", args, milliseconds(60000));
    if (!start || !start->ok)
        throw std::runtime_error("start failed: " + (start ? start->error : "no answer"));
    // The window fills (streaming: the same warm-up, so both are measured alike).
    drain(peer, seconds_to_ms(window ? window + 5 : 10), c);
    c.chunks_sent = 0;
    const double agent0 = bench::cpu_seconds(agent.pid()),
                 perf0 = bench::children_cpu_seconds(agent.pid(), "perf");
    const auto t0 = steady_clock::now();
    drain(peer, seconds_to_ms(seconds), c);
    const double elapsed = duration<double>(steady_clock::now() - t0).count();
    c.agent_pct = 100 * (bench::cpu_seconds(agent.pid()) - agent0) / elapsed;
    c.perf_pct = 100 * (bench::children_cpu_seconds(agent.pid(), "perf") - perf0) / elapsed;
    c.rss_mib = static_cast<double>(test_support::status_kb(agent.pid(), "VmRSS:")) / 1024;
    c.hwm_mib = static_cast<double>(test_support::status_kb(agent.pid(), "VmHWM:")) / 1024;
    if (const auto status = peer.command("status", "{}", milliseconds(10000)); status && status->ok)
        if (const auto* f = status->fields.if_contains("flight")) {
            c.held_s = f->at("held_s").to_number<double>();
            c.held_mib = f->at("held_bytes").to_number<double>() / 1048576;
        }
    peer.command("stop", R"({"drain":false})", milliseconds(30000));
    return c;
}

} // namespace

int main(int argc, char** argv) {
    int window = 60, seconds = 30;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!std::strcmp(argv[i], "--window"))
            window = std::atoi(argv[i + 1]);
        else if (!std::strcmp(argv[i], "--seconds"))
            seconds = std::atoi(argv[i + 1]);
    }
    test_support::spawned demo(PERFWIRE_DEMO_BIN, {});
    std::printf("%-16s %9s %9s %9s %9s %8s %9s %6s\n", "mode (99 Hz, all)", "agent_cpu", "perf_cpu",
                "agent_rss", "peak_rss", "held_s", "held", "sent");
    const auto print = [](const char* name, const cost& c) {
        std::printf("%-16s %8.2f%% %8.2f%% %5.1f MiB %5.1f MiB %8.1f %5.2f MiB %6ld\n", name,
                    c.agent_pct, c.perf_pct, c.rss_mib, c.hwm_mib, c.held_s, c.held_mib,
                    c.chunks_sent);
    };
    const auto streaming = measure(0, seconds);
    print("streaming", streaming);
    const auto flight = measure(window, seconds);
    print(("flight " + std::to_string(window) + " s").c_str(), flight);
    std::printf("flight/streaming CPU (agent+perf): %.2f; goal: agent peak RSS <= 16 MiB for a "
                "60 s window, CPU as streaming\n",
                (flight.agent_pct + flight.perf_pct) /
                    std::max(0.01, streaming.agent_pct + streaming.perf_pct));
    return 0;
}
