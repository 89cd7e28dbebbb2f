// Attacks on the collector as a hostile device, a hostile local user and a full disk make
// them, against the real collector on loopback: each test reproduces one attack and asserts
// the bound that now holds (docs/security.md lists them).
#include "collector/fleet/backlog.hpp"
#include "collector/fleet/clickhouse.hpp"
#include "collector/model/profile.hpp"
#include "collector/symbols/subprocess.hpp"
#include "protocol/build_id.hpp"
#include "protocol/compression.hpp"
#include "protocol/frame.hpp"
#include "support/agents.hpp"
#include "support/clickhouse_proc.hpp"
#include "support/collector_proc.hpp"
#include "support/event_stream.hpp"
#include "support/fixtures.hpp"
#include "support/framing_peer.hpp"
#include "support/http_client.hpp"
#include "support/proc_status.hpp"
#include "support/spawn.hpp"

#include <catch2/catch.hpp>

#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <poll.h>
#include <sstream>
#include <thread>
#include <unistd.h>

using namespace std::chrono_literals;
namespace fs = std::filesystem;
namespace json = boost::json;
using test_support::collector_proc;
using test_support::http_call;
using test_support::session_folders;
using test_support::spawned;
using test_support::start_demo;
using test_support::temp_dir;
using test_support::wait_for;

namespace {

// Sends chunk(1) … chunk(chunks) from `agent` and waits until its session holds them all:
// that session's id.
template <class Chunk>
std::string stream_chunks(collector_proc& coll, test_support::framing_peer& agent, int chunks,
                          Chunk chunk, std::chrono::seconds within) {
    for (int n = 1; n <= chunks; ++n)
        agent.send(protocol::frame_flag::zstd, protocol::compress(chunk(n)));
    const auto sessions = wait_for(coll, "/api/sessions", within, [&](const json::value& v) {
        return v.as_array().size() == 1 && v.at(0).at("chunks").to_number<int>() == chunks;
    });
    REQUIRE(sessions.as_array().size() == 1);
    return std::string(sessions.at(0).at("id").as_string());
}

} // namespace

TEST_CASE("hostile agents: an oversized frame before the hello, a zstd bomb, forged metrics",
          "[collector][integration][attack]") {
    temp_dir dir;
    collector_proc coll(dir.path);

    // A browser on the event stream, read raw for what reaches it.
    const int browser = test_support::open_event_stream(coll);

    // Before the hello a frame may be no larger than a hello: a header declaring 1 MiB closes
    // the connection at once, before any of it is sent.
    auto big = test_support::framing_peer::connect(coll.agent_port);
    REQUIRE(big);
    const auto declared = std::chrono::steady_clock::now();
    big->send_raw(std::string("\x00\x10\x00\x00\x03", 5));
    CHECK_FALSE(big->next(5s));
    CHECK(big->closed());
    CHECK(std::chrono::steady_clock::now() - declared < 3s); // not the 10 s hello deadline

    auto agent = test_support::hello_agent(coll, "bomb");
    // 1 GiB of zeros in a 32 KiB frame: stopped as it expands past a chunk's size.
    protocol::zstd_compressor z;
    const std::string zeros(std::size_t{1} << 20, '\0');
    for (int i = 0; i < 1024; ++i)
        z.write(zeros);
    const std::string bomb = z.finish();
    REQUIRE(bomb.size() < (std::size_t{64} << 10));
    agent->send(protocol::frame_flag::zstd, bomb);
    // Metrics that try to forge another event, and metrics that are not JSON.
    agent->send(protocol::frame_flag::metrics,
                R"({"type":"process","ts":1,"pid":7,"comm":"x\n\nevent: targets\ndata: []",)"
                R"("state":"R","cpu_pct":1,"rss_kb":1,"vsize_kb":1,"threads":1,"fds":1,)"
                R"("voluntary_csw":1,"involuntary_csw":1,"minor_faults":1,"major_faults":1,)"
                R"("oom_score":0,"forged":"\n\nevent: targets\ndata: []"})");
    agent->send(protocol::frame_flag::metrics, "{not json\n\nevent: targets\ndata: []");
    agent->send(protocol::frame_flag::text, "app 7/7 1.000000: 1 cpu-clock:\n\t1 f (/x)\n\n");

    const auto sessions = wait_for(coll, "/api/sessions", 20s, [](const json::value& v) {
        return v.as_array().size() == 1 && v.as_array()[0].at("samples").to_number<int>() == 1;
    });
    REQUIRE(sessions.as_array().size() == 1);
    const std::string id(sessions.as_array()[0].at("id").as_string());
    const auto meta = coll.get("/api/sessions/" + id);
    CHECK(meta.at("bad_chunks").to_number<int>() == 1);
    // The bomb never expanded far: the collector stayed small.
    const long hwm_kb = test_support::status_kb(coll.proc->pid(), "VmHWM:");
    CHECK(hwm_kb > 0);
#if defined(__SANITIZE_ADDRESS__)
    // AddressSanitizer's quarantine keeps freed buffers resident: a looser bound, still far
    // below the gigabyte the bomb expanded to before.
    CHECK(hwm_kb < 768 * 1024);
#else
    CHECK(hwm_kb < 256 * 1024);
#endif

    // What reached the browser: the metrics as known fields only, one "data:" line each; no
    // forged event, nothing from the frame that is not JSON.
    std::string seen;
    test_support::read_stream(browser, seen, 3s, [](const std::string& raw) {
        return raw.find("event: metrics") != std::string::npos &&
               raw.find("\n\n", raw.find("event: metrics")) != std::string::npos;
    });
    ::close(browser);
    INFO(seen);
    const auto at = seen.find("event: metrics\n");
    REQUIRE(at != std::string::npos);
    const auto event = seen.substr(at, seen.find("\n\n", at) - at);
    CHECK(event.find("forged") == std::string::npos);
    CHECK(event.find("\ndata: ") != std::string::npos);
    CHECK(event.find("\nevent:") == std::string::npos);
    CHECK(seen.find("{not json") == std::string::npos);
    std::size_t targets_events = 0;
    for (auto p = seen.find("event: targets\n"); p != std::string::npos;
         p = seen.find("event: targets\n", p + 1))
        ++targets_events;
    CHECK(targets_events >= 1); // the real ones: on connect and for the agent
    CHECK(seen.find("data: []}") == std::string::npos); // no event forged from the bad frame
}

