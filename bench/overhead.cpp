// overhead: an overhead budget the device's owner sets (--max-overhead), held.
//
// The real agent profiles perfwire-demo (busy threads on every core) at 999 Hz with frame-pointer
// call graphs, once with no budget (the baseline: what 999 Hz costs here) and once with
// max_overhead 1 (% of one core). For each it prints, over --seconds after --settle seconds to
// adapt, what profiling cost the device — the agent's own CPU and perf's (its children, those it
// restarted included), as this program measures it from /proc, not as the agent reports it —
// and the rate the agent samples at by then.
//
// The goal (docs/benchmarks.md): with --max-overhead 1, within 1 % ± 0.3 of a core.
//
// Usage: overhead [--settle SECONDS (90)] [--seconds SECONDS (30)] [--budget PCT (1)]
//                 [--duration SECONDS (8, the agent's default: perf stat's period)]
#include "support.hpp"
#include "support/framing_peer.hpp"
#include "support/spawn.hpp"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <stdexcept>
#include <string>

using namespace std::chrono;

namespace {

struct cost {
    double pct = 0;    // agent + perf, % of one core
    double said = 0;   // what the agent read over its last interval (its status)
    int hz_before = 0; // the rate at the start of the measurement, and at its end
    int hz_after = 0;
};

// The agent's rate now (its status; the asked rate when it keeps no budget), and the cost it
// read last.
int rate(test_support::framing_peer& peer, int asked, double* said = nullptr) {
    const auto s = peer.command("status", "{}", milliseconds(10000));
    if (!s || !s->ok)
        return 0;
    if (const auto* o = s->fields.if_contains("overhead")) {
        if (said)
            *said = o->at("cost_pct").to_number<double>();
        return o->at("frequency").to_number<int>();
    }
    return asked;
}

void drain(test_support::framing_peer& peer, milliseconds d) {
    const auto until = steady_clock::now() + d;
    while (steady_clock::now() < until)
        peer.next(duration_cast<milliseconds>(until - steady_clock::now()));
}

int chunk_seconds = 8;

cost measure(int demo, double budget, int settle, int seconds) {
    cost c;
    auto dialled =
        bench::dial_agent(PERFWIRE_AGENT_BIN, {"--duration", std::to_string(chunk_seconds)});
    auto& agent = *dialled.proc;
    auto& peer = *dialled.peer;
    char args[160];
    std::snprintf(args, sizeof args,
                  R"({"pid":%d,"frequency":999,"callgraph":"fp","max_overhead":%g})", demo, budget);
    const auto start = peer.command("start", args, milliseconds(60000));
    if (!start || !start->ok)
        throw std::runtime_error("start failed: " + (start ? start->error : "no answer"));
    drain(peer, milliseconds(settle * 1000));
    c.hz_before = rate(peer, 999);
    const auto used = [&] {
        return bench::cpu_seconds(agent.pid()) + bench::children_cpu_seconds(agent.pid(), "perf");
    };
    const double u0 = used();
    const auto t0 = steady_clock::now();
    drain(peer, milliseconds(seconds * 1000));
    c.pct = 100 * (used() - u0) / duration<double>(steady_clock::now() - t0).count();
    c.hz_after = rate(peer, 999, &c.said);
    peer.command("stop", R"({"drain":false})", milliseconds(30000));
    // The governor's changes, as the agent logged them.
    std::istringstream log(agent.stderr_text());
    for (std::string line; std::getline(log, line);)
        if (line.find("max-overhead") != std::string::npos)
            std::printf("    %s\n", line.c_str());
    return c;
}

} // namespace

int main(int argc, char** argv) {
    int settle = 90, seconds = 30;
    double budget = 1;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!std::strcmp(argv[i], "--settle"))
            settle = std::atoi(argv[i + 1]);
        else if (!std::strcmp(argv[i], "--seconds"))
            seconds = std::atoi(argv[i + 1]);
        else if (!std::strcmp(argv[i], "--budget"))
            budget = std::atof(argv[i + 1]);
        else if (!std::strcmp(argv[i], "--duration"))
            chunk_seconds = std::atoi(argv[i + 1]);
    }
    test_support::spawned demo(PERFWIRE_DEMO_BIN, {});
    std::printf("%-22s %10s %10s %10s %10s\n", "run (999 Hz asked)", "cost", "Hz before",
                "Hz after", "agent said");
    const auto base = measure(demo.pid(), 0, 10, seconds);
    std::printf("%-22s %9.2f%% %10d %10d\n", "no budget", base.pct, base.hz_before, base.hz_after);
    const auto held = measure(demo.pid(), budget, settle, seconds);
    char name[40];
    std::snprintf(name, sizeof name, "--max-overhead %g", budget);
    std::printf("%-22s %9.2f%% %10d %10d %9.2f%%\n", name, held.pct, held.hz_before, held.hz_after,
                held.said);
    std::printf("goal: within %g %% +- 0.3 of a core: %s (%.2f %%; %.1fx below no budget)\n",
                budget, held.pct >= budget - 0.3 && held.pct <= budget + 0.3 ? "met" : "NOT met",
                held.pct, held.pct > 0 ? base.pct / held.pct : 0.0);
    return 0;
}
