// live_latency: how soon what a program does shows in the collector's views, as a user of the
// live view sees it, with the real agents, the real perf and the real collector on loopback.
//
//   first      a start (the capability probe done by an earlier start, so excluded): from the
//              start command's answer until GET /api/sessions/ID counts a sample.
//   switch     perfwire-switcher spins in hot_00, hot_01, … for a fixed time each and says
//              when it switched; GET /api/sessions/ID/functions is asked every 50 ms, and the
//              figure is the time from a switch until the new function is in the answer.
//
// Each agent flavour (the C++ agent, the Python agent) runs with its default settings
// (--duration 8, 99 Hz); p50/p95/max over the switches.
//
// Usage: live_latency [switches per agent, default 20] [ms per function, default 1500]
#include "support.hpp"
#include "support/http_client.hpp"
#include "support/spawn.hpp"

#include <boost/json/parse.hpp>
#include <boost/json/value_to.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <unistd.h>
#include <vector>

namespace fs = std::filesystem;
namespace json = boost::json;
using namespace std::chrono_literals;
using test_support::http_call;
using test_support::spawned;

namespace {

double wall_ms() {
    return std::chrono::duration<double, std::milli>(
               std::chrono::system_clock::now().time_since_epoch())
        .count();
}

std::optional<json::object> command(std::uint16_t http, const std::string& target,
                                    const std::string& body) {
    const auto r = http_call(http, "POST", "/api/targets/" + target + "/command", body, {}, 120s);
    boost::system::error_code ec;
    auto v = json::parse(r.body, ec);
    if (r.status != 200 || ec || !v.is_object()) {
        std::fprintf(stderr, "command %s: %d %s\n", body.c_str(), r.status, r.body.c_str());
        return std::nullopt;
    }
    return v.as_object();
}

// The switches perfwire-switcher announced so far: function index → wall-clock ms.
std::map<int, double> switches(const fs::path& log) {
    std::map<int, double> out;
    std::ifstream in(log);
    int k = 0;
    long long ns = 0;
    while (in >> k >> ns)
        out[k] = static_cast<double>(ns) / 1e6;
    return out;
}

std::set<int> hot_functions(const json::value& functions) {
    std::set<int> out;
    if (!functions.is_object() || !functions.as_object().contains("functions"))
        return out;
    for (const auto& f : functions.at("functions").as_array()) {
        const auto& name = f.at("name").as_string();
        if (name.size() == 6 && name.starts_with("hot_"))
            out.insert(std::atoi(name.c_str() + 4));
    }
    return out;
}

double at(std::vector<double> v, double q) {
    if (v.empty())
        return -1;
    std::sort(v.begin(), v.end());
    return v[std::min(v.size() - 1, static_cast<std::size_t>(q * static_cast<double>(v.size())))];
}

struct flavour {
    const char* name;
    std::string exe;
    std::vector<std::string> args; // before the agent's own
};

int run(const flavour& f, const fs::path& work, int switch_count, int ms_per) {
    const auto coll = bench::start_collector(PERFWIRE_COLLECTOR_BIN, work / "sessions");
    if (!coll)
        return 1;
    const auto http = coll->http_port;
    auto args = f.args;
    args.insert(args.end(), {"--server", "127.0.0.1:" + std::to_string(coll->agent_port)});
    spawned agent(f.exe, args);

    std::string target;
    for (int i = 0; i < 100 && target.empty(); ++i) {
        std::this_thread::sleep_for(100ms);
        if (auto v = bench::get_json(http, "/api/targets");
            v && v->is_array() && !v->as_array().empty())
            if (v->as_array()[0].at("state").as_string() == "idle")
                target = json::value_to<std::string>(v->as_array()[0].at("id"));
    }
    if (target.empty()) {
        std::fprintf(stderr, "%s: no target: %s\n", f.name, agent.stderr_text().c_str());
        return 1;
    }

    // Enough functions for the probe's run, the first-sample run and the switches.
    const fs::path log = work / (std::string(f.name) + ".switches");
    const int functions = std::min(40, switch_count + 8);
    spawned work_load(PERFWIRE_SWITCHER_BIN, {std::to_string(ms_per), std::to_string(functions)},
                      log.string());
    const std::string start =
        R"({"cmd":"start","args":{"pid":)" + std::to_string(work_load.pid()) + "}}";
    const std::string stop = R"({"cmd":"stop"})";

    // The probe, once.
    if (!command(http, target, start) || !command(http, target, stop))
        return 1;
    std::this_thread::sleep_for(500ms);

    const auto started = command(http, target, start);
    const double t_start = wall_ms();
    if (!started)
        return 1;
    std::string session;
    double first = -1;
    while (wall_ms() - t_start < 20000 && first < 0) {
        if (session.empty())
            if (auto v = bench::get_json(http, "/api/targets");
                v && v->is_array() && !v->as_array().empty())
                if (const auto& s = v->as_array()[0].at("session_id"); s.is_string())
                    session = json::value_to<std::string>(s);
        if (!session.empty())
            if (auto m = bench::get_json(http, "/api/sessions/" + session);
                m && m->is_object() && m->as_object().contains("samples") &&
                m->at("samples").to_number<double>() > 0)
                first = wall_ms() - t_start;
        if (first < 0)
            std::this_thread::sleep_for(20ms);
    }
    if (first < 0) {
        std::fprintf(stderr, "%s: no samples 20 s after start\n", f.name);
        return 1;
    }

    // Switches that happen from now on, each to a function the session has not seen.
    const int from = static_cast<int>(switches(log).size());
    std::vector<double> lag;
    std::set<int> seen;
    const double give_up = wall_ms() + (switch_count + 3.0) * ms_per;
    while (static_cast<int>(lag.size()) < switch_count && wall_ms() < give_up) {
        const auto fns = bench::get_json(http, "/api/sessions/" + session + "/functions");
        const double now = wall_ms();
        const auto announced = switches(log);
        if (fns)
            for (const int k : hot_functions(*fns)) {
                const auto at_k = announced.find(k);
                if (k < from || seen.count(k) || at_k == announced.end())
                    continue;
                seen.insert(k);
                lag.push_back(now - at_k->second);
            }
        std::this_thread::sleep_for(50ms);
    }
    (void)command(http, target, stop);
    std::printf("%-12s %9.0f %7zu %9.0f %9.0f %9.0f\n", f.name, first, lag.size(), at(lag, 0.5),
                at(lag, 0.95), lag.empty() ? -1.0 : *std::max_element(lag.begin(), lag.end()));
    std::fflush(stdout);
    return static_cast<int>(lag.size()) == switch_count ? 0 : 1;
}

} // namespace

int main(int argc, char** argv) {
    const int switch_count = argc > 1 ? std::clamp(std::atoi(argv[1]), 1, 30) : 20;
    const int ms_per = argc > 2 ? std::clamp(std::atoi(argv[2]), 200, 10000) : 1500;
    const fs::path work =
        fs::temp_directory_path() / ("perfwire-latency-" + std::to_string(::getpid()));
    std::printf("sample-to-API latency, ms (%d switches, %d ms apart)\n", switch_count, ms_per);
    std::printf("%-12s %9s %7s %9s %9s %9s\n", "agent", "first", "switches", "p50", "p95", "max");
    const flavour flavours[] = {
        {"cpp", PERFWIRE_AGENT_BIN, {}},
        {"python", PERFWIRE_PYTHON, {PERFWIRE_PYTHON_AGENT}},
    };
    int failed = 0;
    for (const auto& f : flavours) {
        fs::create_directories(work / f.name);
        failed += run(f, work / f.name, switch_count, ms_per);
    }
    fs::remove_all(work);
    return failed ? 1 : 0;
}
