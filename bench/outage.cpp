// outage: a device's link down for minutes mid-run, then back, with the real agents, perf and
// collector on loopback (docs/benchmarks.md, "A link outage").
//
//   agent A  whole system at F Hz (default 99), --spool-dir, through a relay that resets the
//            link and turns it away for the outage
//   agent B  another device on the same collector (--pid of the demo), whose function table
//            is asked every 100 ms for the 10 s after A is back: how slow it gets while A
//            catches up
//
// Figures: A's spool on the device per minute of outage, A's largest RSS (the agent itself, not
// perf), the catch-up (from the link back until A's target no longer says `catching_up`), the
// slowest and the median answer of B's function table during the catch-up, and whether A's
// session is one session whose chunks are numbered without a hole.
//
// Usage: outage [outage seconds, default 600] [frequency, default 99]
#include "support.hpp"
#include "support/http_client.hpp"
#include "support/relay.hpp"
#include "support/spawn.hpp"

#include <boost/json/parse.hpp>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <optional>
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

using clock_type = std::chrono::steady_clock;

// The target of the agent named `name`, if connected.
std::optional<json::object> target_named(std::uint16_t http, const std::string& name) {
    const auto targets = bench::get_json(http, "/api/targets");
    if (!targets || !targets->is_array())
        return std::nullopt;
    for (const auto& t : targets->as_array())
        if (t.at("hostname").is_string() && t.at("hostname").as_string() == name)
            return t.as_object();
    return std::nullopt;
}

// Waits up to `limit` for the named agent's target to have a session with samples: its id.
std::string session_of(std::uint16_t http, const std::string& name, std::chrono::seconds limit) {
    const auto until = clock_type::now() + limit;
    while (clock_type::now() < until) {
        if (const auto t = target_named(http, name); t && t->at("session_id").is_string()) {
            const std::string id(t->at("session_id").as_string());
            const auto s = bench::get_json(http, "/api/sessions/" + id);
            if (s && s->at("samples").to_number<std::uint64_t>() > 0)
                return id;
        }
        std::this_thread::sleep_for(200ms);
    }
    return {};
}

std::uint64_t folder_bytes(const fs::path& dir) {
    std::uint64_t n = 0;
    std::error_code ec;
    for (fs::recursive_directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
        if (it->is_regular_file(ec))
            n += it->file_size(ec);
    return n;
}

// VmRSS of a process, in KiB (0 when it is gone).
std::uint64_t rss_kib(int pid) {
    const std::string text = test_support::proc_file(pid, "status");
    const auto at = text.find("VmRSS:");
    return at == std::string::npos ? 0 : std::stoull(text.substr(at + 6));
}

double percentile(std::vector<double> v, double p) {
    if (v.empty())
        return 0;
    std::sort(v.begin(), v.end());
    return v[std::min(v.size() - 1, static_cast<std::size_t>(p * static_cast<double>(v.size())))];
}

} // namespace