TEST_CASE("a full disk: chunks stay in the live view, the session says what is not on disk",
          "[collector][integration][store][attack]") {
    REQUIRE(fs::exists("/dev/full")); // writes to it fail with ENOSPC, like a full disk
    temp_dir dir;
    collector_proc coll(dir.path);
    auto agent = test_support::hello_agent(coll, "device");
    const std::string chunk = test_support::fixture("collector/fixtures/callchain_fields.txt");
    agent->send(protocol::frame_flag::text, chunk);
    const auto first = wait_for(coll, "/api/sessions", 10s, [](const json::value& v) {
        return v.as_array().size() == 1 && v.at(0).at("samples").to_number<std::uint64_t>() > 0;
    });
    REQUIRE(first.as_array().size() == 1);
    const std::string id(first.at(0).at("id").as_string());
    const auto per_chunk = first.at(0).at("samples").to_number<std::uint64_t>();
    const fs::path chunks = dir.path / id / "chunks";
    REQUIRE(fs::exists(chunks / "000001.txt"));

    // The next chunk's file is written through a link to /dev/full: a real ENOSPC.
    fs::create_symlink("/dev/full", chunks / "000002.txt.tmp");
    agent->send(protocol::frame_flag::text, chunk);
    auto meta = wait_for(coll, "/api/sessions/" + id, 10s, [](const json::value& v) {
        return v.at("unsaved_chunks").to_number<std::uint64_t>() == 1;
    });
    CHECK(meta.at("unsaved_chunks").to_number<std::uint64_t>() == 1);
    CHECK_THAT(std::string(meta.at("store_error").as_string()), Catch::Contains("No space"));
    CHECK(meta.at("live").as_bool());
    CHECK(meta.at("samples").to_number<std::uint64_t>() == 2 * per_chunk); // still shown
    CHECK_FALSE(fs::exists(chunks / "000002.txt.tmp"));                    // nothing half-written
    CHECK_THAT(coll.proc->stderr_text(), Catch::Contains("cannot store chunk"));

    CHECK(meta.at("unsaved_samples").to_number<std::uint64_t>() == per_chunk);

    // Room again: the kept chunk is written first, then the new one; nothing is missing.
    agent->send(protocol::frame_flag::text, chunk);
    meta = wait_for(coll, "/api/sessions/" + id, 10s, [&](const json::value& v) {
        return v.at("samples").to_number<std::uint64_t>() == 3 * per_chunk &&
               v.at("unsaved_chunks").to_number<std::uint64_t>() == 0;
    });
    CHECK(meta.at("unsaved_chunks").to_number<std::uint64_t>() == 0);
    CHECK(fs::exists(chunks / "000002.txt"));
    CHECK(fs::exists(chunks / "000003.txt"));
    CHECK_THAT(coll.proc->stderr_text(), Catch::Contains("kept in memory are on disk now"));

    // Full again, and the collector is killed before there is room: after a restart the list
    // and the view agree on what the recording holds, and both say what it lacks.
    fs::create_symlink("/dev/full", chunks / "000004.txt.tmp");
    agent->send(protocol::frame_flag::text, chunk);
    wait_for(coll, "/api/sessions/" + id, 10s, [](const json::value& v) {
        return v.at("unsaved_chunks").to_number<std::uint64_t>() == 1;
    });
    coll.proc->signal(SIGKILL);
    coll.proc->wait(5s);
    agent.reset();
    collector_proc again(dir.path);
    const auto listed = again.get("/api/sessions");
    REQUIRE(listed.as_array().size() == 1);
    const auto& entry = listed.at(0).as_object();
    const auto detail = again.get("/api/sessions/" + id);
    INFO(json::serialize(entry) << "\n" << json::serialize(detail));
    CHECK_FALSE(entry.at("live").as_bool());
    CHECK_FALSE(detail.at("live").as_bool());
    CHECK(detail.at("samples").to_number<std::uint64_t>() == 3 * per_chunk); // replayed
    CHECK(entry.at("unsaved_chunks").to_number<std::uint64_t>() == 1);
    CHECK(detail.at("unsaved_chunks").to_number<std::uint64_t>() == 1);
    CHECK(detail.at("unsaved_samples").to_number<std::uint64_t>() == per_chunk);
    CHECK_THAT(std::string(detail.at("store_error").as_string()), Catch::Contains("No space"));
    CHECK(http_call(again.http_port, "GET", "/api/sessions/" + id + "/functions").status == 200);
}

