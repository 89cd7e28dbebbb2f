// tls_cost: what TLS on the agent link costs, against plain TCP measured in the same run.
//
//   1. The agent: the real perfwire-agent profiling perfwire-demo at 99 Hz for S seconds,
//      streaming to the real collector (--tls, which takes plain agents too on loopback), once
//      with --tls-pin and once plain: the agent's own CPU (utime+stime of its process, not its
//      perf children) over the window, and its peak RSS (VmHWM).
//   2. The handshake: TCP connect + TLS handshake + pin check against the collector's agent
//      port, against TCP connect alone (18 of each: the collector admits 20 connections from
//      one address at once).
//   3. The collector: 50 agents at once, each sending what a 99 Hz agent sends (a hello, then a
//      zstd chunk of ~20 KB of perf script text every third of a second), over TLS and plain:
//      the collector's CPU over a 20 s window, and per agent.
//
// Usage: tls_cost [agent seconds, default 30] [agents, default 50]
#include "protocol/compression.hpp"
#include "protocol/frame.hpp"
#include "protocol/link_stream.hpp"
#include "support.hpp"
#include "support/http_client.hpp"
#include "support/proc_status.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>
#include <boost/json/parse.hpp>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <thread>
#include <unistd.h>

namespace asio = boost::asio;
namespace fs = std::filesystem;
using namespace std::chrono;
using clock_type = steady_clock;
constexpr auto use_nothrow = asio::as_tuple(asio::use_awaitable);

