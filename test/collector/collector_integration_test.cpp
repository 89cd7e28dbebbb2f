// The real collector with real agents profiling the real demo under real perf.
#include "collector/symbols/elf_symbols.hpp"
#include "collector/symbols/subprocess.hpp"
#include "protocol/build_id.hpp"
#include "protocol/digest.hpp"
#include "protocol/frame.hpp"
#include "protocol/tls.hpp"
#include "support/agents.hpp"
#include "support/collector_proc.hpp"
#include "support/framing_peer.hpp"
#include "support/http_client.hpp"
#include "support/poll_json.hpp"
#include "support/spawn.hpp"

#include "support/fixtures.hpp"

#include <catch2/catch.hpp>

#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>

#include <atomic>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <future>
#include <map>
#include <sstream>
#include <thread>
#include <unistd.h>

using namespace std::chrono_literals;
namespace fs = std::filesystem;
namespace json = boost::json;
using test_support::http_call;
using test_support::spawned;

namespace {

using test_support::collector_proc;
using test_support::start_demo;
using test_support::temp_dir;
using test_support::wait_for;

std::unique_ptr<spawned> start_agent(test_support::agent_flavour flavour, std::uint16_t port,
                                     int pid) {
    return test_support::start_agent(flavour, {"--server", "127.0.0.1:" + std::to_string(port),
                                               "--pid", std::to_string(pid), "--duration", "1"});
}

bool names(const json::value& functions, std::string_view fn) {
    return test_support::names_function(functions, fn);
}

// A collector started with --import FILE: the imported session and the HTTP port.
struct importing_collector {
    std::unique_ptr<spawned> proc;
    std::string session;
    std::uint16_t http_port = 0;

    importing_collector(const fs::path& sessions, const std::string& file) {
        proc = std::make_unique<spawned>(
            test_support::collector_bin(),
            std::vector<std::string>{"--sessions-dir", sessions.string(), "--agent-port", "0",
                                     "--agent-bind", "127.0.0.1", "--http-port", "0", "--import",
                                     file});
        const auto imported = proc->wait_for_stderr(" as session ", 20s);
        if (!imported)
            FAIL("no import: " << proc->stderr_text());
        const auto port = proc->wait_for_stderr("API on http://127.0.0.1:", 5s);
        REQUIRE(port);
        session = *imported;
        http_port = test_support::api_port(*port);
    }
};

const std::string matrix = "(anonymous namespace)::matrix_multiply";

} // namespace

TEST_CASE("collector end to end: the C++ and the Python agent live, a hostile peer, restart after "
          "SIGKILL",
          "[collector][integration][perf][ingestion][long]") {
    temp_dir dir;
    auto demo = start_demo(120);
    auto coll = std::make_unique<collector_proc>(dir.path);
    auto agent1 = start_agent(test_support::agent_flavour::cpp, coll->agent_port, demo->pid());
    auto agent2 = start_agent(test_support::agent_flavour::python, coll->agent_port, demo->pid());

    const auto targets = wait_for(*coll, "/api/targets", 20s, [](const json::value& v) {
        if (v.as_array().size() != 2)
            return false;
        for (const auto& t : v.as_array())
            if (t.at("state").as_string() != "profiling")
                return false;
        return true;
    });
    INFO(coll->proc->stderr_text());
    REQUIRE(targets.as_array().size() == 2);
    for (const auto& t : targets.as_array()) {
        CHECK(t.at("pid").as_int64() == demo->pid());
        CHECK(t.at("agent").as_string() == "perfwire");
        CHECK_FALSE(t.at("session_id").as_string().empty());
    }

    // Hostile peers: each is closed, and only its own connection suffers.
    auto silent = test_support::framing_peer::connect(coll->agent_port); // says nothing
    REQUIRE(silent);
    const auto silent_since = std::chrono::steady_clock::now();
    {
        auto flag = test_support::framing_peer::connect(coll->agent_port);
        REQUIRE(flag);
        flag->send(protocol::frame_flag::response, R"({"type":"hello","version":1,"agent":"x"})");
        flag->send_raw(std::string("\0\0\0\x01\x09z", 6)); // unknown flag 9
        CHECK_FALSE(flag->next(3s));
        CHECK(flag->closed());
        auto huge = test_support::framing_peer::connect(coll->agent_port);
        REQUIRE(huge);
        huge->send_raw(std::string("\x7f\xff\xff\xff\x01", 5)); // declares 2 GiB
        CHECK_FALSE(huge->next(3s));
        CHECK(huge->closed());
        auto garbage = test_support::framing_peer::connect(coll->agent_port);
        REQUIRE(garbage);
        garbage->send(protocol::frame_flag::response, "this is not JSON");
        CHECK_FALSE(garbage->next(3s));
        CHECK(garbage->closed());
    }

    // Both live sessions fill with the demo's stacks.
    const auto sessions = wait_for(*coll, "/api/sessions", 20s, [](const json::value& v) {
        int live_with_data = 0;
        for (const auto& s : v.as_array())
            if (s.at("live").as_bool() && s.at("samples").to_number<std::uint64_t>() > 50)
                ++live_with_data;
        return live_with_data == 2;
    });
    std::vector<std::string> ids;
    for (const auto& s : sessions.as_array())
        if (s.at("live").as_bool())
            ids.emplace_back(s.at("id").as_string());
    REQUIRE(ids.size() == 2);
    for (const auto& id : ids) {
        const auto fns = wait_for(*coll, "/api/sessions/" + id + "/functions", 10s,
                                  [](const json::value& v) { return names(v, matrix); });
        CHECK(names(fns, matrix));
        CHECK(names(fns, "(anonymous namespace)::hash_strings"));
    }
    for (const auto& id : ids) { // one session per agent flavour
        INFO("session " << id);
        // Source lines: the demo's hot loop, not matrix_multiply's first line, is what is hot.
        const auto src = coll->get("/api/sessions/" + id +
                                   "/source?function=(anonymous%20namespace)::matrix_multiply");
        INFO(json::serialize(src).substr(0, 2000));
        CHECK_THAT(std::string(src.at("file").as_string()), Catch::EndsWith("src/demo/demo.cpp"));
        std::uint32_t hot = 0;
        for (const auto& l : src.at("lines").as_array())
            if (l.at("text").as_string().find("// the hot line") != json::string::npos)
                hot = l.at("line").to_number<std::uint32_t>();
        REQUIRE(hot > 8);
        std::uint32_t best = 0;
        std::uint64_t best_value = 0;
        for (const auto& l : src.at("lines").as_array()) {
            const auto line = l.at("line").to_number<std::uint32_t>();
            const auto value = l.at("value").to_number<std::uint64_t>();
            if (line + 8 >= hot && line <= hot + 2 && value > best_value) {
                best = line;
                best_value = value;
            }
        }
        CHECK(best_value > 0);
        CHECK(best >= hot - 1); // the inner loop: its condition or its body
        CHECK(best <= hot);

        // The agent reported the build-id of the demo it profiled; the local copy is that build.
        const auto listing =
            wait_for(*coll, "/api/sessions/" + id + "/source", 10s, [](const json::value& v) {
                for (const auto& b : v.at("binaries").as_array())
                    if (b.at("module").as_string() == PERFWIRE_DEMO_BIN)
                        return !b.at("build_matches").is_null();
                return false;
            });
        bool matched = false;
        for (const auto& b : listing.at("binaries").as_array())
            if (b.at("module").as_string() == PERFWIRE_DEMO_BIN)
                matched =
                    b.at("build_matches") == true && b.at("device_build_id") == b.at("build_id");
        CHECK(matched);
        for (const auto& w : listing.at("warnings").as_array()) // others may lack symbols
            CHECK(w.as_string().find(PERFWIRE_DEMO_BIN) == boost::json::string::npos);
    }
    // The UI and the event stream bypass the API router: the server guards them itself.
    CHECK(http_call(coll->http_port, "GET", "/", {}, {"Host: evil.example"}).status == 403);
    CHECK(http_call(coll->http_port, "GET", "/api/stream", {}, {"Host: evil.example"}).status ==
          403);
    const auto page = http_call(coll->http_port, "GET", "/");
    CHECK(page.status == 200);
    CHECK_THAT(page.body, Catch::Contains("<title>perfwire</title>"));
    CHECK(coll->get("/api/status").at("sessions").to_number<int>() >= 2);

    // perf stat's counters come with a later chunk than the first samples may.
    const auto meta = wait_for(*coll, "/api/sessions/" + ids[0], 20s, [](const json::value& v) {
        const auto* stat = v.as_object().if_contains("perf_stat");
        const auto* counters =
            stat && stat->is_object() ? stat->as_object().if_contains("counters") : nullptr;
        return counters && counters->is_array() && !counters->as_array().empty();
    });
    REQUIRE(meta.as_object().contains("perf_stat"));
    CHECK(meta.at("perf_stat").at("counters").as_array().size() > 0);

    // Relay: pause and resume the first agent; auth is never relayed.
    const std::string t1(targets.as_array()[0].at("id").as_string());
    auto paused =
        http_call(coll->http_port, "POST", "/api/targets/" + t1 + "/command", R"({"cmd":"pause"})");
    CHECK(paused.status == 200);
    CHECK(
        http_call(coll->http_port, "POST", "/api/targets/" + t1 + "/command", R"({"cmd":"pause"})")
            .status == 409);
    CHECK(http_call(coll->http_port, "POST", "/api/targets/" + t1 + "/command",
                    R"({"cmd":"auth","args":{"token":"x"}})")
              .status == 400);
    CHECK(
        http_call(coll->http_port, "POST", "/api/targets/" + t1 + "/command", R"({"cmd":"resume"})")
            .status == 200);
    CHECK(coll->get("/api/status").at("targets").to_number<int>() == 2);

    // The peer that never spoke was dropped after its 10 s.
    std::this_thread::sleep_until(silent_since + 11s);
    CHECK_FALSE(silent->next(1s));
    CHECK(silent->closed());
    CHECK_THAT(coll->proc->stderr_text(), Catch::Contains("no hello within 10 s"));
    CHECK_THAT(coll->proc->stderr_text(), Catch::Contains("unknown frame flag"));
    CHECK_THAT(coll->proc->stderr_text(), Catch::Contains("frame length exceeds limit"));

    // SIGKILL mid-session: nothing received is lost; a restart lists and replays it.
    const auto before =
        coll->get("/api/sessions/" + ids[1]).at("chunks").to_number<std::uint64_t>();
    coll->proc->signal(SIGKILL);
    coll->proc->wait(5s);
    agent1.reset();
    agent2.reset();
    coll = std::make_unique<collector_proc>(dir.path);
    const auto after = coll->get("/api/sessions");
    int found = 0;
    for (const auto& s : after.as_array()) {
        CHECK_FALSE(s.at("live").as_bool());
        if (s.at("id").as_string() == ids[0] || s.at("id").as_string() == ids[1]) {
            ++found;
            CHECK(s.at("ended_at").is_null()); // it never saw the end
        }
    }
    CHECK(found == 2);
    const auto replayed = coll->get("/api/sessions/" + ids[1]);
    CHECK(replayed.at("chunks").to_number<std::uint64_t>() >= before);
    CHECK(names(coll->get("/api/sessions/" + ids[1] + "/functions"), matrix));
}