TEST_CASE("the API asks for the collector's access token — the printed link signs a browser in",
          "[collector][integration][attack]") {
    temp_dir dir;
    const auto sessions = dir.path / "sessions";
    std::string token;
    {
        collector_proc coll(sessions);
        token = test_support::api_token(coll.http_port);
        REQUIRE(token.size() == 32);
        // Kept where the log says, readable by the owner only.
        const auto file = sessions / ".http-token";
        CHECK((fs::status(file).permissions() & fs::perms::all) ==
              (fs::perms::owner_read | fs::perms::owner_write));
        std::ifstream in(file);
        std::string kept;
        in >> kept;
        CHECK(kept == token);
        CHECK_THAT(coll.proc->stderr_text(), Catch::Contains(file.string()));

        const std::vector<std::string> none{"Cookie: unrelated=1"}; // no credentials
        for (const auto& [method, target] :
             std::vector<std::pair<std::string, std::string>>{{"GET", "/api/sessions"},
                                                              {"GET", "/api/stream"},
                                                              {"GET", "/api/config"},
                                                              {"PUT", "/api/config"},
                                                              {"POST", "/api/targets/connect"},
                                                              {"POST", "/api/sessions/import"}}) {
            INFO(method << " " << target);
            const auto r = http_call(coll.http_port, method, target, "{}", none);
            CHECK(r.status == 401);
            CHECK_THAT(r.headers, Catch::Contains("WWW-Authenticate: Bearer"));
            CHECK(r.body.find(token) == std::string::npos);
        }
        CHECK(http_call(coll.http_port, "GET", "/api/sessions", {},
                        {"Authorization: Bearer ffffffffffffffffffffffffffffffff"})
                  .status == 401);
        CHECK(http_call(coll.http_port, "GET", "/api/sessions").status == 200); // Bearer
        CHECK(http_call(coll.http_port, "GET", "/api/sessions", {},
                        {"Cookie: " + collector::token_cookie(token) + "=" + token})
                  .status == 200);
        // The UI shell itself needs nothing: it asks for the token.
        const auto shell = http_call(coll.http_port, "GET", "/", {}, none);
        CHECK(shell.status == 200);
        CHECK_THAT(shell.body, Catch::Contains("<title>perfwire</title>"));

        // The printed link signs one browser in: a cookie, then the UI at "/". The link is
        // then spent, and the next one printed (the suite's own sign-in spent the first), so
        // one left in a browser's history signs nobody in. Never a redirect elsewhere; a wrong
        // code, or the token itself in the address, gets nothing.
        const auto newest_code = [&](std::size_t uses) {
            const std::string next =
                "the next one: http://127.0.0.1:" + std::to_string(coll.http_port) + "/?code=";
            std::string log;
            for (int i = 0; i < 50; ++i) {
                log = coll.proc->stderr_text();
                std::size_t seen = 0;
                for (auto at = log.find(next); at != std::string::npos; at = log.find(next, at + 1))
                    ++seen;
                if (seen >= uses)
                    break;
                std::this_thread::sleep_for(100ms);
            }
            const auto at = log.rfind(next);
            REQUIRE(at != std::string::npos);
            return log.substr(at + next.size(), log.find('\n', at) - at - next.size());
        };
        const auto code = newest_code(1);
        const auto link = http_call(coll.http_port, "GET", "/?code=" + code, {}, none);
        CHECK(link.status == 303);
        CHECK_THAT(link.headers,
                   Catch::Contains("Set-Cookie: " + collector::token_cookie(token) + "=" + token +
                                   "; Path=/; HttpOnly; SameSite=Strict"));
        CHECK_THAT(link.headers,
                   Catch::Contains("Location: /\r") || Catch::EndsWith("Location: /"));
        const auto again = http_call(coll.http_port, "GET", "/?code=" + code, {}, none);
        CHECK(again.status == 401);
        CHECK_THAT(again.headers, !Catch::Contains("Set-Cookie"));
        const auto next = newest_code(2);
        CHECK(next != code);
        const auto elsewhere =
            http_call(coll.http_port, "GET", "//evil.example/?code=" + next, {}, none);
        CHECK_THAT(elsewhere.headers, !Catch::Contains("evil.example"));
        for (const std::string& bad : {std::string("/?code=nope"), "/?token=" + token}) {
            const auto wrong = http_call(coll.http_port, "GET", bad, {}, none);
            CHECK_THAT(wrong.headers, !Catch::Contains("Set-Cookie"));
        }
        // The UI's sign-in form: the token in a POST body, never in an address.
        const auto form = http_call(coll.http_port, "POST", "/api/sign-in",
                                    R"({"token":")" + token + R"("})", none);
        CHECK(form.status == 204);
        CHECK_THAT(form.headers, Catch::Contains("Set-Cookie: " + collector::token_cookie(token) +
                                                 "=" + token + ";"));
        const auto guess = http_call(coll.http_port, "POST", "/api/sign-in",
                                     R"({"token":"ffffffffffffffffffffffff"})", none);
        CHECK(guess.status == 401);
        CHECK_THAT(guess.headers, !Catch::Contains("Set-Cookie"));
        const auto cross_site =
            http_call(coll.http_port, "POST", "/api/sign-in", R"({"token":")" + token + R"("})",
                      {"Cookie: unrelated=1", "Origin: http://evil.example"});
        CHECK(cross_site.status == 403);
        CHECK_THAT(cross_site.headers, !Catch::Contains("Set-Cookie"));
        CHECK(coll.proc->stderr_text().find(token) == std::string::npos); // never printed
    }
    {
        collector_proc again(sessions); // the same token after a restart: cookies keep working
        CHECK(test_support::api_token(again.http_port) == token);
    }
    {
        spawned open_box(PERFWIRE_COLLECTOR_BIN,
                         {"--sessions-dir", sessions.string(), "--agent-port", "0", "--agent-bind",
                          "127.0.0.1", "--http-port", "0", "--http-auth", "none"});
        const auto port = open_box.wait_for_stderr("API on http://127.0.0.1:", 5s);
        REQUIRE(port);
        const auto http = test_support::api_port(*port);
        CHECK(test_support::api_token(http).empty());
        CHECK(open_box.wait_for_stderr("warning: --http-auth none", 5s));
        CHECK(http_call(http, "GET", "/api/sessions").status == 200);
    }
    spawned short_token(PERFWIRE_COLLECTOR_BIN,
                        {"--sessions-dir", sessions.string(), "--http-token", "0123456789abcde"});
    CHECK(short_token.wait(5s) == 2);
    fs::permissions(sessions / ".http-token", fs::perms::others_read, fs::perm_options::add);
    spawned exposed(PERFWIRE_COLLECTOR_BIN,
                    {"--sessions-dir", sessions.string(), "--agent-port", "0", "--http-port", "0"});
    CHECK(exposed.wait(5s) == 1);
    CHECK_THAT(exposed.stderr_text(), Catch::Contains("readable by others"));
}

TEST_CASE("agents enroll before anything is stored — several tokens rotate, a token's label "
          "names its devices",
          "[collector][integration][perf][attack]") {
    const auto flavour = test_support::each_agent();
    INFO(flavour);
    temp_dir dir;
    const std::string old_token = "old-token-0123456789abcdef",
                      new_token = "new-token-fedcba9876543210";
    collector_proc coll(dir.path,
                        {"--agent-token", old_token, "--agent-token", new_token + ":lab-a"});
    CHECK(coll.proc->wait_for_stderr("agents enroll before anything is stored", 5s));
    auto demo = start_demo(120);
    auto agent_with = [&](const std::string& enroll) {
        std::vector<std::string> env;
        if (!enroll.empty())
            env.push_back("PERFWIRE_ENROLL_TOKEN=" + enroll);
        return test_support::start_agent(flavour,
                                         {"--server",
                                          "127.0.0.1:" + std::to_string(coll.agent_port), "--pid",
                                          std::to_string(demo->pid()), "--duration", "1"},
                                         env);
    };
    {
        auto stranger = agent_with("");
        auto wrong = agent_with("wrong-token-0123456789abcdef");
        CHECK(coll.proc->wait_for_stderr("agent not enrolled", 15s));
        CHECK(coll.proc->wait_for_stderr("wrong enrollment token", 15s));
        CHECK(coll.get("/api/targets").as_array().empty());
    }
    CHECK(session_folders(dir.path) == 0); // nothing stored for either
    auto enrolled = agent_with(new_token);
    const auto sessions = wait_for(coll, "/api/sessions", 20s, [](const json::value& v) {
        return v.as_array().size() == 1 &&
               v.as_array()[0].at("samples").to_number<std::uint64_t>() > 20;
    });
    REQUIRE(sessions.as_array().size() == 1);
    // The label of the token it presented is kept with the session (the fleet store's device
    // is "lab-a/HOSTNAME").
    const auto id = std::string(sessions.as_array()[0].at("id").as_string());
    const auto meta = json::parse(test_support::file_bytes(dir.path / id / "meta.json"));
    CHECK(meta.at("enrolled_as") == "lab-a");
    CHECK(collector::fleet_device(meta.as_object(), "perfwire") ==
          "lab-a/" + std::string(meta.at("hostname").as_string()));
    // An agent of an unlabelled token cannot name itself into lab-a's devices.
    CHECK(collector::fleet_device({{"hostname", "lab-a/board-17"}}, "perfwire") ==
          "lab-a_board-17");
    CHECK(collector::fleet_device({{"hostname", ""}}, "perfwire") == "perfwire");
    enrolled.reset(); // SIGKILL: the session stays, as received
    // The token is never logged or written.
    CHECK(coll.proc->stderr_text().find(new_token) == std::string::npos);
    for (const auto& e : fs::recursive_directory_iterator(dir.path))
        if (e.is_regular_file()) {
            const std::string text = test_support::file_bytes(e.path());
            CHECK(text.find(new_token) == std::string::npos);
        }
}

