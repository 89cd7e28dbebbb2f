// hostile: what hostile peers cost an honest user, measured against the same user's figures
// without them in the same run.
//
//   collector  an honest agent streams a real capture (a zstd chunk every 200 ms) while the
//              benchmark asks GET /api/sessions/ID/functions every 20 ms: p50/p99/max
//              latency first alone (baseline), then while 3 connections each send 2 zstd
//              bombs (1 GiB of zeros in 32 KiB) and 1 text bomb (64 MiB of one-frame samples
//              in ~100 KiB) and 1 connection floods connect + hello + close. Goals: p99 under
//              attack <= 250 ms, the collector's peak RSS <= 512 MB, no session folder from
//              the flood.
//   agent      perfwire-agent --listen while one client that never pairs sends `status`
//              commands without reading the answers: the agent's peak RSS (goal <= 32 MB).
//
// Usage: hostile [seconds under attack, default 15]
#include "protocol/compression.hpp"
#include "protocol/frame.hpp"
#include "support.hpp"
#include "support/framing_peer.hpp"
#include "support/http_client.hpp"
#include "support/proc_status.hpp"
#include "support/spawn.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <sys/socket.h>
#include <thread>
#include <unistd.h>
#include <vector>

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using clock_type = std::chrono::steady_clock;
using protocol::frame_flag;
using test_support::framing_peer;