TEST_CASE("a session is one run: the target's exit and a stop end it, a start opens the next",
          "[collector][integration][perf][ingestion]") {
    const auto flavour = test_support::each_agent();
    INFO(flavour);
    temp_dir dir;
    collector_proc coll(dir.path);
    // The target ends the run by exiting, once the session holds samples (how long the
    // agent's probe takes is no part of the test).
    auto brief = start_demo(60);
    const auto born = std::chrono::steady_clock::now();
    auto agent = start_agent(flavour, coll.agent_port, brief->pid());
    auto one_target = [&](auto pred) {
        return wait_for(coll, "/api/targets", 20s, [&](const json::value& v) {
            return v.as_array().size() == 1 && pred(v.as_array()[0].as_object());
        });
    };
    const auto running =
        one_target([](const json::object& t) { return t.at("session_id").is_string(); });
    REQUIRE(running.as_array().size() == 1);
    const std::string target(running.as_array()[0].at("id").as_string());
    const std::string first(running.as_array()[0].at("session_id").as_string());
    wait_for(coll, "/api/sessions/" + first, 20s,
             [](const json::value& v) { return v.at("samples").to_number<std::uint64_t>() > 0; });
    brief->signal(SIGTERM);
    REQUIRE(brief->wait(5s));
    const double lived =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - born).count();

    // The target exits: the agent goes idle, the session ends, saying what it profiled.
    const auto idle = one_target([&](const json::object& t) {
        return t.at("state").as_string() == "idle" && t.at("session_id").is_null();
    });
    REQUIRE(idle.as_array().size() == 1);
    CHECK(idle.as_array()[0].at("last_session_id").as_string() == first);
    const auto ended = wait_for(coll, "/api/sessions/" + first, 10s,
                                [](const json::value& v) { return !v.at("live").as_bool(); });
    CHECK_FALSE(ended.at("ended_at").is_null());
    CHECK(ended.at("samples").to_number<std::uint64_t>() > 0);
    CHECK(ended.at("process").as_string() == "perfwire-demo");
    CHECK(ended.at("pid").to_number<int>() == brief->pid());
    CHECK(ended.at("callgraph").as_string() == "fp"); // as the agent's notice said (its --pid)
    // The span of its samples: within the time the target lived.
    CHECK(ended.at("duration_sec").to_number<double>() >= 0.0);
    CHECK(ended.at("duration_sec").to_number<double>() < lived);

    // "Start again" on another process: a new session from the answer on, ended by a stop.
    auto demo = start_demo(60);
    const auto start =
        http_call(coll.http_port, "POST", "/api/targets/" + target + "/command",
                  R"({"cmd":"start","args":{"pid":)" + std::to_string(demo->pid()) + "}}");
    REQUIRE(start.status == 200);
    const auto again = coll.get("/api/targets");
    REQUIRE(again.as_array().size() == 1);
    REQUIRE(again.as_array()[0].at("session_id").is_string());
    const std::string second(again.as_array()[0].at("session_id").as_string());
    CHECK(second != first);
    wait_for(coll, "/api/sessions/" + second, 20s,
             [](const json::value& v) { return v.at("samples").to_number<std::uint64_t>() > 20; });
    CHECK(http_call(coll.http_port, "POST", "/api/targets/" + target + "/command",
                    R"({"cmd":"stop"})")
              .status == 200);
    // Listed as ended once it is final: its end written, every sample counted.
    const auto stopped = wait_for(coll, "/api/sessions/" + second, 10s,
                                  [](const json::value& v) { return !v.at("live").as_bool(); });
    CHECK_FALSE(stopped.at("ended_at").is_null());
    CHECK(stopped.at("samples").to_number<std::uint64_t>() > 20);
    CHECK(coll.get("/api/targets").as_array()[0].at("last_session_id").as_string() == second);
    // The list tells the runs apart by process, not only by a timestamp id.
    const auto listed = coll.get("/api/sessions");
    INFO(json::serialize(listed));
    CHECK(listed.as_array().size() == 2);
    for (const auto& s : listed.as_array())
        CHECK(s.at("process").as_string() == "perfwire-demo");
}