TEST_CASE("a flood of agents that say hello and leave stores nothing, and is rate-limited — an "
          "enrolled lab behind one address is admitted at once",
          "[collector][integration][attack]") {
    temp_dir dir;
    collector_proc coll(dir.path, {"--agent-auth", "token"});
    // With no --agent-token, a random one is made and kept beside the sessions.
    const auto token_file = dir.path / ".agent-token";
    REQUIRE(fs::exists(token_file));
    CHECK_THAT(coll.proc->stderr_text(), Catch::Contains(token_file.string()));
    std::string token;
    std::ifstream(token_file) >> token;
    const std::string hello =
        R"({"type":"hello","version":1,"agent":"perfwire","hostname":"flood","enrollment":")" +
        token + R"("})";

    // A protocol version the collector does not speak is refused with a clear reason.
    {
        auto v2 = test_support::framing_peer::connect(coll.agent_port);
        REQUIRE(v2);
        v2->send(protocol::frame_flag::response,
                 R"({"type":"hello","version":2,"agent":"perfwire","enrollment":")" + token +
                     R"("})");
        CHECK_FALSE(v2->next(3s));
        CHECK(v2->closed());
        CHECK(coll.proc->wait_for_stderr("the agent speaks protocol version 2", 5s));
    }
    // An enrolled agent that sends only metrics, no run: nothing is stored, nothing listed.
    {
        auto idle = test_support::framing_peer::connect(coll.agent_port);
        REQUIRE(idle);
        idle->send(protocol::frame_flag::response, hello);
        idle->send(protocol::frame_flag::metrics,
                   R"({"type":"system","ts":1.5,"cpu_pct":10,"mem_total_kb":1000,)"
                   R"("mem_available_kb":500,"load1":0.5})");
        // A notice after the metrics on the same connection: once its pid shows, the metrics
        // frame before it has been handled.
        idle->send(protocol::frame_flag::response, R"({"type":"state","state":"idle","pid":4242})");
        const auto targets = wait_for(coll, "/api/targets", 10s, [](const json::value& v) {
            return v.as_array().size() == 1 && v.as_array()[0].at("pid").is_int64() &&
                   v.as_array()[0].at("pid").as_int64() == 4242;
        });
        REQUIRE(targets.as_array().size() == 1);
        CHECK(targets.as_array()[0].at("session_id").is_null());
        CHECK(session_folders(dir.path) == 0);
        CHECK(coll.get("/api/sessions").as_array().empty());
    }

    // A lab behind one address (one NAT) reconnecting at once: 60 enrolled boards are all
    // admitted without waiting for the address's limit (20 at once, then 2 a second).
    std::vector<test_support::framing_peer> lab;
    for (int i = 0; i < 60; ++i)
        lab.push_back(
            std::move(*test_support::enrolled_agent(coll, "board-" + std::to_string(i), token)));
    const auto all = wait_for(coll, "/api/targets", 8s,
                              [](const json::value& v) { return v.as_array().size() == 60; });
    CHECK(all.as_array().size() == 60);
    CHECK(coll.proc->wait_for_stderr("only agents with a valid enrollment token are admitted", 5s));
    // Past the limit, strangers from that address are closed, without a line each (those the
    // address's bucket has refilled for meanwhile, 2 a second, are told why).
    for (int i = 0; i < 30; ++i) {
        auto p = test_support::framing_peer::connect(coll.agent_port);
        if (!p)
            continue;
        p->send(protocol::frame_flag::response,
                R"({"type":"hello","version":1,"agent":"perfwire","hostname":"stranger"})");
        CHECK_FALSE(p->next(5s));
        CHECK(p->closed());
    }
    const auto told = [&] {
        const auto text = coll.proc->stderr_text();
        std::size_t n = 0;
        for (auto at = text.find("agent not enrolled"); at != std::string::npos;
             at = text.find("agent not enrolled", at + 1))
            ++n;
        return n;
    }();
    CHECK(told < 15);
    lab.clear();

    // 200 connect + hello + close in a row by an enrolled agent: no folder at all, and the log
    // stays short (lines of one kind are rate-limited).
    for (int i = 0; i < 200; ++i) {
        auto p = test_support::framing_peer::connect(coll.agent_port);
        if (p)
            p->send(protocol::frame_flag::response, hello);
    }
    wait_for(coll, "/api/targets", 10s,
             [](const json::value& v) { return v.as_array().size() <= 1; });
    CHECK(session_folders(dir.path) == 0);
    CHECK(coll.get("/api/sessions").as_array().empty());
    const auto log = coll.proc->stderr_text();
    // (60 boards and 200 floods each connect, say hello and leave: 780 events.)
    CHECK(std::count(log.begin(), log.end(), '\n') < 400);
}

TEST_CASE("an agent that sends faster than the collector digests is slowed by TCP, not buffered",
          "[collector][integration][attack][long]") {
    temp_dir dir;
    collector_proc coll(dir.path);
    auto agent = test_support::hello_agent(coll, "firehose");
    // 20 text frames of 64 MiB (1.25 GiB), sent as fast as loopback takes them: each is stored
    // (fsync) and read through before much more is taken off the socket.
    std::string frame;
    const std::string line = "# a comment line that perf script could have printed\n";
    while (frame.size() + line.size() < (std::size_t{64} << 20))
        frame += line;
    const auto started = std::chrono::steady_clock::now();
    for (int i = 0; i < 20; ++i)
        agent->send(protocol::frame_flag::text, frame);
    const auto sessions = wait_for(coll, "/api/sessions", 60s, [](const json::value& v) {
        return v.as_array().size() == 1 && v.as_array()[0].at("chunks").to_number<int>() == 20;
    });
    REQUIRE(sessions.as_array().size() == 1);
    INFO("sent and digested in "
         << std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count()
         << " s");
    const long hwm_kb = test_support::status_kb(coll.proc->pid(), "VmHWM:");
    INFO("peak RSS " << hwm_kb / 1024 << " MiB");
    CHECK(hwm_kb > 0);
#if defined(__SANITIZE_ADDRESS__)
    CHECK(hwm_kb < 1536 * 1024);
#else
    // A frame being read, one being digested, the limit: not the gigabyte sent.
    CHECK(hwm_kb < 320 * 1024);
#endif
}