namespace {

void rethrow(std::exception_ptr e) {
    if (e)
        std::rethrow_exception(e);
}

std::string read_file(const std::string& p) {
    std::ifstream in(p, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// The collector's printed key.
std::string pin_of(test_support::spawned& coll) {
    const auto text = coll.wait_for_stderr("TLS with the key ", 10s);
    return text ? text->substr(0, 71) : std::string();
}

// Whether a target is profiling (the agent's probe is over).
bool profiling(std::uint16_t http) {
    const auto r = test_support::http_call(http, "GET", "/api/targets");
    if (r.status != 200)
        return false;
    const auto v = boost::json::parse(r.body);
    for (const auto& t : v.as_array())
        if (t.at("state").as_string() == "profiling")
            return true;
    return false;
}

struct agent_result {
    double cpu_pct = 0;
    long rss_kb = 0;
    bool ok = false;
};

agent_result run_agent(const bench::collector& c, const std::string& pin, int seconds, int demo) {
    std::vector<std::string> args{"--server", "127.0.0.1:" + std::to_string(c.agent_port), "--pid",
                                  std::to_string(demo)};
    if (!pin.empty()) {
        args.push_back("--tls-pin");
        args.push_back(pin);
    }
    test_support::spawned agent(PERFWIRE_AGENT_BIN, args);
    agent_result r;
    for (int i = 0; i < 300 && !profiling(c.http_port); ++i)
        std::this_thread::sleep_for(100ms);
    if (!profiling(c.http_port)) {
        std::fprintf(stderr, "tls_cost: the agent did not start profiling:\n%s\n",
                     agent.stderr_text().c_str());
        return r;
    }
    const double cpu0 = bench::cpu_seconds(agent.pid());
    const auto t0 = clock_type::now();
    std::this_thread::sleep_for(seconds * 1s);
    const double wall = duration<double>(clock_type::now() - t0).count();
    r.cpu_pct = 100 * (bench::cpu_seconds(agent.pid()) - cpu0) / wall;
    r.rss_kb = test_support::status_kb(agent.pid(), "VmHWM:");
    r.ok = true;
    return r;
}

struct handshake_result {
    double p50 = -1, p95 = -1;
    int failures = 0;
};

// `n` connections one after the other; with a pin, each does the TLS handshake and checks it.
handshake_result handshakes(std::uint16_t port, const std::string& pin, int n) {
    asio::io_context io;
    std::vector<double> ms;
    handshake_result r;
    auto run = [&]() -> asio::awaitable<void> {
        auto ex = co_await asio::this_coro::executor;
        const asio::ip::tcp::endpoint ep(asio::ip::make_address("127.0.0.1"), port);
        std::shared_ptr<asio::ssl::context> ctx;
        const protocol::peer_check check{pin, std::nullopt, "127.0.0.1"};
        if (!pin.empty())
            ctx = std::get<0>(protocol::client_context(check));
        for (int i = 0; i < n; ++i) {
            const auto t0 = clock_type::now();
            asio::ip::tcp::socket s(ex);
            auto [ec] = co_await s.async_connect(ep, use_nothrow);
            protocol::link_stream stream(std::move(s));
            std::string why = ec ? ec.message() : std::string();
            if (!ec && ctx) {
                const auto limit = seconds(10);
                why = co_await stream.connect_tls(ctx, check, limit);
            }
            if (why.empty())
                ms.push_back(duration<double, std::milli>(clock_type::now() - t0).count());
            else
                ++r.failures;
            stream.close();
        }
    };
    asio::co_spawn(io, run(), rethrow);
    io.run();
    std::sort(ms.begin(), ms.end());
    if (!ms.empty()) {
        r.p50 = ms[ms.size() / 2];
        r.p95 = ms[std::min(ms.size() - 1, ms.size() * 95 / 100)];
    }
    return r;
}

// `agents` synthetic agents on one thread, each a 99 Hz agent's traffic, until `stop`.
struct fleet {
    std::atomic<int> connected{0}, failed{0};
    std::atomic<bool> stop{false};
};

asio::awaitable<void> one_agent(asio::ip::tcp::endpoint ep, std::shared_ptr<asio::ssl::context> ctx,
                                protocol::peer_check check, const std::string& chunk, int index,
                                fleet& f) {
    auto ex = co_await asio::this_coro::executor;
    // The collector admits 20 connections from one address at once, then 2 a second.
    asio::steady_timer admitted(ex, milliseconds(index < 20 ? 0 : 600 * (index - 19)));
    co_await admitted.async_wait(use_nothrow);
    asio::ip::tcp::socket s(ex);
    auto [ec] = co_await s.async_connect(ep, use_nothrow);
    protocol::link_stream stream(std::move(s));
    std::string why = ec ? ec.message() : std::string();
    if (!ec && ctx) {
        const auto limit = seconds(30);
        why = co_await stream.connect_tls(ctx, check, limit);
    }
    if (!why.empty()) {
        ++f.failed;
        co_return;
    }
    const std::string hello = protocol::encode_frame(
        protocol::frame_flag::response,
        R"({"type":"hello","version":1,"agent":"perfwire","hostname":"bench)" +
            std::to_string(index) + R"("})");
    auto [wec, n] = co_await asio::async_write(stream, asio::buffer(hello), use_nothrow);
    if (wec) {
        ++f.failed;
        co_return;
    }
    ++f.connected;
    const std::string frame = protocol::encode_frame(protocol::frame_flag::zstd, chunk);
    asio::steady_timer t(ex);
    // Spread over the period, as independent agents are.
    t.expires_after(milliseconds(333 * index / 50));
    co_await t.async_wait(use_nothrow);
    while (!f.stop) {
        auto [e2, n2] = co_await asio::async_write(stream, asio::buffer(frame), use_nothrow);
        if (e2)
            break;
        t.expires_after(333ms);
        co_await t.async_wait(use_nothrow);
    }
    stream.close();
}

struct fleet_result {
    double cpu_pct = 0;
    int connected = 0;
};

fleet_result run_fleet(const bench::collector& c, const std::string& pin, int agents,
                       const std::string& chunk) {
    asio::io_context io;
    fleet f;
    const asio::ip::tcp::endpoint ep(asio::ip::make_address("127.0.0.1"), c.agent_port);
    const protocol::peer_check check{pin.empty() ? std::nullopt : std::optional(pin), std::nullopt,
                                     "127.0.0.1"};
    std::shared_ptr<asio::ssl::context> ctx;
    if (!pin.empty())
        ctx = std::get<0>(protocol::client_context(check));
    std::thread runner([&] {
        // The collector admits 20 connections from one address, then 2 a second.
        for (int i = 0; i < agents; ++i)
            asio::co_spawn(io, one_agent(ep, ctx, check, chunk, i, f), rethrow);
        auto work = asio::make_work_guard(io);
        while (!f.stop)
            io.run_for(100ms);
        work.reset();
        io.run_for(2s);
    });
    fleet_result r;
    for (int i = 0; i < 600 && f.connected + f.failed < agents; ++i)
        std::this_thread::sleep_for(100ms);
    std::this_thread::sleep_for(3s); // sessions open, parsing settles
    const int pid = c.proc->pid();
    const double cpu0 = bench::cpu_seconds(pid);
    const auto t0 = clock_type::now();
    std::this_thread::sleep_for(20s);
    r.cpu_pct =
        100 * (bench::cpu_seconds(pid) - cpu0) / duration<double>(clock_type::now() - t0).count();
    r.connected = f.connected;
    f.stop = true;
    runner.join();
    return r;
}

} // namespace