TEST_CASE("a run that ends as it starts leaves no session open", "[collector][integration]") {
    temp_dir dir;
    collector_proc coll(dir.path);
    // An agent whose start answer and "target exited" notice reach the collector together.
    auto agent = test_support::hello_agent(coll, "quick");
    const auto listed = wait_for(coll, "/api/targets", 10s,
                                 [](const json::value& v) { return v.as_array().size() == 1; });
    REQUIRE(listed.as_array().size() == 1);
    const std::string target(listed.as_array()[0].at("id").as_string());
    bool relayed = false; // (Catch's assertions stay on the test's own thread)
    std::thread relay([&] {
        auto asked = agent->next_of(protocol::frame_flag::command, 10s);
        if (!asked)
            return;
        relayed = true;
        const auto id = json::parse(asked->payload).at("id");
        const std::string both =
            protocol::encode_frame(protocol::frame_flag::response,
                                   R"({"type":"response","id":)" + json::serialize(id) +
                                       R"(,"ok":true,"state":"profiling","pid":4242})") +
            protocol::encode_frame(
                protocol::frame_flag::response,
                R"({"type":"state","state":"idle","reason":"target process exited","pid":4242})");
        agent->send_raw(both); // one write: both are read before the relay resumes
    });
    const auto start = http_call(coll.http_port, "POST", "/api/targets/" + target + "/command",
                                 R"({"cmd":"start","args":{"pid":4242}})");
    relay.join();
    REQUIRE(relayed);
    CHECK(start.status == 200);
    // The notice came after the answer: the agent is idle and no session stays open (an empty
    // run is not kept).
    const auto after = one_target(coll, "idle", 10s);
    CHECK(after.at("session_id").is_null());
    // Why, as the agent said it: on the target's row.
    CHECK(after.at("state_reason") == "target process exited");
    const auto sessions = wait_for(coll, "/api/sessions", 10s,
                                   [](const json::value& v) { return v.as_array().empty(); });
    CHECK(sessions.as_array().empty());
    CHECK(test_support::session_folders(dir.path) == 0);
}

namespace {

// A readelf that waits until the test lets it go (`held` appears when one is waiting), behind
// --toolchain-prefix: the collector's read of a symbol table, held as long as a large binary's
// takes. Let go whatever the test's outcome.
struct held_readelf {
    temp_dir tools;
    fs::path held = tools.path / "held", release = tools.path / "release";
    held_readelf() {
        {
            std::ofstream script(tools.path / "slow-readelf");
            script << "#!/bin/sh\n: > '" << held.string() << "'\nwhile [ ! -e '" << release.string()
                   << "' ]; do sleep 0.05; done\nexec readelf \"$@\"\n";
        }
        fs::permissions(tools.path / "slow-readelf", fs::perms::owner_all);
        fs::create_symlink("/usr/bin/addr2line", tools.path / "slow-addr2line");
        fs::create_symlink("/usr/bin/objdump", tools.path / "slow-objdump");
    }
    ~held_readelf() { let_go(); }
    std::string prefix() const { return (tools.path / "slow-").string(); }
    bool wait_held() const {
        for (int waited = 0; waited < 600 && !fs::exists(held); ++waited)
            std::this_thread::sleep_for(50ms);
        return fs::exists(held);
    }
    void let_go() const { std::ofstream{release}; }
};

// 50 samples of nameless frames in the demo (perf's address: a file offset, its link-time
// address in this PIE), which the collector names from the demo's symbol table.
std::string nameless_demo_chunk() {
    const auto listed = collector::run_capture({"readelf", "-sW", PERFWIRE_DEMO_BIN});
    REQUIRE(listed.code == 0);
    const auto fib = collector::elf_symbols::parse_readelf(listed.out)
                         .address_of("(anonymous namespace)::recursive_fib");
    REQUIRE(fib);
    std::ostringstream address;
    address << std::hex << *fib + 4;
    std::string chunk;
    for (int i = 0; i < 50; ++i)
        chunk += "perfwire-demo 100/100 " + std::to_string(1 + i) +
                 ".000000: 1000000 cpu-clock:\n\t" + address.str() + " [unknown] (" +
                 PERFWIRE_DEMO_BIN + ")\n\n";
    return chunk;
}

} // namespace

TEST_CASE("a symbol table being read holds up no parse and no answer: the chunks are parsed at "
          "once, a command is answered, and the frames are named in place when the table comes",
          "[collector][integration][ingestion]") {
    // The first chunk's frames are named from the demo's symbol table, read through a
    // readelf that waits until the test lets it go. The parse never waited for it (the chunks
    // behind it, and the answer to a stop sent after them, waited with it: 40 s).
    temp_dir dir;
    held_readelf readelf;
    collector_proc coll(dir.path,
                        {"--toolchain-prefix", readelf.prefix(), "--binary", PERFWIRE_DEMO_BIN});
    auto agent = test_support::hello_agent(coll, "device");
    const std::string chunk = nameless_demo_chunk();
    agent->send(protocol::frame_flag::text, chunk);
    REQUIRE(readelf.wait_held());
    constexpr int behind = 6; // past the two chunks a connection may have waiting for a parse
    for (int i = 0; i < behind; ++i)
        agent->send(protocol::frame_flag::text, chunk);
    const auto targets = coll.get("/api/targets");
    REQUIRE(targets.as_array().size() == 1);
    const std::string target(targets.as_array()[0].at("id").as_string());
    auto stopping = std::async(std::launch::async, [&] {
        return http_call(coll.http_port, "POST", "/api/targets/" + target + "/command",
                         R"({"cmd":"stop"})", {}, 60s);
    });
    const auto asked = agent->next_of(protocol::frame_flag::command, 30s);
    REQUIRE(asked);
    const auto id = json::parse(asked->payload).at("id");
    agent->send(protocol::frame_flag::response,
                R"({"id":)" + json::serialize(id) + R"(,"ok":true,"state":"idle"})");
    const auto stopped = stopping.get();
    INFO(stopped.body);
    CHECK(stopped.status == 200);
    // While the table is still being read: every chunk parsed, the frames as perf named them.
    const auto sessions = wait_for(coll, "/api/sessions", 30s, [](const json::value& v) {
        return v.as_array().size() == 1 &&
               v.at(0).at("samples").to_number<std::uint64_t>() == 50 * (behind + 1);
    });
    REQUIRE(sessions.as_array().size() == 1);
    const std::string session(sessions.at(0).at("id").as_string());
    const auto unnamed = coll.get("/api/sessions/" + session + "/functions?limit=5");
    INFO(json::serialize(unnamed));
    CHECK(unnamed.at("functions").as_array().at(0).at("name").as_string() == "[unknown]");
    CHECK(fs::exists(readelf.held));
    // Let go: named in place, nothing lost.
    readelf.let_go();
    const auto named = wait_for(coll, "/api/sessions/" + session + "/functions?limit=5", 30s,
                                [](const json::value& v) {
                                    return v.at("functions").as_array().at(0).at("name") ==
                                           "(anonymous namespace)::recursive_fib";
                                });
    INFO(json::serialize(named));
    CHECK(named.at("functions").as_array().at(0).at("name").as_string() ==
          "(anonymous namespace)::recursive_fib");
    CHECK(named.at("total").to_number<std::uint64_t>() == 50ULL * (behind + 1) * 1000000);
}