TEST_CASE("an agent streaming junk or more than the disk budget fills no disk: what is not "
          "stored is counted, and the session says why",
          "[collector][integration][store][attack]") {
    const auto folder_bytes = [](const fs::path& dir) {
        std::uintmax_t n = 0;
        for (const auto& e : fs::recursive_directory_iterator(dir))
            if (e.is_regular_file())
                n += e.file_size();
        return n;
    };
    temp_dir dir;
    collector_proc coll(dir.path, {"--disk-budget", "6"});
    // Lines perf never printed, 1 MB a chunk: past 4 MB of them, no longer stored.
    auto junk = test_support::hello_agent(coll, "junk");
    std::string garbage;
    while (garbage.size() < (1 << 20))
        garbage += "lines perf never printed, sent at link speed\n";
    for (int i = 0; i < 12; ++i)
        junk->send(protocol::frame_flag::text, garbage);
    const auto listed = wait_for(coll, "/api/sessions", 30s,
                                 [](const json::value& v) { return v.as_array().size() == 1; });
    const std::string junk_id(listed.at(0).at("id").as_string());
    const auto detail = wait_for(coll, "/api/sessions/" + junk_id, 30s, [](const json::value& v) {
        return v.at("chunks").to_number<int>() == 12;
    });
    INFO(json::serialize(detail));
    CHECK(detail.at("refused_chunks").to_number<int>() == 8);
    CHECK(detail.at("refused_bytes").to_number<std::uint64_t>() >= 8u << 20);
    CHECK(folder_bytes(dir.path / junk_id / "chunks") <= (std::uintmax_t{4} << 20) + (64 << 10));
    CHECK_THAT(coll.proc->stderr_text(), Catch::Contains("brought no sample past 4 MB"));

    // Samples, 1 MB a chunk, past the 6 MB the folder may hold: kept in memory, the reason said.
    auto big = test_support::hello_agent(coll, "big");
    std::string samples;
    std::uint64_t per_chunk = 0;
    for (; samples.size() < 1'000'000; ++per_chunk) // (two fit in what is left)
        samples += "app 7/7 1." + std::to_string(100000 + per_chunk) +
                   ": 1000 cpu-clock:\n\t 1 f+0x1 (/x)\n\t 1 main+0x2 (/x)\n\n";
    for (int i = 0; i < 5; ++i)
        big->send(protocol::frame_flag::text, samples);
    const auto sessions = wait_for(coll, "/api/sessions", 30s,
                                   [](const json::value& v) { return v.as_array().size() == 2; });
    std::string big_id;
    for (const auto& s : sessions.as_array())
        if (s.at("id").as_string() != junk_id)
            big_id = s.at("id").as_string();
    const auto full = wait_for(coll, "/api/sessions/" + big_id, 30s, [](const json::value& v) {
        return v.at("chunks").to_number<int>() == 5;
    });
    INFO(json::serialize(full));
    CHECK(full.at("unsaved_chunks").to_number<int>() == 3); // 2 MB were left of the 6
    CHECK(full.at("samples").to_number<std::uint64_t>() == 5 * per_chunk);
    CHECK_THAT(std::string(full.at("store_error").as_string()), Catch::Contains("--disk-budget"));
    const auto status = coll.get("/api/status");
    CHECK(status.at("disk").at("budget").to_number<std::uint64_t>() == 6u << 20);
    CHECK(status.at("disk").at("used").to_number<std::uint64_t>() <= 6u << 20);
    CHECK(folder_bytes(dir.path) <= (std::uintmax_t{6} << 20) + (256 << 10));
}

TEST_CASE("a sessions folder that cannot be written is an error at start",
          "[collector][integration][store][attack]") {
    spawned bad(PERFWIRE_COLLECTOR_BIN, {"--sessions-dir", "/proc/forbidden", "--agent-port", "0",
                                         "--agent-bind", "127.0.0.1", "--http-port", "0"});
    CHECK(bad.wait(5s) == 1);
    CHECK_THAT(bad.stderr_text(),
               Catch::Contains("cannot write to --sessions-dir /proc/forbidden"));
}

TEST_CASE("a live session past its memory allowance keeps updating: its oldest samples are "
          "folded, every count and view stays whole",
          "[collector][integration][attack][memory][long]") {
    temp_dir dir;
    collector_proc coll(dir.path, {"--live-mb", "16"});
    auto agent = test_support::hello_agent(coll, "big");
    // Chunks of 40,000 samples, each second of the recording on 50 call paths of 4 threads:
    // 40 chunks (1.6 M samples, ~34 MB kept whole) are twice the allowance.
    auto chunk = [](int n) {
        std::string text;
        for (int i = 0; i < 40000; ++i)
            text += "app 7/" + std::to_string(7 + i % 4) + " " + std::to_string(n) + "." +
                    std::to_string(100000 + i) + ": 1000 cpu-clock:\n\t 1 f" +
                    std::to_string(i % 50) + "+0x1 (/x)\n\t 1 main+0x2 (/x)\n\n";
        return text;
    };
    constexpr int chunks = 40;
    const auto id = stream_chunks(coll, *agent, chunks, chunk, 60s);
    const auto live = coll.get("/api/sessions/" + id);
    INFO(json::serialize(live));
    constexpr std::uint64_t all = chunks * 40000ULL;
    CHECK(live.at("samples").to_number<std::uint64_t>() == all); // every chunk in the live view
    CHECK(live.at("folded_samples").to_number<std::uint64_t>() > all / 2);
    CHECK(live.at("fold_interval_sec").to_number<double>() >= 1);
    // Views answer from the whole session: every sample, each thread's share, one second.
    const auto fns = coll.get("/api/sessions/" + id + "/functions?weight=samples");
    CHECK(fns.at("total").to_number<std::uint64_t>() == all);
    const auto threads = coll.get("/api/sessions/" + id + "/threads");
    REQUIRE(threads.as_array().size() == 4);
    for (const auto& t : threads.as_array())
        CHECK(t.at("samples").to_number<std::uint64_t>() == all / 4);
    const auto second =
        coll.get("/api/sessions/" + id + "/functions?weight=samples&start=2&end=2.99");
    INFO(json::serialize(second));
    CHECK(second.at("total").to_number<std::uint64_t>() == 40000);
    const auto status = coll.get("/api/status");
    CHECK(status.at("memory").at("live").to_number<std::uint64_t>() < (std::uint64_t{20} << 20));
    CHECK(status.at("memory").at("folded_samples").to_number<std::uint64_t>() > all / 2);
    // Once the agent has gone, the session opens whole again, within the same allowance.
    agent.reset();
    const auto saved = wait_for(coll, "/api/sessions/" + id, 20s,
                                [](const json::value& v) { return !v.at("live").as_bool(); });
    CHECK(saved.at("samples").to_number<std::uint64_t>() == all);
    CHECK(coll.get("/api/sessions/" + id + "/functions?weight=samples")
              .at("total")
              .to_number<std::uint64_t>() == all);
}

