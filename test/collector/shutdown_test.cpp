// The collector stopped by SIGINT or SIGTERM at a random moment of a busy life, many times: both
// agent flavours dialled and profiling the demo under real perf, an agent that dialled in with
// frames only debuginfod could name (from a server that never answers), browsers reading the
// event stream, an import arriving (text, or a perf.data that perf script converts), the
// symbol settings changed (every live session named again) and views being computed. Every
// stop must end cleanly (status 0, nothing from a sanitizer: the test command runs this under
// AddressSanitizer and ThreadSanitizer builds) and leave a consistent store: every session
// completed, no staged import. PERFWIRE_SHUTDOWN_CYCLES sets how many stops (default 8).
#include "support/agents.hpp"
#include "support/collector_proc.hpp"
#include "support/fixtures.hpp"
#include "support/framing_peer.hpp"
#include "support/http_client.hpp"
#include "support/spawn.hpp"

#include <catch2/catch.hpp>

#include <boost/json/parse.hpp>

#include <atomic>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <thread>
#include <vector>

#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

using namespace std::chrono_literals;
namespace fs = std::filesystem;
namespace json = boost::json;
using test_support::collector_proc;
using test_support::http_call;
using test_support::spawned;
using test_support::temp_dir;

namespace {

constexpr const char* pairing_code = "00112233445566778899aabbccddeeff";

int cycles() {
    const char* v = std::getenv("PERFWIRE_SHUTDOWN_CYCLES");
    return v && std::atoi(v) > 0 ? std::atoi(v) : 8;
}

// A socket to the collector's HTTP port with reads bounded by `timeout`, or -1.
int http_socket(std::uint16_t port, std::chrono::seconds timeout) {
    const int fd = test_support::connect_loopback(port);
    if (fd < 0)
        return -1;
    timeval tv{static_cast<time_t>(timeout.count()), 0};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    return fd;
}

bool send_all(int fd, std::string_view bytes) {
    while (!bytes.empty()) {
        const ssize_t n = ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
        if (n <= 0)
            return false;
        bytes.remove_prefix(static_cast<std::size_t>(n));
    }
    return true;
}

// Reads until the collector closes the connection (or the read times out); the bytes read.
std::size_t read_to_end(int fd) {
    std::size_t total = 0;
    char buf[4096];
    for (;;) {
        const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
        if (n <= 0)
            return total;
        total += static_cast<std::size_t>(n);
    }
}

std::string request_head(std::uint16_t port, const std::string& method, const std::string& target,
                         std::optional<std::size_t> length = std::nullopt) {
    std::string head = method + " " + target +
                       " HTTP/1.1\r\nHost: 127.0.0.1:" + std::to_string(port) +
                       "\r\nAuthorization: Bearer " + test_support::api_token(port) + "\r\n";
    if (length)
        head += "Content-Length: " + std::to_string(*length) + "\r\n";
    return head + "\r\n";
}

// A browser on the event stream, reading until the collector ends it.
void browser(std::uint16_t port, std::atomic<std::size_t>& events_bytes) {
    const int fd = http_socket(port, 60s);
    if (fd < 0)
        return;
    if (send_all(fd, request_head(port, "GET", "/api/stream")))
        events_bytes += read_to_end(fd);
    ::close(fd);
}

// An import whose body arrives slowly: it is still arriving (text), or being converted by perf
// script (a perf.data sent whole), when the collector stops.
void importer(std::uint16_t port, const std::string& body, bool slowly, std::atomic<bool>& stop) {
    const int fd = http_socket(port, 60s);
    if (fd < 0)
        return;
    std::size_t declared = body.size() * (slowly ? 64 : 1);
    bool ok = send_all(fd, request_head(port, "POST", "/api/sessions/import", declared));
    for (std::size_t sent = 0; ok && sent < declared && !stop; sent += body.size()) {
        ok = send_all(fd, body);
        if (slowly)
            std::this_thread::sleep_for(20ms);
    }
    read_to_end(fd);
    ::close(fd);
}

// A stand-in agent that dialled in: frames of a module no local file has, whose build-id only
// debuginfod could answer, every 100 ms until the collector hangs up.
void unnamed_agent(std::uint16_t agent_port, std::atomic<bool>& stop) {
    auto peer = test_support::framing_peer::connect(agent_port);
    if (!peer)
        return;
    peer->send(protocol::frame_flag::response,
               R"({"type":"hello","version":1,"agent":"perfwire","hostname":"gone"})");
    peer->send(protocol::frame_flag::metrics,
               R"({"type":"binaries","ts":1,"pid":4242,"binaries":[{"path":"/opt/gone/libgone.so",)"
               R"("build_id":"0123456789abcdef0123456789abcdef01234567"}]})");
    for (int i = 0; !stop && !peer->closed(); ++i) {
        std::ostringstream chunk;
        for (int s = 0; s < 20; ++s)
            chunk << "gone 4242/4242 " << 1000 + i << "." << 100000 + s * 1000
                  << ": 1010101 cpu-clock:\n"
                  << "\t    7f00000" << 1000 + s << " [unknown] (/opt/gone/libgone.so)\n"
                  << "\t    7f0000020000 [unknown] (/opt/gone/libgone.so)\n\n";
        peer->send(protocol::frame_flag::text, chunk.str());
        std::this_thread::sleep_for(100ms);
    }
}

// A debuginfod server that accepts and never answers: a lookup stays pending until the
// collector stops and cuts it short.
struct silent_debuginfod {
    test_support::listener server;
    std::atomic<bool> stop{false};
    std::atomic<int> asked{0};
    std::vector<int> held;
    std::thread thread{[this] {
        while (!stop) {
            const int fd = server.accept(200ms);
            if (fd >= 0) {
                ++asked;
                held.push_back(fd);
            }
        }
    }};
    ~silent_debuginfod() {
        stop = true;
        thread.join();
        for (int fd : held)
            ::close(fd);
    }
};

// The Live Debug wizard's steps for one listening agent, then views of its session until the
// collector is gone.
void wizard(std::uint16_t port, const std::string& agent_port, int pid, std::atomic<bool>& stop,
            std::atomic<int>& started) {
    const auto dialled = http_call(port, "POST", "/api/targets/connect",
                                   R"({"host":"127.0.0.1","port":)" + agent_port + R"(,"token":")" +
                                       pairing_code + R"("})");
    if (dialled.status != 200)
        return;
    const std::string id(json::parse(dialled.body).at("id").as_string());
    const auto start =
        http_call(port, "POST", "/api/targets/" + id + "/command",
                  R"({"cmd":"start","args":{"pid":)" + std::to_string(pid) + R"(,"duration":1}})");
    if (start.status != 200)
        return;
    ++started;
    while (!stop) {
        const auto t = http_call(port, "GET", "/api/targets");
        if (t.status != 200)
            return;
        const json::value targets = json::parse(t.body);
        for (const auto& target : targets.as_array())
            if (target.at("id").as_string() == id && target.at("session_id").is_string())
                if (http_call(port, "GET",
                              "/api/sessions/" + std::string(target.at("session_id").as_string()) +
                                  "/flamegraph")
                        .status == 0)
                    return;
        std::this_thread::sleep_for(100ms);
    }
}

