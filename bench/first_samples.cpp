// first_samples: how soon an agent started with --pid puts samples at the collector, with the
// real agents, the real perf and the real collector on loopback: from the agent's spawn until
// GET /api/sessions counts a sample (asked every 20 ms).
//
//   cold   the first start on this device: the agent probes perf first (--state-dir empty)
//   warm   later starts: the probe an earlier start kept in --state-dir is taken
//
// Each start profiles perfwire-demo at the agent's defaults (99 Hz, --duration 8); p50 and max
// over the starts. The goal: warm p50 <= 1 s on the 2-core machine.
//
// Usage: first_samples [starts per row, default 7]
#include "support.hpp"
#include "support/spawn.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>
#include <unistd.h>
#include <vector>

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using test_support::spawned;

namespace {

using clock_type = std::chrono::steady_clock;

double at(std::vector<double> v, double q) {
    if (v.empty())
        return -1;
    std::sort(v.begin(), v.end());
    return v[std::min(v.size() - 1, static_cast<std::size_t>(q * static_cast<double>(v.size())))];
}

// Samples the collector counts in all its sessions; -1 when it does not answer.
double samples(std::uint16_t http) {
    const auto v = bench::get_json(http, "/api/sessions");
    if (!v || !v->is_array())
        return -1;
    double n = 0;
    for (const auto& s : v->as_array())
        if (const auto* c = s.as_object().if_contains("samples"); c && c->is_number())
            n += c->to_number<double>();
    return n;
}

// One start: seconds from the agent's spawn to the collector's first sample; -1 after 30 s.
double one_start(const std::string& exe, std::vector<std::string> args, int demo,
                 const fs::path& work) {
    const auto coll = bench::start_collector(PERFWIRE_COLLECTOR_BIN, work / "sessions");
    if (!coll)
        return -1;
    args.insert(args.end(), {"--server", "127.0.0.1:" + std::to_string(coll->agent_port), "--pid",
                             std::to_string(demo)});
    const auto t0 = clock_type::now();
    spawned agent(exe, args);
    double first = -1;
    while (first < 0 && clock_type::now() - t0 < 30s) {
        if (samples(coll->http_port) > 0)
            first = std::chrono::duration<double>(clock_type::now() - t0).count();
        else
            std::this_thread::sleep_for(20ms);
    }
    if (first < 0)
        std::fprintf(stderr, "no samples 30 s after the start: %s\n", agent.stderr_text().c_str());
    return first;
}

struct row {
    const char* name;
    std::string exe;
    std::vector<std::string> args;
    bool warm; // keeps the probe in the state dir: a first start (not counted) probes
};

} // namespace

int main(int argc, char** argv) {
    const int starts = argc > 1 ? std::clamp(std::atoi(argv[1]), 1, 50) : 7;
    const fs::path work =
        fs::temp_directory_path() / ("perfwire-first-" + std::to_string(::getpid()));
    fs::create_directories(work);
    spawned demo(PERFWIRE_DEMO_BIN, {"600"});
    std::this_thread::sleep_for(500ms);
    const std::string state = (work / "state").string();
    const row rows[] = {
        {"cpp cold", PERFWIRE_AGENT_BIN, {"--state-dir", ""}, false},
        {"cpp warm", PERFWIRE_AGENT_BIN, {"--state-dir", state}, true},
        {"py cold", PERFWIRE_PYTHON, {PERFWIRE_PYTHON_AGENT, "--state-dir", ""}, false},
        {"py warm", PERFWIRE_PYTHON, {PERFWIRE_PYTHON_AGENT, "--state-dir", state}, true},
    };
    std::printf("an agent started with --pid: seconds to the first sample at the collector "
                "(%d starts a row)\n",
                starts);
    std::printf("%-10s %7s %7s %7s\n", "agent", "p50", "max", "starts");
    int failed = 0;
    for (const auto& r : rows) {
        std::vector<double> took;
        if (r.warm) // the start that keeps the probe, not counted
            (void)one_start(r.exe, r.args, demo.pid(), work / "prime");
        for (int i = 0; i < starts; ++i) {
            fs::remove_all(work / "sessions");
            const double s = one_start(r.exe, r.args, demo.pid(), work);
            if (s < 0)
                ++failed;
            else
                took.push_back(s);
        }
        std::printf("%-10s %7.2f %7.2f %7zu\n", r.name, at(took, 0.5),
                    took.empty() ? -1.0 : *std::max_element(took.begin(), took.end()), took.size());
        std::fflush(stdout);
    }
    fs::remove_all(work);
    return failed ? 1 : 0;
}