TEST_CASE("a million frames never seen again stay within the session's memory share — the samples "
          "that need new ones are counted at one frame that says so",
          "[collector][integration][attack][memory][long]") {
    temp_dir dir;
    collector_proc coll(dir.path, {"--live-mb", "16"});
    auto agent = test_support::hello_agent(coll, "frames");
    // 25 chunks of 20,000 samples, each with a function, a caller and a thread of its own:
    // 1,000,000 frames and 500,000 threads, about 200 MB of model if all were kept.
    auto chunk = [](int n) {
        std::ostringstream text;
        for (int i = 0; i < 20000; ++i) {
            const auto k = std::to_string(n * 20000 + i);
            text << "w" << k << " " << k << "/" << k << " " << n << "." << 100000 + i
                 << ": 1000 cpu-clock:\n\t 1 f" << k << "+0x1 (/x)\n\t 1 caller" << k
                 << "+0x2 (/x)\n\t 1 main+0x3 (/x)\n\n";
        }
        return text.str();
    };
    constexpr int chunks = 25;
    const auto id = stream_chunks(coll, *agent, chunks, chunk, 90s);
    const auto live = coll.get("/api/sessions/" + id);
    INFO(json::serialize(live));
    constexpr std::uint64_t all = chunks * 20000ULL;
    CHECK(live.at("samples").to_number<std::uint64_t>() == all);
    const auto past = live.at("past_room_samples").to_number<std::uint64_t>();
    CHECK(past > all / 2);
    const auto status = coll.get("/api/status");
    INFO(json::serialize(status.at("memory")));
    CHECK(status.at("memory").at("live").to_number<std::uint64_t>() < (std::uint64_t{20} << 20));
    // Every sample is in the views, those past the share at the one frame that says so.
    const auto fns = coll.get("/api/sessions/" + id + "/functions?weight=samples");
    CHECK(fns.at("total").to_number<std::uint64_t>() == all);
    bool said = false;
    for (const auto& f : fns.at("functions").as_array())
        if (f.at("name").as_string() == collector::profile::past_room_symbol) {
            said = true;
            CHECK(f.at("self").to_number<std::uint64_t>() == past);
        }
    CHECK(said);
    CHECK_THAT(coll.proc->stderr_text(), Catch::Contains("fill its share of the memory budget"));
}

TEST_CASE("three large uploads at once: two import side by side, the third is told to wait, and "
          "the collector stays small",
          "[collector][integration][attack]") {
    temp_dir dir;
    collector_proc coll(dir.path);
    // ~95 MB of perf script text: 1,100,000 samples over 2,000 functions.
    std::string text;
    text.reserve(std::size_t{100} << 20);
    for (int i = 0; i < 1100000; ++i)
        text += "app 7/7 1." + std::to_string(100000 + i % 900000) + ": 1 cpu-clock:\n\t 4005d6 f" +
                std::to_string(i % 2000) + "+0x4 (/bin/app)\n\t 4004aa main+0x1a (/bin/app)\n\n";
    std::vector<test_support::http_reply> replies(3);
    std::vector<std::thread> uploads;
    for (int u = 0; u < 3; ++u)
        uploads.emplace_back([&, u] {
            replies[u] = http_call(coll.http_port, "POST", "/api/sessions/import", text);
        });
    for (auto& t : uploads)
        t.join();
    int imported = 0;
    for (const auto& r : replies) {
        INFO(r.status << " " << r.body.substr(0, 300));
        CHECK((r.status == 200 || (r.status == 503 && r.body.find("busy") != std::string::npos)));
        imported += r.status == 200;
    }
    CHECK(imported >= 2);
    for (const auto& r : replies)
        if (r.status == 200) {
            const std::string id(json::parse(r.body).at("session_id").as_string());
            CHECK(coll.get("/api/sessions/" + id).at("samples").to_number<int>() == 1100000);
        }
    const long hwm_kb = test_support::status_kb(coll.proc->pid(), "VmHWM:");
    INFO("peak RSS " << hwm_kb / 1024 << " MiB for " << imported << " imports of "
                     << (text.size() >> 20) << " MiB");
    CHECK(hwm_kb > 0);
#if !defined(__SANITIZE_ADDRESS__)
    CHECK(hwm_kb < 200 * 1024); // not the bodies held whole (3 x 95 MB, and their copies)
#endif
}

namespace {

// 50 samples perf on the "device" could not name, at an address inside the demo's
// matrix_multiply, in `module`: what only a symbol file of the demo can name.
std::string unnamed_samples_in(const std::string& module) {
    const auto nm = collector::run_capture({"nm", "--defined-only", PERFWIRE_DEMO_BIN});
    std::string address;
    std::istringstream lines(nm.out);
    for (std::string line; std::getline(lines, line);)
        if (line.find("matrix_multiply") != std::string::npos)
            address = line.substr(0, line.find(' '));
    REQUIRE_FALSE(address.empty());
    const auto at = std::stoull(address, nullptr, 16) + 0x10;
    std::ostringstream chunk;
    for (int i = 0; i < 50; ++i)
        chunk << "demo 42/42 " << 1000 + i << ".000000: 1000000 cpu-clock:\n\t" << std::hex << at
              << std::dec << " [unknown] (" << module << ")\n\n";
    return chunk.str();
}

} // namespace