TEST_CASE("a symbol table being read holds neither the pool nor any session: each is parsed and "
          "viewed meanwhile, and named when it comes",
          "[collector][integration][ingestion]") {
    // Two devices' frames are in the demo, whose symbol table the collector reads through a
    // readelf held until the test lets it go; a third device's frames name no file. Read on
    // the pool, the two tables held both its threads, and the third session waited for them;
    // read in the parse, the first two sessions waited for it.
    temp_dir dir;
    held_readelf readelf;
    collector_proc coll(dir.path,
                        {"--toolchain-prefix", readelf.prefix(), "--binary", PERFWIRE_DEMO_BIN});
    const std::string chunk = nameless_demo_chunk();
    auto first = test_support::hello_agent(coll, "first");
    auto second = test_support::hello_agent(coll, "second");
    auto third = test_support::hello_agent(coll, "third");
    first->send(protocol::frame_flag::text, chunk);
    REQUIRE(readelf.wait_held());
    second->send(protocol::frame_flag::text, chunk);
    std::string plain;
    for (int i = 0; i < 40; ++i)
        plain += "worker 7/7 " + std::to_string(1 + i) +
                 ".000000: 1000000 cpu-clock:\n\tffffffff81000000 [unknown] ([unknown])\n\n";
    third->send(protocol::frame_flag::text, plain);
    // Each device's session, by its host name.
    const auto session_of = [&](const std::string& host) {
        const auto targets = coll.get("/api/targets");
        for (const auto& t : targets.as_array())
            if (const auto* h = t.as_object().if_contains("hostname");
                h && h->is_string() && h->as_string() == host && t.at("session_id").is_string())
                return std::string(t.at("session_id").as_string());
        return std::string();
    };
    const auto sessions = wait_for(coll, "/api/sessions", 20s, [](const json::value& v) {
        std::uint64_t samples = 0;
        for (const auto& s : v.as_array())
            samples += s.at("samples").to_number<std::uint64_t>();
        return v.as_array().size() == 3 && samples == 50 + 50 + 40;
    });
    INFO(json::serialize(sessions));
    REQUIRE(sessions.as_array().size() == 3);
    const std::string a = session_of("first"), b = session_of("second"), c = session_of("third");
    REQUIRE_FALSE(a.empty());
    REQUIRE_FALSE(b.empty());
    CHECK(coll.get("/api/sessions/" + c).at("samples").to_number<std::uint64_t>() == 40);
    // The table is still held: the two sessions' views answer, as perf named the frames.
    CHECK(fs::exists(readelf.held));
    for (const auto& waiting : {a, b}) {
        const auto view = http_call(coll.http_port, "GET",
                                    "/api/sessions/" + waiting + "/functions?limit=5", "", {}, 5s);
        INFO(view.body);
        CHECK(view.status == 200);
        CHECK_THAT(view.body, Catch::Contains("\"[unknown]\""));
    }
    // Let go: both are named with the demo's symbol table.
    readelf.let_go();
    for (const auto& waiting : {a, b}) {
        const auto functions = wait_for(coll, "/api/sessions/" + waiting + "/functions?limit=5",
                                        30s, [](const json::value& v) {
                                            return v.at("functions").as_array().at(0).at("name") ==
                                                   "(anonymous namespace)::recursive_fib";
                                        });
        INFO(json::serialize(functions));
        CHECK(functions.at("functions").as_array().at(0).at("name").as_string() ==
              "(anonymous namespace)::recursive_fib");
    }
}

TEST_CASE("a start may probe perf past 15 s, and an answer after its deadline still counts",
          "[collector][integration]") {
    temp_dir dir;
    collector_proc coll(dir.path);
    // An agent as slow as one probing an odd perf: it answers both commands 17 s after the
    // second came, the start within its probing deadline, a resume after its 15 s.
    auto agent = test_support::hello_agent(coll, "slow");
    const auto listed = wait_for(coll, "/api/targets", 10s,
                                 [](const json::value& v) { return v.as_array().size() == 1; });
    REQUIRE(listed.as_array().size() == 1);
    const std::string target(listed.as_array()[0].at("id").as_string());
    std::vector<std::string> asked; // (Catch's assertions stay on the test's own thread)
    std::atomic<bool> start_read = false, slow_done = false;
    std::thread slow([&] {
        std::vector<json::value> ids;
        while (ids.size() < 2) {
            auto f = agent->next_of(protocol::frame_flag::command, 10s);
            if (!f) {
                slow_done = true;
                return;
            }
            const auto cmd = json::parse(f->payload);
            asked.emplace_back(cmd.at("cmd").as_string());
            ids.push_back(cmd.at("id"));
            start_read = true;
        }
        std::this_thread::sleep_for(17s);
        agent->send_raw(
            protocol::encode_frame(protocol::frame_flag::response,
                                   R"({"type":"response","id":)" + json::serialize(ids[0]) +
                                       R"(,"ok":true,"state":"profiling","pid":4242})") +
            protocol::encode_frame(protocol::frame_flag::response,
                                   R"({"type":"response","id":)" + json::serialize(ids[1]) +
                                       R"(,"ok":true,"state":"idle"})"));
        slow_done = true;
    });
    test_support::http_reply start;
    std::thread starting([&] {
        start = http_call(coll.http_port, "POST", "/api/targets/" + target + "/command",
                          R"({"cmd":"start","args":{"pid":4242}})");
    });
    // The resume goes out once the start has (the agent reads them in that order).
    while (!start_read && !slow_done)
        std::this_thread::sleep_for(20ms);
    const auto t0 = std::chrono::steady_clock::now();
    const auto late = http_call(coll.http_port, "POST", "/api/targets/" + target + "/command",
                                R"({"cmd":"resume"})");
    const auto late_waited = std::chrono::steady_clock::now() - t0;
    starting.join();
    slow.join();
    REQUIRE(asked == std::vector<std::string>{"start", "resume"});
    CHECK(start.status == 200);
    CHECK_THAT(start.body, Catch::Contains("profiling"));
    CHECK(late.status == 409);
    CHECK_THAT(late.body, Catch::Contains("no answer from the agent in time"));
    CHECK(late_waited < 17s); // it gave up at its own deadline, before the answers came
    // The late answer still says what the agent is doing.
    CHECK(one_target(coll, "idle", 10s).at("state") == "idle");
}

TEST_CASE("the wizard dials a listening agent with its pairing code",
          "[collector][integration][perf]") {
    const auto flavour =
        GENERATE(test_support::agent_flavour::cpp, test_support::agent_flavour::python);
    INFO(flavour);
    temp_dir dir;
    auto demo = start_demo(120);
    collector_proc coll(dir.path);
    auto agent =
        test_support::start_agent(flavour, {"--listen", "--bind", "127.0.0.1", "--port", "0",
                                            "--token", "00112233445566778899aabbccddeeff"});
    const auto port = agent->wait_for_stderr("listening on 127.0.0.1:", 5s);
    REQUIRE(port);

    const auto wrong = http_call(coll.http_port, "POST", "/api/targets/connect",
                                 R"({"host":"127.0.0.1","port":)" + *port +
                                     R"(,"token":"ffffffffffffffffffffffffffffffff"})");
    CHECK(wrong.status == 502);
    const auto ok = http_call(coll.http_port, "POST", "/api/targets/connect",
                              R"({"host":"127.0.0.1","port":)" + *port +
                                  R"(,"token":"00112233445566778899aabbccddeeff"})");
    INFO(ok.body);
    REQUIRE(ok.status == 200);
    const auto id = std::string(json::parse(ok.body).at("id").as_string());
    const auto procs = http_call(coll.http_port, "POST", "/api/targets/" + id + "/command",
                                 R"({"cmd":"list_processes"})");
    CHECK(procs.status == 200);
    CHECK_THAT(procs.body, Catch::Contains("perfwire-demo"));
    const auto start = http_call(coll.http_port, "POST", "/api/targets/" + id + "/command",
                                 R"({"cmd":"start","args":{"pid":)" + std::to_string(demo->pid()) +
                                     R"(,"duration":1}})");
    CHECK(start.status == 200);
    const auto targets = coll.get("/api/targets");
    REQUIRE(targets.as_array().size() == 1);
    const std::string sid(targets.as_array()[0].at("session_id").as_string());
    CHECK(names(wait_for(coll, "/api/sessions/" + sid + "/functions", 15s,
                         [](const json::value& v) { return names(v, matrix); }),
                matrix));
    CHECK(http_call(coll.http_port, "DELETE", "/api/targets/" + id).status == 204);
    CHECK(wait_for(coll, "/api/targets", 5s,
                   [](const json::value& v) { return v.as_array().empty(); })
              .as_array()
              .empty());
    // The pairing code never reaches the collector's log or disk.
    CHECK(coll.proc->stderr_text().find("00112233445566778899aabbccddeeff") == std::string::npos);
    for (const auto& e : fs::recursive_directory_iterator(dir.path))
        if (e.is_regular_file() && e.path().filename() == "meta.json") {
            std::string text = test_support::file_bytes(e.path());
            CHECK(text.find("00112233445566778899aabbccddeeff") == std::string::npos);
        }
}