namespace {

std::string read_file(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

std::string hello(const std::string& host) {
    return R"({"type":"hello","version":1,"agent":"perfwire","hostname":")" + host + R"("})";
}

std::string compressed(const std::string& text) {
    protocol::zstd_compressor z;
    z.write(text);
    return z.finish();
}

struct latencies {
    std::vector<double> ms;
    int failures = 0;
    double at(double q) {
        if (ms.empty())
            return -1;
        std::sort(ms.begin(), ms.end());
        return ms[std::min(ms.size() - 1, static_cast<std::size_t>(q * ms.size()))];
    }
};

latencies measure(std::uint16_t http, const std::string& target, std::chrono::seconds span) {
    latencies l;
    const auto end = clock_type::now() + span;
    while (clock_type::now() < end) {
        const auto t0 = clock_type::now();
        const auto r = test_support::http_call(http, "GET", target);
        const double ms = std::chrono::duration<double, std::milli>(clock_type::now() - t0).count();
        if (r.status == 200)
            l.ms.push_back(ms);
        else
            ++l.failures;
        std::this_thread::sleep_for(20ms);
    }
    return l;
}

std::size_t session_folders(const fs::path& dir) {
    std::size_t n = 0;
    for (const auto& e : fs::directory_iterator(dir))
        n += e.is_directory() && e.path().filename().string()[0] != '.';
    return n;
}

} // namespace

int main(int argc, char** argv) {
    const int seconds = argc > 1 ? std::max(5, std::atoi(argv[1])) : 15;
    const fs::path work =
        fs::temp_directory_path() / ("perfwire-hostile-" + std::to_string(::getpid()));
    fs::create_directories(work);

    const auto started = bench::start_collector(PERFWIRE_COLLECTOR_BIN, work / "sessions");
    if (!started)
        return 1;
    test_support::spawned& coll = *started->proc;
    const auto agent_port = started->agent_port;
    const auto http = started->http_port;

    // The honest agent: a real capture, again and again.
    const std::string chunk =
        compressed(read_file(std::string(PERFWIRE_SOURCE_DIR) +
                             "/test/collector/fixtures/callchain_fields.txt") +
                   "\n### PERF_STAT ###\n");
    std::atomic<bool> stop{false};
    std::thread honest([&] {
        auto peer = framing_peer::connect(agent_port);
        if (!peer)
            return;
        peer->send(frame_flag::response, hello("honest"));
        while (!stop) {
            peer->send(frame_flag::zstd, chunk);
            std::this_thread::sleep_for(200ms);
        }
    });
    std::string session;
    for (int i = 0; i < 100 && session.empty(); ++i) {
        std::this_thread::sleep_for(100ms);
        const auto r = test_support::http_call(http, "GET", "/api/sessions");
        const auto at = r.body.find(R"("id":")");
        if (r.status == 200 && at != std::string::npos)
            session = r.body.substr(at + 6, r.body.find('"', at + 6) - at - 6);
    }
    if (session.empty()) {
        std::fprintf(stderr, "no honest session: %s\n", coll.stderr_text().c_str());
        stop = true;
        honest.join();
        return 1;
    }
    const std::string target = "/api/sessions/" + session + "/functions";

    auto alone = measure(http, target, 5s);
    const long rss_before_kb = test_support::status_kb(coll.pid(), "VmRSS:");

    // The attack.
    std::string zeros_bomb, text_bomb;
    {
        protocol::zstd_compressor z;
        const std::string zeros(std::size_t{1} << 20, '\0');
        for (int i = 0; i < 1024; ++i)
            z.write(zeros);
        zeros_bomb = z.finish();
        const std::string sample = "x 1/1 1.000000: 1 cpu-clock:\n\tffff f+0x1 (/x)\n\n";
        std::string text;
        while (text.size() + sample.size() < protocol::max_chunk_text)
            text += sample;
        text_bomb = compressed(text);
    }
    std::vector<std::thread> attackers;
    for (int c = 0; c < 3; ++c)
        attackers.emplace_back([&, c] {
            auto peer = framing_peer::connect(agent_port);
            if (!peer)
                return;
            peer->send(frame_flag::response, hello("bomb" + std::to_string(c)));
            peer->send(frame_flag::zstd, zeros_bomb);
            peer->send(frame_flag::zstd, zeros_bomb);
            peer->send(frame_flag::zstd, text_bomb);
            while (!stop)
                std::this_thread::sleep_for(50ms);
        });
    std::atomic<int> hellos{0};
    attackers.emplace_back([&] {
        while (!stop) {
            if (auto peer = framing_peer::connect(agent_port)) {
                peer->send(frame_flag::response, hello("flood"));
                ++hellos;
            }
        }
    });
    auto attacked = measure(http, target, std::chrono::seconds(seconds));
    stop = true;
    for (auto& t : attackers)
        t.join();
    honest.join();
    const long hwm_kb = test_support::status_kb(coll.pid(), "VmHWM:");
    std::this_thread::sleep_for(1s); // the leavers' sessions settle
    const auto folders = session_folders(work / "sessions");

    std::printf("collector: GET %s every 20 ms\n", "/api/sessions/ID/functions");
    std::printf("  alone            p50 %7.1f ms  p99 %7.1f ms  max %7.1f ms  (%zu answers, %d "
                "failed)\n",
                alone.at(0.5), alone.at(0.99), alone.at(1.0), alone.ms.size(), alone.failures);
    std::printf("  under attack     p50 %7.1f ms  p99 %7.1f ms  max %7.1f ms  (%zu answers, %d "
                "failed)   goal p99 <= 250 ms\n",
                attacked.at(0.5), attacked.at(0.99), attacked.at(1.0), attacked.ms.size(),
                attacked.failures);
    std::printf("  p99 ratio        %.2f (under attack / alone)\n",
                attacked.at(0.99) / std::max(alone.at(0.99), 0.001));
    std::printf("  peak RSS         %ld MB (%ld MB before the attack)   goal <= 512 MB\n",
                hwm_kb / 1024, rss_before_kb / 1024);
    std::printf("  hello flood      %d connections sent a hello; session folders now %zu (the "
                "honest one and the 3 bombs')\n",
                hellos.load(), folders);
    coll.signal(SIGTERM);
    coll.wait(10s);

    // The --listen agent under a command flood from a client that never pairs.
    test_support::spawned agent(PERFWIRE_AGENT_BIN,
                                {"--listen", "--bind", "127.0.0.1", "--port", "0", "--token",
                                 "correct-horse-battery-staple"});
    const auto listen_text = agent.wait_for_stderr("listening on 127.0.0.1:", 10s);
    if (!listen_text) {
        std::fprintf(stderr, "the agent did not listen: %s\n", agent.stderr_text().c_str());
        return 1;
    }
    const auto listen_port = static_cast<std::uint16_t>(std::stoi(*listen_text));
    std::string burst;
    for (int i = 0; i < 10000; ++i)
        burst += protocol::encode_frame(frame_flag::command,
                                        R"({"id":")" + std::to_string(i) + R"(","cmd":"status"})");
    std::size_t sent = 0;
    int connections = 0;
    const auto flood_end = clock_type::now() + 10s;
    while (clock_type::now() < flood_end) {
        const int fd = test_support::connect_loopback(listen_port);
        if (fd < 0)
            break;
        ++connections;
        for (;;) { // until the agent closes it (or stops reading)
            const ssize_t n = ::send(fd, burst.data(), burst.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
            if (n <= 0)
                break;
            sent += static_cast<std::size_t>(n);
        }
        ::close(fd);
        std::this_thread::sleep_for(10ms);
    }
    std::printf("agent --listen: %d connections sent %zu MB of status commands without reading "
                "the answers in 10 s\n",
                connections, sent >> 20);
    std::printf("  peak RSS         %ld MB   goal <= 32 MB\n",
                test_support::status_kb(agent.pid(), "VmHWM:") / 1024);
    agent.signal(SIGTERM);
    agent.wait(10s);
    fs::remove_all(work);
    return 0;
}