int main(int argc, char** argv) {
    const int outage_s = argc > 1 ? std::atoi(argv[1]) : 600;
    const int hz = argc > 2 ? std::atoi(argv[2]) : 99;
    if (outage_s < 10 || hz < 1) {
        std::fprintf(stderr, "usage: outage [outage seconds >= 10] [frequency]\n");
        return 2;
    }
    char tmpl[] = "/tmp/perfwire-outage-XXXXXX";
    if (!::mkdtemp(tmpl))
        return 1;
    const fs::path dir = tmpl;
    auto coll = bench::start_collector(PERFWIRE_COLLECTOR_BIN, dir / "sessions");
    if (!coll)
        return 1;
    test_support::relay link(coll->agent_port);
    spawned demo(PERFWIRE_DEMO_BIN, {std::to_string(outage_s + 600)});
    spawned a(PERFWIRE_AGENT_BIN,
              {"--server", "127.0.0.1:" + std::to_string(link.port()), "--name", "bench-a",
               "--frequency", std::to_string(hz), "--spool-dir", (dir / "spool").string(),
               "--buffer-mb", "0", "--spool-mb", "1024"});
    spawned b(PERFWIRE_AGENT_BIN, {"--server", "127.0.0.1:" + std::to_string(coll->agent_port),
                                   "--name", "bench-b", "--pid", std::to_string(demo.pid())});
    // A profiles the whole system once the collector asks (continuous profiling is off here):
    // started by a command, as a user's run.
    std::optional<json::object> ta;
    for (auto until = clock_type::now() + 60s; !ta && clock_type::now() < until;) {
        ta = target_named(coll->http_port, "bench-a");
        if (!ta || ta->at("state").as_string() != "idle") {
            ta.reset();
            std::this_thread::sleep_for(200ms);
        }
    }
    if (!ta) {
        std::fprintf(stderr, "agent A did not connect\n");
        return 1;
    }
    const std::string target_a(ta->at("id").as_string());
    const auto started = http_call(coll->http_port, "POST", "/api/targets/" + target_a + "/command",
                                   R"({"cmd":"start","args":{"pid":null}})");
    if (started.status != 200) {
        std::fprintf(stderr, "start: %d %s\n", started.status, started.body.c_str());
        return 1;
    }
    const std::string session_a = session_of(coll->http_port, "bench-a", 60s);
    const std::string session_b = session_of(coll->http_port, "bench-b", 60s);
    if (session_a.empty() || session_b.empty()) {
        std::fprintf(stderr, "no sessions\n");
        return 1;
    }
    std::this_thread::sleep_for(10s);

    // The outage: the link reset, new connections turned away.
    std::printf("outage: %d s, agent A whole system at %d Hz, --buffer-mb 0 (its chunks on disk)"
                "\n",
                outage_s, hz);
    link.refuse_for(std::chrono::seconds(outage_s));
    link.reset();
    const auto down = clock_type::now();
    std::uint64_t max_rss = rss_kib(a.pid()), spool = 0;
    while (clock_type::now() - down < std::chrono::seconds(outage_s)) {
        std::this_thread::sleep_for(1s);
        max_rss = std::max(max_rss, rss_kib(a.pid()));
        spool = std::max(spool, folder_bytes(dir / "spool"));
    }
    const double minutes = outage_s / 60.0;
    std::printf("  spool on the device: %.0f KiB at the end, %.0f KiB per minute of outage\n",
                static_cast<double>(spool) / 1024, static_cast<double>(spool) / 1024 / minutes);

    // Back: A dials in again (its backoff), then catches up, while B's function table is asked
    // every 200 ms.
    const auto back = clock_type::now();
    std::vector<double> view_ms;
    std::optional<clock_type::time_point> in; // A's target back
    bool done = false;
    double catch_up_s = 0;
    // (B's view is timed for 10 s from A's return at least, the catch-up within them.)
    const auto watched = [&] { return in && clock_type::now() - *in >= 10s; };
    while (!(done && watched()) &&
           clock_type::now() - back < std::chrono::seconds(outage_s + 300)) {
        const auto asked = clock_type::now();
        (void)http_call(coll->http_port, "GET", "/api/sessions/" + session_b + "/functions");
        if (in)
            view_ms.push_back(
                std::chrono::duration<double, std::milli>(clock_type::now() - asked).count());
        max_rss = std::max(max_rss, rss_kib(a.pid()));
        if (const auto t = target_named(coll->http_port, "bench-a");
            t && t->at("session_id").is_string() && t->at("session_id").as_string() == session_a) {
            if (!in)
                in = clock_type::now();
            if (!done && t->at("catching_up").is_null()) {
                done = true;
                catch_up_s = std::chrono::duration<double>(clock_type::now() - *in).count();
            }
        }
        std::this_thread::sleep_for(100ms);
    }
    const double reconnect_s = in ? std::chrono::duration<double>(*in - back).count() : -1.0;
    std::printf("  back in: %.1f s after the link returned (the agent's backoff)\n", reconnect_s);
    std::printf("  catch-up: %s%.1f s from its return until its target no longer catches up\n",
                done ? "" : "not done in time, ", catch_up_s);
    std::printf("  another agent's live function table in the 10 s from its return: p50 %.0f ms, "
                "slowest %.0f ms (%zu answers)\n",
                percentile(view_ms, 0.5), percentile(view_ms, 1.0), view_ms.size());
    std::printf("  agent A's largest RSS: %.1f MiB\n", static_cast<double>(max_rss) / 1024);

    // One session, its chunks numbered without a hole.
    const auto sessions = bench::get_json(coll->http_port, "/api/sessions");
    std::size_t of_a = 0;
    if (sessions)
        for (const auto& s : sessions->as_array())
            of_a += s.at("hostname").is_string() && s.at("hostname").as_string() == "bench-a";
    std::vector<std::uint64_t> seqs;
    std::error_code ec;
    for (const auto& f : fs::directory_iterator(dir / "sessions" / session_a / "chunks", ec)) {
        const auto name = f.path().filename().string();
        if (const auto s = name.find(".s"); s != std::string::npos)
            seqs.push_back(std::stoull(name.substr(s + 2)));
    }
    std::sort(seqs.begin(), seqs.end());
    std::uint64_t holes = 0;
    for (std::size_t i = 1; i < seqs.size(); ++i)
        holes += seqs[i] - seqs[i - 1] - 1;
    std::printf("  agent A's sessions: %zu; its chunks %zu, numbers missing %llu\n", of_a,
                seqs.size(), static_cast<unsigned long long>(holes));
    a.signal(SIGTERM);
    b.signal(SIGTERM);
    (void)a.wait(15s);
    (void)b.wait(15s);
    demo.signal(SIGTERM);
    coll->proc->signal(SIGTERM);
    (void)coll->proc->wait(30s);
    fs::remove_all(dir, ec);
    return 0;
}