TEST_CASE("a real perf.data imports from the command line and by upload",
          "[collector][integration][perf][ingestion]") {
    temp_dir dir;
    auto demo = start_demo(120);
    const std::string data = (dir.path / "demo.perf.data").string();
    spawned record("/usr/bin/perf", {"record", "-q", "-e", "cpu-clock", "-F", "199", "-g", "-p",
                                     std::to_string(demo->pid()), "-o", data, "--", "sleep", "1"});
    REQUIRE(record.wait(20s) == 0);

    importing_collector coll(dir.path / "sessions", data);
    const auto http_port = coll.http_port;
    const auto fns = http_call(http_port, "GET", "/api/sessions/" + coll.session + "/functions");
    CHECK(fns.status == 200);
    CHECK_THAT(fns.body, Catch::Contains(matrix));

    const std::string bytes = test_support::file_bytes(data);
    const auto up = http_call(http_port, "POST", "/api/sessions/import", bytes);
    INFO(up.body);
    REQUIRE(up.status == 200);
    const std::string id(json::parse(up.body).at("session_id").as_string());
    CHECK_THAT(http_call(http_port, "GET", "/api/sessions/" + id + "/functions").body,
               Catch::Contains(matrix));
    // Its modules are matched by the build-ids the recording holds (perf buildid-list), as a
    // live session's are by its agent's: the demo's is the build recorded, found and matching.
    const auto demo_build = protocol::read_build_id(PERFWIRE_DEMO_BIN);
    REQUIRE(demo_build);
    const auto src = http_call(http_port, "GET", "/api/sessions/" + id + "/source");
    INFO(src.body.substr(0, 1500));
    REQUIRE(src.status == 200);
    bool matched = false;
    const auto listing = json::parse(src.body);
    for (const auto& b : listing.at("binaries").as_array())
        if (b.at("module").as_string() == PERFWIRE_DEMO_BIN)
            matched = b.as_object().contains("device_build_id") &&
                      b.at("device_build_id").as_string() == *demo_build &&
                      b.at("build_matches").as_bool();
    CHECK(matched);

    spawned bad(PERFWIRE_COLLECTOR_BIN,
                {"--sessions-dir", (dir.path / "sessions").string(), "--agent-port", "0",
                 "--http-port", "0", "--import", "/nonexistent.data"});
    CHECK(bad.wait(10s) == 1);
}

namespace {

// `go tool pprof -top …` rows: flat and cum (sample counts) by node name.
struct pprof_row {
    std::uint64_t flat = 0, cum = 0;
};
// What `go tool pprof ARGS` prints.
std::string go_pprof(const fs::path& dir, const std::vector<std::string>& args) {
    std::vector<std::string> argv = {"tool", "pprof"};
    argv.insert(argv.end(), args.begin(), args.end());
    const auto out = (dir / "pprof.out").string();
    spawned go("/usr/bin/go", argv, out,
               {"HOME=" + dir.string(), "GOFLAGS=", "GOPATH=" + dir.string()});
    REQUIRE(go.wait(60s) == 0);
    return test_support::file_bytes(out);
}

std::map<std::string, pprof_row> go_pprof_top(const fs::path& dir, const std::string& file,
                                              const std::vector<std::string>& extra) {
    std::vector<std::string> args = {"-top", "-sample_index=samples", "-nodecount=100000",
                                     "-nodefraction=0", "-edgefraction=0"};
    args.insert(args.end(), extra.begin(), extra.end());
    args.push_back(file);
    std::istringstream in(go_pprof(dir, args));
    std::map<std::string, pprof_row> rows;
    bool table = false;
    for (std::string line; std::getline(in, line);) {
        if (line.find("flat%") != std::string::npos) {
            table = true;
            continue;
        }
        if (!table)
            continue;
        std::istringstream row(line);
        pprof_row r;
        std::string pct;
        row >> r.flat >> pct >> pct >> r.cum >> pct;
        std::string name;
        std::getline(row >> std::ws, name);
        if (row.fail() || name.empty())
            FAIL("unreadable pprof row: " << line);
        rows[name] = r;
    }
    REQUIRE_FALSE(rows.empty());
    return rows;
}

// perf record -g of `target` (perf's arguments after -o), imported by a collector, and the
// session's pprof export written to a file.
// Until the session's frames are named for good: the symbol tables its parse did not wait for
// are read (and it is named again with them).
void wait_named(std::uint16_t port, const std::string& session_path) {
    const auto meta = test_support::poll_json(port, session_path, 30s, [](const json::value& v) {
        const auto* pending = v.as_object().if_contains("symbols_pending");
        return pending && !pending->as_bool();
    });
    REQUIRE_FALSE(meta.at("symbols_pending").as_bool());
}

struct pprof_of_recording {
    importing_collector coll;
    std::string base; // the session's API path
    std::string file; // the export
    pprof_of_recording(const fs::path& dir, const std::vector<std::string>& target)
        : coll(dir / "sessions", record(dir, target))
        , base("/api/sessions/" + coll.session)
        , file((dir / "profile.pb.gz").string()) {
        wait_named(coll.http_port, base);
        const auto exported = http_call(coll.http_port, "GET", base + "/export?format=pprof");
        REQUIRE(exported.status == 200);
        std::ofstream(file, std::ios::binary) << exported.body;
    }
    static std::string record(const fs::path& dir, const std::vector<std::string>& target) {
        const std::string data = (dir / "recording.perf.data").string();
        std::vector<std::string> args{"record", "-q", "-e", "cpu-clock", "-F",
                                      "499",    "-g", "-o", data};
        args.insert(args.end(), target.begin(), target.end());
        spawned perf("/usr/bin/perf", args);
        REQUIRE(perf.wait(20s) == 0);
        return data;
    }
};

} // namespace