int main(int argc, char** argv) {
    const int seconds_per_run = argc > 1 ? std::max(5, std::atoi(argv[1])) : 30;
    const int agents = argc > 2 ? std::max(1, std::atoi(argv[2])) : 50;
    const fs::path work =
        fs::temp_directory_path() / ("perfwire-tls-cost-" + std::to_string(::getpid()));
    fs::create_directories(work);
    const std::string demo_bin = PERFWIRE_DEMO_BIN;

    std::printf("%-34s %12s %12s %12s\n", "", "plain", "TLS", "TLS / plain");
    {
        test_support::spawned demo(demo_bin, {std::to_string(seconds_per_run * 3 + 60)});
        auto coll = bench::start_collector(PERFWIRE_COLLECTOR_BIN, work / "a", {"--tls"});
        if (!coll)
            return 1;
        const auto pin = pin_of(*coll->proc);
        const auto plain = run_agent(*coll, "", seconds_per_run, demo.pid());
        const auto tls = run_agent(*coll, pin, seconds_per_run, demo.pid());
        if (!plain.ok || !tls.ok)
            return 1;
        std::printf("%-34s %11.3f%% %11.3f%% %12.2f\n", "agent CPU at 99 Hz", plain.cpu_pct,
                    tls.cpu_pct, tls.cpu_pct / plain.cpu_pct);
        std::printf("%-34s %8.1f MiB %8.1f MiB %12.2f\n", "agent peak RSS", plain.rss_kb / 1024.0,
                    tls.rss_kb / 1024.0,
                    static_cast<double>(tls.rss_kb) / static_cast<double>(plain.rss_kb));
    }
    {
        auto a = bench::start_collector(PERFWIRE_COLLECTOR_BIN, work / "b", {"--tls"});
        auto b = bench::start_collector(PERFWIRE_COLLECTOR_BIN, work / "c", {"--tls"});
        if (!a || !b)
            return 1;
        const auto plain = handshakes(a->agent_port, "", 18);
        const auto tls = handshakes(b->agent_port, pin_of(*b->proc), 18);
        std::printf("%-34s %9.2f ms %9.2f ms %12.1f   (p95 %.2f / %.2f ms, %d failed)\n",
                    "connect (+ handshake), p50", plain.p50, tls.p50, tls.p50 / plain.p50,
                    plain.p95, tls.p95, plain.failures + tls.failures);
    }
    {
        // ~20 KB of real perf script text at a sample boundary, with a stat marker: about what
        // a 99 Hz agent flushes every third of a second for a busy thread.
        std::string text = read_file(std::string(PERFWIRE_SOURCE_DIR) +
                                     "/test/collector/fixtures/callchain_fields.txt");
        const auto cut = text.find("\n\n", 20000);
        text = text.substr(0, cut == std::string::npos ? text.size() : cut + 2) +
               "\n### PERF_STAT ###\n";
        const std::string chunk = protocol::compress(text);
        fleet_result plain, tls;
        {
            auto coll = bench::start_collector(PERFWIRE_COLLECTOR_BIN, work / "d", {"--tls"});
            if (!coll)
                return 1;
            plain = run_fleet(*coll, "", agents, chunk);
        }
        {
            auto coll = bench::start_collector(PERFWIRE_COLLECTOR_BIN, work / "e", {"--tls"});
            if (!coll)
                return 1;
            tls = run_fleet(*coll, pin_of(*coll->proc), agents, chunk);
        }
        char label[64];
        std::snprintf(label, sizeof label, "collector CPU, %d agents", agents);
        std::printf("%-34s %11.1f%% %11.1f%% %12.2f   (%d / %d connected)\n", label, plain.cpu_pct,
                    tls.cpu_pct, tls.cpu_pct / plain.cpu_pct, plain.connected, tls.connected);
        std::printf("%-34s %11.2f%% %11.2f%%   (chunk %zu B zstd, %zu B text, 3/s each)\n",
                    "collector CPU per agent", plain.cpu_pct / agents, tls.cpu_pct / agents,
                    chunk.size(), text.size());
    }
    std::error_code ec;
    fs::remove_all(work, ec);
    return 0;
}