TEST_CASE("an agent cannot make its session an owner recording: not with a build-id word, not by "
          "calling itself an import",
          "[collector][attack][symbols]") {
    // Frames in a binary on this machine, unnamed by the "device", at matrix_multiply's
    // address. Only a recording the owner imports may be named from the file its path names
    // without a build-id to check; an agent's session never.
    const std::string chunk = unnamed_samples_in(PERFWIRE_DEMO_BIN);

    temp_dir dir;
    auto coll = std::make_unique<collector_proc>(dir.path / "sessions");
    // One agent reports the word the collector once gave to imports as its build-id (refused,
    // as any build-id that is not hex); another says hello as "import".
    auto word = test_support::framing_peer::connect(coll->agent_port);
    REQUIRE(word);
    word->send(protocol::frame_flag::response,
               R"({"type":"hello","version":1,"agent":"perfwire","hostname":"word"})");
    word->send(protocol::frame_flag::metrics,
               R"({"type":"binaries","ts":1,"pid":42,"binaries":[{"path":")" +
                   std::string(PERFWIRE_DEMO_BIN) + R"(","build_id":"owner-recording"}]})");
    word->send(protocol::frame_flag::text, chunk);
    auto posing = test_support::framing_peer::connect(coll->agent_port);
    REQUIRE(posing);
    posing->send(protocol::frame_flag::response,
                 R"({"type":"hello","version":1,"agent":"import","hostname":"posing"})");
    posing->send(protocol::frame_flag::text, chunk);
    auto sessions = wait_for(*coll, "/api/sessions", 10s, [](const json::value& v) {
        int n = 0;
        for (const auto& s : v.as_array())
            n += s.at("samples").to_number<int>() == 50;
        return n == 2;
    });
    std::vector<std::string> ids;
    for (const auto& s : sessions.as_array())
        ids.emplace_back(s.at("id").as_string());
    REQUIRE(ids.size() == 2);
    const auto named = [&](const std::string& id) {
        const auto functions = coll->get("/api/sessions/" + id + "/functions");
        return json::value(functions.at("functions").as_array().at(0).at("name"));
    };
    for (const auto& id : ids) {
        INFO("live session " << id);
        CHECK(named(id) == "[unknown]");
    }
    CHECK_THAT(coll->proc->stderr_text(), Catch::Contains("build_id must be lowercase hex"));

    // Ended and opened again from disk, as a saved session: still the agents' sessions.
    word.reset();
    posing.reset();
    wait_for(*coll, "/api/sessions", 10s, [](const json::value& v) {
        for (const auto& s : v.as_array())
            if (s.at("live").as_bool())
                return false;
        return true;
    });
    coll = std::make_unique<collector_proc>(dir.path / "sessions");
    const auto saved = coll->get("/api/sessions");
    for (const auto& s : saved.as_array()) {
        INFO("saved session " << s.at("id").as_string());
        CHECK(s.at("imported") == false);
        CHECK(named(std::string(s.at("id").as_string())) == "[unknown]");
        CHECK(coll->get("/api/sessions/" + std::string(s.at("id").as_string())).at("imported") ==
              false);
    }

    // The same text imported by the owner is named from that file (so the two above could
    // have been).
    const auto up = http_call(coll->http_port, "POST", "/api/sessions/import", chunk);
    INFO(up.body);
    REQUIRE(up.status == 200);
    const std::string imported(json::parse(up.body).at("session_id").as_string());
    // (Its symbol tables are read beside the parse: named once they are.)
    wait_for(*coll, "/api/sessions/" + imported, 20s, [](const json::value& v) {
        const auto* pending = v.as_object().if_contains("symbols_pending");
        return pending && !pending->as_bool();
    });
    CHECK_THAT(std::string(named(imported).as_string()), Catch::Contains("matrix_multiply"));
    const auto listed = coll->get("/api/sessions");
    for (const auto& s : listed.as_array())
        CHECK(s.at("imported") == (s.at("id").as_string() == imported));
    CHECK(fs::exists(dir.path / "sessions" / imported / "owner-import"));
}

TEST_CASE("an agent's bytes are never a program to the collector: an ELF it sent as a chunk and "
          "then names as a module is not read, even with --sysroot / — the same samples in the "
          "real file are named",
          "[collector][attack][symbols]") {
    // The hostile agent's plan: send an ELF (the demo, symbols and all) as a raw chunk, which
    // the collector stores byte for byte in the sessions folder; name that file as a module,
    // with the ELF's build-id; send samples in it. The owner said the devices are this machine
    // (--sysroot /), the most the collector ever looks up on an agent's word.
    const auto build_id = protocol::read_build_id(PERFWIRE_DEMO_BIN);
    REQUIRE(build_id);
    std::ifstream elf_file(PERFWIRE_DEMO_BIN, std::ios::binary);
    const std::string elf((std::istreambuf_iterator<char>(elf_file)), {});
    REQUIRE(elf.size() > 1000);

    temp_dir dir;
    // A HOME of its own and no default debug dir: perf's build-id cache of this machine holds
    // the demo, and would name the planted module's frames from the real file (rightly).
    fs::create_directories(dir.path / "home");
    collector_proc coll(dir.path / "sessions",
                        {"--sysroot", "/", "--debug-dir", (dir.path / "home").string()},
                        {"HOME=" + (dir.path / "home").string(), "DEBUGINFOD_URLS="});
    auto agent = test_support::hello_agent(coll, "planter");
    agent->send(protocol::frame_flag::text, elf);
    // The stored chunk: the ELF, byte for byte, in the sessions folder.
    std::string planted;
    const auto until = std::chrono::steady_clock::now() + 10s;
    while (planted.empty() && std::chrono::steady_clock::now() < until) {
        std::error_code ec;
        for (const auto& e : fs::recursive_directory_iterator(dir.path / "sessions", ec))
            if (e.is_regular_file() && e.file_size() == elf.size())
                planted = e.path().string();
        if (planted.empty())
            std::this_thread::sleep_for(50ms);
    }
    INFO("planted: " << planted);
    REQUIRE_FALSE(planted.empty());
    REQUIRE(protocol::read_build_id(planted) == build_id);
    const auto binaries = [&](const std::string& path) {
        return R"({"type":"binaries","ts":1,"pid":42,"binaries":[{"path":")" + path +
               R"(","build_id":")" + *build_id + R"("}]})";
    };
    agent->send(protocol::frame_flag::metrics, binaries(planted));
    agent->send(protocol::frame_flag::text, unnamed_samples_in(planted));
    // The control: the same samples in the demo itself, from another agent.
    auto honest = test_support::hello_agent(coll, "honest");
    honest->send(protocol::frame_flag::metrics, binaries(PERFWIRE_DEMO_BIN));
    honest->send(protocol::frame_flag::text, unnamed_samples_in(PERFWIRE_DEMO_BIN));

    const auto sessions = wait_for(coll, "/api/sessions", 10s, [](const json::value& v) {
        int n = 0;
        for (const auto& s : v.as_array())
            n += s.at("samples").to_number<int>() >= 50;
        return n == 2;
    });
    std::map<std::string, std::string> by_host;
    for (const auto& s : sessions.as_array())
        by_host[std::string(s.at("hostname").as_string())] = std::string(s.at("id").as_string());
    REQUIRE(by_host.count("planter"));
    REQUIRE(by_host.count("honest"));
    const auto top = [&](const std::string& id) {
        const auto f = coll.get("/api/sessions/" + id + "/functions");
        return std::string(f.at("functions").as_array().at(0).at("name").as_string());
    };
    // Named once their symbol tables are read (beside the parse): both final, then compared.
    for (const auto& host : {"honest", "planter"})
        wait_for(coll, "/api/sessions/" + by_host[host], 20s, [](const json::value& v) {
            const auto* pending = v.as_object().if_contains("symbols_pending");
            return pending && !pending->as_bool();
        });
    CHECK_THAT(top(by_host["honest"]), Catch::Contains("matrix_multiply"));
    CHECK(top(by_host["planter"]) == "[unknown]");
    // What the collector says it tried for the planted module: refused, nothing read from it.
    const auto source = coll.get("/api/sessions/" + by_host["planter"] + "/source");
    INFO(json::serialize(source));
    bool listed = false;
    for (const auto& b : source.at("binaries").as_array()) {
        if (b.at("module").as_string() != planted)
            continue;
        listed = true;
        CHECK(b.at("path").as_string() == "");
        CHECK_THAT(json::serialize(b.at("tried")),
                   Catch::Contains("written by the collector from what peers sent"));
    }
    CHECK(listed);
}