TEST_CASE("pprof export of a real recording: Go's pprof reads the UI's figures and source lines",
          "[collector][integration][perf][export]") {
    temp_dir dir;
    auto demo = start_demo(60);
    const pprof_of_recording r(dir.path, {"-p", std::to_string(demo->pid()), "--", "sleep", "1"});
    const auto& [coll, base, file] = r;

    // Function figures: pprof's flat and cum are the UI's self and total, sample for sample.
    // (-noinlines: code inlined into a function counts as the function's, as in perf and the UI.)
    const auto top = go_pprof_top(dir.path, file, {"-noinlines"});
    const auto fns =
        json::parse(http_call(coll.http_port, "GET", base + "/functions?weight=samples").body);
    int compared = 0;
    for (const auto& fn : fns.at("functions").as_array()) {
        const std::string name(fn.at("name").as_string());
        const std::string anonymous = "(anonymous namespace)"; // pprof leaves it out
        if (name.rfind(anonymous + "::", 0) != 0 || !top.count(name.substr(anonymous.size())))
            continue;
        const auto short_name = name.substr(anonymous.size());
        INFO(name);
        CHECK(top.at(short_name).flat == fn.at("self").to_number<std::uint64_t>());
        CHECK(top.at(short_name).cum == fn.at("total").to_number<std::uint64_t>());
        ++compared;
    }
    CHECK(compared >= 3); // matrix_multiply, hash_strings, recursive_fib and their workers

    // Lines: each of hash_strings' lines in pprof -lines holds what the Source tab shows there.
    // (Inlined code at the line of the call in this file, as the Source tab places it.)
    const auto lines = go_pprof_top(dir.path, file, {"-lines", "-noinlines"});
    const auto src = json::parse(
        http_call(
            coll.http_port, "GET",
            base + "/source?weight=samples&function=%28anonymous%20namespace%29%3A%3Ahash_strings")
            .body);
    const std::string source_file(src.at("file").as_string());
    CHECK_THAT(source_file, Catch::EndsWith("demo.cpp"));
    std::map<std::uint64_t, std::uint64_t> shown;
    for (const auto& l : src.at("lines").as_array())
        shown[l.at("line").to_number<std::uint64_t>()] = l.at("samples").to_number<std::uint64_t>();
    int placed = 0;
    for (const auto& [name, row] : lines) {
        const std::string prefix = "::hash_strings " + source_file + ":";
        if (name.rfind(prefix, 0) != 0)
            continue;
        const auto line = std::stoull(name.substr(prefix.size()));
        INFO(name);
        CHECK(row.flat == shown[line]);
        placed += row.flat > 0;
    }
    CHECK(placed >= 2); // the loop's lines, not one line for the whole function

    // Call sites: a worker's line that calls the hot function holds, in pprof's cum (every
    // sample with that line on its stack), what the Source tab's total shows there.
    int calls = 0;
    for (const char* worker : {"matrix_worker", "recurse_worker", "hash_worker"}) {
        const auto of = json::parse(
            http_call(coll.http_port, "GET",
                      base + "/source?weight=samples&function=%28anonymous%20namespace%29%3A%3A" +
                          worker)
                .body);
        if (!of.as_object().contains("lines") || of.at("file").as_string() != source_file)
            continue;
        std::map<std::uint64_t, std::uint64_t> total;
        for (const auto& l : of.at("lines").as_array())
            total[l.at("line").to_number<std::uint64_t>()] =
                l.at("total_value").to_number<std::uint64_t>();
        for (const auto& [name, row] : lines) {
            const std::string prefix = std::string("::") + worker + " " + source_file + ":";
            if (name.rfind(prefix, 0) != 0)
                continue;
            const auto line = std::stoull(name.substr(prefix.size()));
            INFO(name);
            CHECK(row.cum == total[line]);
            calls += row.cum > row.flat;
        }
    }
    CHECK(calls >= 2); // the workers' call lines, each holding what its call led to
}

TEST_CASE("two static work() of two files, imported from perf.data: go tool pprof lists each "
          "in its own file with the function table's and the Source tab's figures",
          "[collector][integration][perf][export]") {
    temp_dir dir;
    const pprof_of_recording r(dir.path, {"--", PERFWIRE_STATICS_BIN, "1"});
    const auto& [coll, base, file] = r;
    std::map<std::string, std::uint64_t> self;
    const auto fns =
        json::parse(http_call(coll.http_port, "GET", base + "/functions?weight=samples").body);
    for (const auto& fn : fns.at("functions").as_array())
        self[std::string(fn.at("name").as_string())] = fn.at("self").to_number<std::uint64_t>();
    CHECK(self.count("work") == 0);
    const auto lines = go_pprof_top(dir.path, file, {"-lines", "-noinlines"});
    const auto listed = go_pprof(dir.path, {"-list", "work", "-sample_index=samples", file});
    for (const std::string own : {"statics_a.cpp", "statics_b.cpp"}) {
        const auto fn = "work (" + own + ")";
        INFO(fn);
        REQUIRE(self[fn] > 0);
        // -list: a routine of its own, in its own file.
        const auto routine = listed.find("ROUTINE ======================== " + fn + " in ");
        REQUIRE(routine != std::string::npos);
        CHECK(listed.substr(routine, listed.find('\n', routine) - routine).ends_with("/" + own));
        // -lines: its lines are in its file, hold its self weight, each what the Source tab
        // shows there.
        const auto src =
            json::parse(http_call(coll.http_port, "GET",
                                  base + "/source?weight=samples&function=work%20%28" + own + "%29")
                            .body);
        const std::string source_file(src.at("file").as_string());
        CHECK(source_file.ends_with("/" + own));
        std::map<std::uint64_t, std::uint64_t> shown;
        for (const auto& l : src.at("lines").as_array())
            shown[l.at("line").to_number<std::uint64_t>()] =
                l.at("samples").to_number<std::uint64_t>();
        std::uint64_t flat = 0;
        for (const auto& [name, row] : lines) {
            if (!name.starts_with(fn + " "))
                continue;
            INFO(name);
            const std::string prefix = fn + " " + source_file + ":";
            REQUIRE(name.starts_with(prefix));
            CHECK(row.flat == shown[std::stoull(name.substr(prefix.size()))]);
            flat += row.flat;
        }
        CHECK(flat == self[fn]);
    }
}