// The symbol settings changed again and again: every live session is named anew each time.
void renamer(std::uint16_t port, const fs::path& dir, std::atomic<bool>& stop) {
    for (int i = 0; !stop; ++i) {
        const auto folder = dir / ("debug" + std::to_string(i % 2));
        if (http_call(port, "PUT", "/api/config",
                      R"({"debug_dirs":[")" + folder.string() + R"("]})")
                .status == 0)
            return;
        std::this_thread::sleep_for(150ms);
    }
}

} // namespace

TEST_CASE("the collector stops cleanly at any moment: agents, browsers, imports, renames and "
          "debuginfod in flight",
          "[collector][integration][perf][shutdown][longest]") {
    temp_dir dir;
    fs::create_directories(dir.path / "debug0");
    fs::create_directories(dir.path / "debug1");
    auto demo = test_support::start_demo(3600);

    // One agent of each flavour listens for the whole test; each collector dials them.
    std::vector<std::unique_ptr<spawned>> agents;
    std::vector<std::string> agent_ports;
    for (const auto flavour :
         {test_support::agent_flavour::cpp, test_support::agent_flavour::python}) {
        agents.push_back(
            test_support::start_agent(flavour, {"--listen", "--bind", "127.0.0.1", "--port", "0",
                                                "--token", pairing_code, "--duration", "1"}));
        const auto port = agents.back()->wait_for_stderr("listening on 127.0.0.1:", 10s);
        REQUIRE(port);
        agent_ports.push_back(*port);
    }

    // What is imported: the demo recorded by perf (converted by perf script on arrival), and
    // the same as text.
    const auto data = dir.path / "demo.perf.data";
    spawned record("/usr/bin/perf",
                   {"record", "-q", "-e", "cpu-clock", "-F", "499", "-g", "-p",
                    std::to_string(demo->pid()), "-o", data.string(), "--", "sleep", "1"});
    REQUIRE(record.wait(30s) == 0);
    const std::string perf_data = test_support::file_bytes(data);
    const std::string text = test_support::fixture("collector/fixtures/callchain_fields.txt");
    REQUIRE(perf_data.size() > 1000);

    silent_debuginfod debuginfod;
    const std::vector<std::string> env{
        "DEBUGINFOD_URLS=http://127.0.0.1:" + std::to_string(debuginfod.server.port()),
        "DEBUGINFOD_CACHE_PATH=" + (dir.path / "debuginfod-cache").string()};

    std::random_device seed_source;
    const auto seed = seed_source();
    std::mt19937 random(seed);
    INFO("seed " << seed);
    int stopped_with_data = 0, profiling_at_stop = 0;
    const int n = cycles();
    for (int cycle = 0; cycle < n; ++cycle) {
        const auto sessions = dir.path / ("sessions" + std::to_string(cycle));
        const int signo = random() % 2 ? SIGINT : SIGTERM;
        const auto delay = std::chrono::milliseconds(random() % 4000);
        const bool perf_data_import = random() % 2;
        INFO("cycle " << cycle << ": " << (signo == SIGINT ? "SIGINT" : "SIGTERM") << " after "
                      << delay.count() << " ms, importing "
                      << (perf_data_import ? "perf.data" : "text"));

        collector_proc coll(sessions, {}, env);
        std::atomic<bool> stop{false};
        std::atomic<int> started{0};
        std::atomic<std::size_t> streamed{0};
        std::vector<std::thread> work;
        for (int b = 0; b < 2; ++b)
            work.emplace_back(browser, coll.http_port, std::ref(streamed));
        for (const auto& port : agent_ports)
            work.emplace_back(wizard, coll.http_port, port, demo->pid(), std::ref(stop),
                              std::ref(started));
        work.emplace_back(unnamed_agent, coll.agent_port, std::ref(stop));
        work.emplace_back(importer, coll.http_port, perf_data_import ? perf_data : text,
                          !perf_data_import, std::ref(stop));
        work.emplace_back(renamer, coll.http_port, dir.path, std::ref(stop));

        std::this_thread::sleep_for(delay);
        if (cycle == n - 1 && profiling_at_stop == 0) {
            // No stop has met an agent profiling yet (starts slow on a loaded machine): this
            // one waits for one, so every run of the test covers the case.
            const auto give_up = std::chrono::steady_clock::now() + 60s;
            while (started == 0 && std::chrono::steady_clock::now() < give_up)
                std::this_thread::sleep_for(50ms);
        }
        profiling_at_stop += started.load();
        coll.proc->signal(signo);
        const auto status = coll.proc->wait(45s);
        stop = true;
        for (auto& t : work)
            t.join();

        const auto log = coll.proc->stderr_text();
        INFO(log.substr(log.size() > 6000 ? log.size() - 6000 : 0));
        REQUIRE(status);
        CHECK(*status == 0);
        CHECK_THAT(log, Catch::Contains("stopped"));
        CHECK_THAT(log, !Catch::Contains("did not stop"));
        CHECK_THAT(log, !Catch::Contains("Sanitizer"));
        CHECK_THAT(log, !Catch::Contains("runtime error"));

        // The store is whole: every session was completed when its agent was let go, and no
        // import is left half-staged.
        for (const auto& e : fs::directory_iterator(sessions)) {
            const auto name = e.path().filename().string();
            CHECK_FALSE(name.rfind(".staging-", 0) == 0);
            if (!e.is_directory() || name[0] == '.')
                continue;
            INFO("session " << name);
            const json::value parsed =
                json::parse(test_support::file_bytes(e.path() / "meta.json"));
            const auto& meta = parsed.as_object();
            CHECK(meta.at("live") == false);
            CHECK(meta.contains("ended_at"));
            if (meta.contains("samples") && meta.at("samples").to_number<std::uint64_t>() > 0)
                ++stopped_with_data;
        }
        // The agents outlive every collector and take the next one.
        for (const auto& a : agents)
            REQUIRE(test_support::process_exists(a->pid()));
    }
    // What the stops met, over all cycles: a test that never caught a run in progress or a
    // pending debuginfod lookup would prove nothing.
    INFO("sessions with samples " << stopped_with_data << ", agents profiling " << profiling_at_stop
                                  << ", debuginfod asked " << debuginfod.asked.load());
    if (n >= 4) {
        CHECK(stopped_with_data > 0);
        CHECK(profiling_at_stop > 0);
        CHECK(debuginfod.asked > 0);
    }
}