TEST_CASE("one chunk whose samples claim days apart lands in one day of the fleet store — put at "
          "its arrival, and counted",
          "[collector][attack][fleet][clickhouse]") {
    test_support::clickhouse_proc ch;
    temp_dir dir;
    collector_proc coll(dir.path / "sessions",
                        {"--clickhouse", ch.url(), "--clickhouse-database", "spray"});
    auto peer = test_support::framing_peer::connect(coll.agent_port);
    REQUIRE(peer);
    peer->send(protocol::frame_flag::response,
               R"({"type":"hello","version":1,"agent":"perfwire","hostname":"spray"})");
    // 2,000 samples a day apart by the device's clock (5.5 years), in one chunk.
    std::ostringstream chunk;
    for (int i = 0; i < 2000; ++i)
        chunk << "demo 42/42 " << 1000 + i * 86'400
              << ".000000: 1000000 cpu-clock:\n\tffff work+0x1 (/bin/demo)\n\n";
    peer->send(protocol::frame_flag::text, chunk.str());
    const auto status = wait_for(coll, "/api/status", 30s, [](const json::value& v) {
        return v.at("fleet").at("written_samples").to_number<int>() == 2000;
    });
    INFO(json::serialize(status));
    CHECK(status.at("fleet").at("clamped_samples").to_number<int>() == 1999);
    CHECK_THAT(coll.proc->stderr_text(), Catch::Contains("clamped_samples"));
    collector::clickhouse_config cfg;
    cfg.url = ch.url();
    cfg.database = "spray";
    const auto client = collector::clickhouse_client::make(cfg);
    REQUIRE(client.has_value());
    const auto days = client->run("SELECT uniqExact(partition) FROM system.parts WHERE database = "
                                  "'spray' AND table = 'samples' AND active");
    REQUIRE(days.has_value());
    CHECK(std::stoi(*days) >= 1);
    CHECK(std::stoi(*days) <= 2); // (2: the chunk came just after midnight)
    // The session itself keeps every sample the device sent.
    const auto sessions = coll.get("/api/sessions");
    REQUIRE(sessions.as_array().size() == 1);
    CHECK(sessions.as_array()[0].at("samples").to_number<int>() == 2000);
}

TEST_CASE("a run's chunks are taken once and only from its device: a claim on another device's "
          "run or a number sent twice or far ahead or malformed changes nothing stored",
          "[collector][integration][resume][attack]") {
    temp_dir dir;
    collector_proc coll(dir.path);
    const auto resumable = [&](const std::string& host) {
        auto peer = test_support::framing_peer::connect(coll.agent_port);
        REQUIRE(peer);
        peer->send(protocol::frame_flag::response,
                   R"({"type":"hello","version":1,"agent":"perfwire","hostname":")" + host +
                       R"(","resumable":true})");
        return std::move(*peer);
    };
    const std::string run = "0123456789abcdef0123456789abcdef";
    const auto chunk = [&](std::uint64_t seq) {
        const std::string text = "app 7/7 1." + std::to_string(100000 + seq) +
                                 ": 1000 cpu-clock:\n\t 1 f+0x1 (/x)\n\t 1 main+0x2 (/x)\n\n";
        return protocol::encode_sequenced(run, seq, protocol::compress(text))
            .substr(protocol::header_size);
    };
    const auto chunks_of = [&](const std::string& id) {
        return coll.get("/api/sessions/" + id).at("chunks").to_number<int>();
    };
    // Whether the collector hangs up (what it asks meanwhile, `sequence` and acks, is read).
    const auto closes = [](test_support::framing_peer& peer) {
        const auto until = std::chrono::steady_clock::now() + 5s;
        while (std::chrono::steady_clock::now() < until)
            if (!peer.next(500ms) && peer.closed())
                return true;
        return false;
    };
    auto device = resumable("device-a");
    for (std::uint64_t seq = 1; seq <= 3; ++seq)
        device.send(protocol::frame_flag::sequenced, chunk(seq));
    const auto listed = wait_for(coll, "/api/sessions", 15s, [](const json::value& v) {
        return v.as_array().size() == 1 && v.at(0).at("chunks").to_number<int>() == 3;
    });
    REQUIRE(listed.as_array().size() == 1);
    const std::string a_id(listed.at(0).at("id").as_string());

    // Sent again, and a number from before: skipped. The next: taken.
    device.send(protocol::frame_flag::sequenced, chunk(2));
    device.send(protocol::frame_flag::sequenced, chunk(3));
    device.send(protocol::frame_flag::sequenced, chunk(4));
    wait_for(coll, "/api/sessions/" + a_id, 15s,
             [](const json::value& v) { return v.at("chunks").to_number<int>() == 4; });
    std::this_thread::sleep_for(300ms);
    CHECK(chunks_of(a_id) == 4);

    // Another device naming the same run id gets a session of its own.
    auto other = resumable("device-b");
    other.send(protocol::frame_flag::sequenced, chunk(5));
    const auto two = wait_for(coll, "/api/sessions", 15s,
                              [](const json::value& v) { return v.as_array().size() == 2; });
    REQUIRE(two.as_array().size() == 2);
    CHECK(chunks_of(a_id) == 4);

    // A number far ahead of the run, a chunk without its header, and one from an agent that
    // did not say it resumes runs: the connection closes, nothing is stored.
    device.send(protocol::frame_flag::sequenced, chunk(std::uint64_t{1} << 40));
    CHECK(closes(device));
    auto short_one = resumable("device-c");
    short_one.send(protocol::frame_flag::sequenced, std::string(10, 'x'));
    CHECK(closes(short_one));
    auto older = test_support::hello_agent(coll, "device-d");
    older->send(protocol::frame_flag::sequenced, chunk(1));
    CHECK(closes(*older));
    CHECK(chunks_of(a_id) == 4);
    CHECK(coll.get("/api/sessions").as_array().size() == 2);
    CHECK_THAT(coll.proc->stderr_text(), Catch::Contains("a chunk numbered 1099511627776"));
}