TEST_CASE("a stripped program's recording imported before its binary is given: named in place, "
          "go tool pprof -lines shows what an import with the binary shows",
          "[collector][integration][perf][export][symbols]") {
    temp_dir dir;
    // The device's program, stripped (one build-id with the workload); perf records it with
    // a HOME whose build-id cache holds nothing, so nothing names its frames.
    const std::string bin = PERFWIRE_CALLSITES_BIN;
    const std::string device = (dir.path / "perfwire-callsites").string();
    {
        spawned strip("/usr/bin/strip", {"--strip-all", "-o", device, bin});
        REQUIRE(strip.wait(20s) == 0);
    }
    fs::create_directories(dir.path / "home");
    const std::vector<std::string> env{"HOME=" + (dir.path / "home").string(), "DEBUGINFOD_URLS="};
    const std::string data = (dir.path / "stripped.perf.data").string();
    {
        spawned perf(
            "/usr/bin/perf",
            {"record", "-q", "-e", "cpu-clock", "-F", "499", "-g", "-o", data, "--", device, "1.5"},
            "/dev/null", env);
        REQUIRE(perf.wait(20s) == 0);
    }
    const std::vector<std::string> common{
        "--browse-root", "/", "--debug-dir", (dir.path / "home").string(), "--import", data};
    // pprof -lines of a collector's session, written to `name`.
    const auto lines_of = [&](test_support::collector_proc& c, const std::string& session,
                              const std::string& name) {
        const auto exported =
            http_call(c.http_port, "GET", "/api/sessions/" + session + "/export?format=pprof");
        REQUIRE(exported.status == 200);
        const auto file = (dir.path / name).string();
        std::ofstream(file, std::ios::binary) << exported.body;
        return go_pprof_top(dir.path, file, {"-lines", "-noinlines"});
    };

    // The oracle: the recording imported by a collector that has the binary from the start.
    std::map<std::string, pprof_row> expected;
    {
        auto args = common;
        args.insert(args.end(), {"--binary", bin});
        test_support::collector_proc c(dir.path / "sessions-named", args, env);
        const auto session = c.proc->wait_for_stderr(" as session ", 20s);
        REQUIRE(session);
        wait_named(c.http_port, "/api/sessions/" + *session);
        expected = lines_of(c, *session, "named.pb.gz");
    }
    std::uint64_t costly_cum = 0;
    for (const auto& [name, row] : expected)
        if (name.starts_with("::work ") && name.find("callsites.cpp:") != std::string::npos)
            costly_cum = std::max(costly_cum, row.cum);
    REQUIRE(costly_cum > 0); // work()'s lines, each call line holding what it led to

    // Imported with nothing to name it, then given the binary: named in place.
    test_support::collector_proc c(dir.path / "sessions", common, env);
    INFO(c.proc->stderr_text());
    const auto session = c.proc->wait_for_stderr(" as session ", 20s);
    REQUIRE(session);
    const auto functions = "/api/sessions/" + *session + "/functions?limit=500";
    wait_named(c.http_port, "/api/sessions/" + *session);
    CHECK_FALSE(names(c.get(functions), "(anonymous namespace)::work"));
    const auto put =
        http_call(c.http_port, "PUT", "/api/config", R"({"binaries": [")" + bin + R"("]})");
    REQUIRE(put.status == 200);
    CHECK(c.proc->wait_for_stderr("session " + *session + ": frames named in place", 20s)
              .has_value());
    test_support::poll_json(c.http_port, functions, 20s, [](const json::value& v) {
        return names(v, "(anonymous namespace)::work");
    });
    const auto got = lines_of(c, *session, "in-place.pb.gz");
    for (const auto& [name, row] : expected) {
        INFO(name);
        REQUIRE(got.count(name));
        CHECK(got.at(name).flat == row.flat);
        CHECK(got.at(name).cum == row.cum);
    }
    CHECK(got.size() == expected.size());
}

TEST_CASE("every header shape imports from the command line and by upload, and an upload cut "
          "short leaves nothing",
          "[collector][integration][import]") {
    temp_dir dir;
    // Each row of the shape table as one sample of a recording.
    std::istringstream table(test_support::fixture("collector/fixtures/header_shapes.tsv"));
    std::string text;
    std::size_t rows = 0;
    for (std::string line; std::getline(table, line);)
        if (!line.empty() && line[0] != '#') {
            text += line.substr(0, line.find('\t')) + "\n\t 4005d6 table_leaf+0x4 (/bin/app)\n\n";
            ++rows;
        }
    const std::string file = (dir.path / "shapes.txt").string();
    std::ofstream(file, std::ios::binary) << text;
    const auto sessions = dir.path / "sessions";

    importing_collector coll(sessions, file);
    const auto http_port = coll.http_port;
    const auto meta =
        json::parse(http_call(http_port, "GET", "/api/sessions/" + coll.session).body);
    CHECK(meta.at("samples").to_number<std::size_t>() == rows);
    CHECK(meta.at("skipped_lines").to_number<std::size_t>() == 0);

    const auto up = http_call(http_port, "POST", "/api/sessions/import", text);
    INFO(up.body);
    REQUIRE(up.status == 200);
    const auto body = json::parse(up.body);
    CHECK(body.at("samples").to_number<std::size_t>() == rows);
    CHECK(body.at("bytes").to_number<std::size_t>() == text.size());
    const std::string id(body.at("session_id").as_string());
    CHECK_THAT(http_call(http_port, "GET", "/api/sessions/" + id + "/functions").body,
               Catch::Contains("table_leaf"));

    // An upload that stops half way (after more than a block): the collector keeps nothing.
    std::string part;
    while (part.size() < (std::size_t{3} << 20))
        part += text;
    const std::size_t folders_before =
        std::distance(fs::directory_iterator(sessions), fs::directory_iterator());
    {
        const int fd = test_support::connect_loopback(http_port);
        REQUIRE(fd >= 0);
        const std::string head = "POST /api/sessions/import HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                                 "Authorization: Bearer " +
                                 test_support::api_token(http_port) +
                                 "\r\nContent-Length: " + std::to_string(part.size() * 4) +
                                 "\r\n\r\n";
        REQUIRE(::write(fd, head.data(), head.size()) == static_cast<ssize_t>(head.size()));
        std::string_view rest = part;
        while (!rest.empty()) {
            const ssize_t n = ::write(fd, rest.data(), rest.size());
            REQUIRE(n > 0);
            rest.remove_prefix(static_cast<std::size_t>(n));
        }
        // The staged folder appears once the first block is in.
        const auto deadline = std::chrono::steady_clock::now() + 10s;
        while (std::distance(fs::directory_iterator(sessions), fs::directory_iterator()) ==
                   static_cast<std::ptrdiff_t>(folders_before) &&
               std::chrono::steady_clock::now() < deadline)
            std::this_thread::sleep_for(20ms);
        CHECK(std::distance(fs::directory_iterator(sessions), fs::directory_iterator()) ==
              static_cast<std::ptrdiff_t>(folders_before + 1));
        ::close(fd);
    }
    const auto deadline = std::chrono::steady_clock::now() + 10s;
    std::size_t now = 0;
    do {
        std::this_thread::sleep_for(50ms);
        now = std::distance(fs::directory_iterator(sessions), fs::directory_iterator());
    } while (now != folders_before && std::chrono::steady_clock::now() < deadline);
    CHECK(now == folders_before);
    CHECK(json::parse(http_call(http_port, "GET", "/api/sessions").body).as_array().size() == 2);
}

TEST_CASE("the collector pushes its later agent build: an agent that dials in and a dialled one "
          "restart into it and come back with the new version",
          "[collector][integration][update]") {
    const std::string code = "00112233445566778899aabbccddeeff";
    // The call lasts the push: the sanitizer build of the agent is tens of MB, sent piece by
    // piece, hashed and run by the agent before it answers (each step under its own deadline).
    constexpr auto push_bound = std::chrono::milliseconds(180s);
    temp_dir dir;
    const fs::path dist = dir.path / "dist", bin = dir.path / "bin";
    fs::create_directories(dist);
    fs::create_directories(bin);
    const fs::path offered = dist / "perfwire-agent-linux-x86_64";
    fs::copy_file(PERFWIRE_AGENT_NEXT_BIN, offered);
    const std::string next = test_support::file_bytes(offered);
    std::ofstream(offered.string() + ".sha256")
        << protocol::sha256_hex(next) << "  perfwire-agent-linux-x86_64\n";
    std::ofstream(offered.string() + ".version") << PERFWIRE_VERSION ".1\n";
    // The Python agent's later build: its script with a later version.
    std::string script = test_support::file_bytes(PERFWIRE_PYTHON_AGENT);
    const std::string version_line = "VERSION = \"" PERFWIRE_VERSION "\"";
    REQUIRE(script.find(version_line) != std::string::npos);
    script.replace(script.find(version_line), version_line.size(),
                   "VERSION = \"" PERFWIRE_VERSION ".1\"");
    std::ofstream(dist / "perfwire-agent-linux-python", std::ios::binary) << script;
    std::ofstream(dist / "perfwire-agent-linux-python.sha256")
        << protocol::sha256_hex(script) << "  perfwire-agent-linux-python\n";
    std::ofstream(dist / "perfwire-agent-linux-python.version") << PERFWIRE_VERSION ".1\n";
    const fs::path exe = bin / "perfwire-agent", listening_exe = bin / "perfwire-agent-listen";
    fs::copy_file(PERFWIRE_AGENT_BIN, exe);
    fs::copy_file(PERFWIRE_AGENT_BIN, listening_exe);
    // The collector signs updates with its private key; each agent was given the public half.
    const auto key_file = (dir.path / "update.key").string();
    const std::string pubkey =
        std::get<protocol::tls::signing_key>(protocol::tls::load_signing_key(key_file, true))
            .public_key;

    // Without a key of its own, the collector sends nothing and says why.
    {
        collector_proc unkeyed(dir.path / "unkeyed",
                               {"--token", code, "--agents-dir", dist.string()});
        spawned keyed(exe.string(), {"--server", "127.0.0.1:" + std::to_string(unkeyed.agent_port),
                                     "--token", code, "--update-pubkey", pubkey});
        const auto listed = one_target(unkeyed, "idle", 10s);
        CHECK_THAT(std::string(listed.at("update_blocked").as_string()),
                   Catch::Contains("--agent-update-key"));
        const auto refused =
            http_call(unkeyed.http_port, "POST",
                      "/api/targets/" + std::string(listed.at("id").as_string()) + "/update", "{}");
        CHECK(refused.status == 409);
        CHECK_THAT(refused.body, Catch::Contains("--agent-update-key"));
    }

    collector_proc coll(dir.path / "sessions", {"--token", code, "--agents-dir", dist.string(),
                                                "--agent-update-key", key_file});
    // An agent given no key is offered no button, and says why.
    {
        spawned keyless(exe.string(), {"--server", "127.0.0.1:" + std::to_string(coll.agent_port),
                                       "--token", code});
        const auto listed = one_target(coll, "idle", 10s);
        CHECK_THAT(std::string(listed.at("update_blocked").as_string()),
                   Catch::Contains("--update-pubkey"));
        CHECK(http_call(coll.http_port, "POST",
                        "/api/targets/" + std::string(listed.at("id").as_string()) + "/update",
                        "{}")
                  .status == 409);
    }
    CHECK(wait_for(coll, "/api/targets", 10s,
                   [](const json::value& v) { return v.as_array().empty(); })
              .as_array()
              .empty());
    spawned agent(exe.string(), {"--server", "127.0.0.1:" + std::to_string(coll.agent_port),
                                 "--token", code, "--update-pubkey", pubkey});
    auto targets = wait_for(coll, "/api/targets", 10s, [](const json::value& v) {
        return v.as_array().size() == 1 && v.as_array()[0].at("state").as_string() == "idle";
    });
    REQUIRE(targets.as_array().size() == 1);
    const auto& first = targets.as_array()[0].as_object();
    CHECK(first.at("agent_version").as_string() == PERFWIRE_VERSION);
    CHECK(first.at("update").as_string() == PERFWIRE_VERSION ".1");
    CHECK(first.at("update_blocked").is_null());
    const std::string id(first.at("id").as_string());

    // Updates go only this way, with the collector's own build: never relayed from a request.
    CHECK(http_call(coll.http_port, "POST", "/api/targets/" + id + "/command",
                    R"({"cmd":"update_data","args":{"offset":0,"data":"AAAA"}})")
              .status == 400);
    const auto updated =
        http_call(coll.http_port, "POST", "/api/targets/" + id + "/update", "{}", {}, push_bound);
    INFO(updated.body << "\n" << agent.stderr_text() << "\n" << coll.proc->stderr_text());
    REQUIRE(updated.status == 200);
    const auto answer = json::parse(updated.body);
    CHECK(answer.at("from").as_string() == PERFWIRE_VERSION);
    CHECK(answer.at("version").as_string() == PERFWIRE_VERSION ".1");
    // The agent restarts into the new build in the same process and dials in again.
    targets = wait_for(coll, "/api/targets", 20s, [](const json::value& v) {
        return v.as_array().size() == 1 &&
               v.as_array()[0].at("agent_version").as_string() == PERFWIRE_VERSION ".1";
    });
    REQUIRE(targets.as_array().size() == 1);
    CHECK(targets.as_array()[0].at("update").is_null());
    CHECK(targets.as_array()[0].at("updating").is_null()); // no push under way
    CHECK_FALSE(agent.wait(0ms));
    // Nothing later to offer now.
    CHECK(http_call(coll.http_port, "POST",
                    "/api/targets/" + std::string(targets.as_array()[0].at("id").as_string()) +
                        "/update",
                    "{}")
              .status == 409);

    // A listening agent: the collector dials it again once it has restarted.
    // (On a fixed port, as a device's agent is: one restarted on port 0 would take another.)
    std::uint16_t fixed_port = 0;
    {
        test_support::listener free_port;
        fixed_port = free_port.port();
    }
    spawned listening(listening_exe.string(),
                      {"--listen", "--bind", "127.0.0.1", "--port", std::to_string(fixed_port),
                       "--token", code, "--update-pubkey", pubkey});
    const auto port = listening.wait_for_stderr("listening on 127.0.0.1:", 5s);
    REQUIRE(port);
    const auto dialled = http_call(coll.http_port, "POST", "/api/targets/connect",
                                   R"({"host":"127.0.0.1","port":)" + *port + "}");
    REQUIRE(dialled.status == 200);
    const std::string dialled_id(json::parse(dialled.body).at("id").as_string());
    const auto again = http_call(coll.http_port, "POST", "/api/targets/" + dialled_id + "/update",
                                 "{}", {}, push_bound);
    INFO(again.body << "\n" << listening.stderr_text());
    REQUIRE(again.status == 200);
    const std::string new_id(json::parse(again.body).at("id").as_string());
    CHECK(new_id != dialled_id);
    CHECK_FALSE(json::parse(again.body).as_object().contains("error"));
    const auto back = coll.get("/api/targets");
    bool found = false;
    for (const auto& t : back.as_array())
        if (t.at("id").as_string() == new_id)
            found = t.at("agent_version").as_string() == PERFWIRE_VERSION ".1";
    CHECK(found);
    CHECK_FALSE(listening.wait(0ms));

    // The Python agent takes the collector's later script the same way.
    const fs::path py_exe = bin / "perfwire_agent.py";
    fs::copy_file(PERFWIRE_PYTHON_AGENT, py_exe);
    spawned py(PERFWIRE_PYTHON,
               {py_exe.string(), "--server", "127.0.0.1:" + std::to_string(coll.agent_port),
                "--token", code, "--update-pubkey", pubkey});
    auto py_target = [&](const json::value& v) -> const json::value* {
        for (const auto& t : v.as_array())
            if (t.at("update").is_string() && t.at("update").as_string() == PERFWIRE_VERSION ".1" &&
                t.at("state").as_string() == "idle")
                return &t;
        return nullptr;
    };
    const auto listed = wait_for(coll, "/api/targets", 15s,
                                 [&](const json::value& v) { return py_target(v) != nullptr; });
    REQUIRE(py_target(listed));
    const std::string py_id(py_target(listed)->at("id").as_string());
    const auto py_updated = http_call(coll.http_port, "POST", "/api/targets/" + py_id + "/update",
                                      "{}", {}, push_bound);
    INFO(py_updated.body << "\n" << py.stderr_text());
    REQUIRE(py_updated.status == 200);
    CHECK(test_support::file_bytes(py_exe) == script);
    auto on_new_version = [](const json::value& v) {
        int n = 0;
        for (const auto& t : v.as_array())
            n += t.at("agent_version").as_string() == PERFWIRE_VERSION ".1";
        return n;
    };
    // All three agents now run the later build.
    CHECK(on_new_version(wait_for(coll, "/api/targets", 20s, [&](const json::value& v) {
              return on_new_version(v) == 3;
          })) == 3);
    CHECK_FALSE(py.wait(0ms));
}
