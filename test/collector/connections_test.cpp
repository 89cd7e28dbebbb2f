// The connection budget: caps on what peers can make the collector hold at once, and accept
// loops that neither spin nor flood the log when they are reached or descriptors run out.
#include "collector/connections.hpp"
#include "collector/log.hpp"
#include "support/collector_proc.hpp"
#include "support/event_stream.hpp"
#include "support/fixtures.hpp"
#include "support/framing_peer.hpp"

#include <catch2/catch.hpp>

#include <boost/json.hpp>

#include <fstream>
#include <poll.h>
#include <set>
#include <sys/socket.h>
#include <thread>
#include <unistd.h>

using namespace collector;
using namespace std::chrono_literals;
namespace json = boost::json;
using kind = connection_budget::kind;

TEST_CASE("connection budget: each kind up to its cap, unproven agents up to theirs, slots given "
          "back when they end",
          "[collector][connections]") {
    connection_budget b({.http = 2, .agents = 3, .unproven_agents = 2});
    auto h1 = b.take(kind::http);
    auto h2 = b.take(kind::http);
    REQUIRE(h1);
    REQUIRE(h2);
    CHECK_FALSE(b.take(kind::http));
    CHECK(b.refused(kind::http) == 1);
    h1->release();
    CHECK(b.open(kind::http) == 1);
    {
        auto h3 = b.take(kind::http);
        CHECK(h3);
        CHECK(b.open(kind::http) == 2);
        auto moved = std::move(*h3); // the count follows the slot, not its copies
        CHECK(b.open(kind::http) == 2);
    }
    CHECK(b.open(kind::http) == 1);

    auto a1 = b.take(kind::agent);
    auto a2 = b.take(kind::agent);
    REQUIRE(a1);
    REQUIRE(a2);
    CHECK(b.unproven() == 2);
    CHECK_FALSE(b.take(kind::agent)); // two strangers at once at most
    a1->prove();
    a1->prove(); // once only
    CHECK(b.unproven() == 1);
    auto a3 = b.take(kind::agent);
    REQUIRE(a3);
    CHECK(b.open(kind::agent) == 3);
    a3->prove();
    CHECK_FALSE(b.take(kind::agent)); // the agents' own cap
    CHECK(b.refused(kind::agent) == 2);
    a2.reset(); // an unproven one that ends frees both counts
    CHECK(b.unproven() == 0);
    CHECK(b.open(kind::agent) == 2);
    CHECK(b.take(kind::agent));

    const auto small = connection_budget::for_descriptors(1024);
    CHECK(small.http == 256);
    CHECK(small.agents == 512);
    CHECK(small.unproven_agents == 64);
    const auto large = connection_budget::for_descriptors(20000);
    CHECK(large.http + large.agents < 20000); // room left for files, pipes and children
    CHECK(large.unproven_agents <= large.agents / 8);
}

TEST_CASE("per-address limits count an IPv6 host by its /64", "[collector][connections]") {
    CHECK(address_key("192.0.2.7") == "192.0.2.7");
    CHECK(address_key("::ffff:192.0.2.7") == "192.0.2.7");
    CHECK(address_key("2001:db8:1:2:aaaa:bbbb:cccc:dddd") == "2001:db8:1:2::/64");
    CHECK(address_key("2001:db8:1:2::1") == address_key("2001:db8:1:2:ffff::9"));
    CHECK(address_key("2001:db8:1:3::1") != address_key("2001:db8:1:2::1"));
    CHECK(address_key("::1") == "::/64");
    CHECK(address_key("not an address") == "not an address");
}

TEST_CASE("connection budget: a connection the gate admitted takes the oldest stranger's place "
          "when the unproven cap is reached, one on probation does not",
          "[collector][connections]") {
    using w = connection_budget::when_full;
    connection_budget b({.http = 1, .agents = 4, .unproven_agents = 2});
    std::vector<int> closed;
    const auto t0 = std::chrono::steady_clock::now();
    auto s1 = b.take(kind::agent, w::evict_oldest, t0);
    auto s2 = b.take(kind::agent, w::evict_oldest, t0);
    REQUIRE(s1);
    REQUIRE(s2);
    s1->on_evict([&] { closed.push_back(1); });
    s2->on_evict([&] { closed.push_back(2); });
    CHECK_FALSE(b.take(kind::agent, w::refuse)); // on probation: no room, no eviction
    // Not yet: a stranger has its time to say hello (a device may be in its handshake).
    CHECK_FALSE(b.take(kind::agent, w::evict_oldest,
                       t0 + connection_budget::evictable_after - std::chrono::milliseconds(1)));
    CHECK(closed.empty());
    auto s3 = b.take(kind::agent, w::evict_oldest, t0 + connection_budget::evictable_after);
    REQUIRE(s3);
    CHECK(closed == std::vector<int>{1}); // the oldest
    CHECK(b.unproven() == 2);
    CHECK(b.open(kind::agent) == 3); // the evicted one holds its slot until its connection ends
    CHECK(b.evicted() == 1);
    s1->prove(); // (too late: it no longer counts as unproven)
    CHECK(b.unproven() == 2);
    s1.reset();
    CHECK(b.open(kind::agent) == 2);
    s2->prove(); // proven: no longer evictable
    auto s4 = b.take(kind::agent, w::evict_oldest);
    REQUIRE(s4);
    // s3 has no way to be closed yet (no callback): s4 found room since s2 proved.
    CHECK(closed == std::vector<int>{1});
    CHECK_FALSE(b.take(kind::agent, w::evict_oldest)); // s3 and s4 unproven, neither closable
    s4->on_evict([&] { closed.push_back(4); });
    s3.reset();
    const auto later = std::chrono::steady_clock::now() + connection_budget::evictable_after;
    auto s5 = b.take(kind::agent, w::evict_oldest, later);
    REQUIRE(s5);
    CHECK(b.open(kind::agent) == 3);
    s5->on_evict([] {});
    // The agents' total is a hard cap: no eviction past it.
    auto s6 = b.take(kind::agent, w::evict_oldest, later);
    REQUIRE(s6);
    CHECK(closed == std::vector<int>{1, 4});
    CHECK(b.open(kind::agent) == 4);
    CHECK_FALSE(b.take(kind::agent, w::evict_oldest, later + connection_budget::evictable_after));
    CHECK(closed == std::vector<int>{1, 4});
}

TEST_CASE("log: a peer's control characters are shown, not obeyed — no line of its own, no "
          "terminal escape",
          "[collector][log]") {
    CHECK(printable("hello from perfwire 0.1.0 on board-c") ==
          "hello from perfwire 0.1.0 on board-c");
    CHECK(printable("on board\nperfwire-collector: [127.0.0.1] forged") ==
          "on board\\x0aperfwire-collector: [127.0.0.1] forged");
    CHECK(printable("\x1b[2J\r\t\x7f") == "\\x1b[2J\\x0d\\x09\\x7f");
    // UTF-8 names stay as they are.
    CHECK(printable("Gerät-Küche") == "Gerät-Küche");
}

TEST_CASE("a peer's short text is kept bounded, whole characters, nothing that moves or hides "
          "text",
          "[collector][log]") {
    CHECK(peer_text("target process exited", 200) == "target process exited");
    // Cut where a character ends: 199 bytes and an é of two would be 201.
    const auto cut = peer_text(std::string(199, 'x') + "\xc3\xa9", 200);
    CHECK(cut == std::string(199, 'x'));
    CHECK(peer_text("Ger\xc3\xa4t \xe2\x82\xac", 200) == "Ger\xc3\xa4t \xe2\x82\xac");
    // Controls (C0, DEL, C1), bidi overrides and invalid bytes are each one '?'.
    CHECK(peer_text("a\nb\x7f\xc2\x85"
                    "c",
                    200) == "a?b?"
                            "?c");
    CHECK(peer_text("\xe2\x80\xae"
                    "evil\xe2\x81\xa6",
                    200) == "?evil?");
    CHECK(peer_text("\xff\xc3(\xed\xa0\x80\xc0\xaf", 200) == "?"
                                                             "?(?"
                                                             "?"
                                                             "?"
                                                             "?"
                                                             "?");
    CHECK(peer_text(std::string(8 << 20, 'r'), 200).size() == 200);
}

TEST_CASE("log limiter: lines of one shape past their bucket are counted and told with the next "
          "one written, all lines share a bucket too",
          "[collector][log]") {
    using clock = log_limiter::clock;
    CHECK(log_limiter::shape("agent connected (t12, plain TCP)") ==
          log_limiter::shape("agent connected (t9, plain TCP)"));
    CHECK(log_limiter::shape("agent connected") != log_limiter::shape("agent disconnected"));
    log_limiter l({.shape_burst = 3, .shape_per_second = 1, .all_burst = 5, .all_per_second = 1});
    const auto t0 = clock::now();
    std::string note;
    std::uint64_t lost = 0;
    int written = 0;
    for (int i = 0; i < 10; ++i)
        written += l.admit("hello from board-" + std::to_string(i), t0, note, lost);
    CHECK(written == 3);
    CHECK(l.admit("another kind", t0, note, lost));
    CHECK(l.admit("a third kind", t0, note, lost));
    CHECK_FALSE(l.admit("a fourth kind", t0, note, lost)); // the shared bucket is empty
    // A second later: one more line of the first shape, told with the 7 not shown.
    CHECK(l.admit("hello from board-99", t0 + 1s, note, lost));
    CHECK(note == " [7 more like this not shown]");
    CHECK(lost == 1); // the fourth kind
    CHECK_FALSE(l.admit("hello from board-100", t0 + 1s, note, lost));
    CHECK(l.admit("hello from board-101", t0 + 3s, note, lost));
    CHECK(note == " [1 more like this not shown]");
    CHECK(lost == 0);
}

TEST_CASE("accept backoff: 50 ms doubling to 2 s, said once per episode",
          "[collector][connections]") {
    accept_backoff b;
    std::string line;
    CHECK(b.failed("Too many open files", line) == 50ms);
    CHECK_THAT(line, Catch::StartsWith("accept: Too many open files"));
    std::vector<std::chrono::milliseconds> waits;
    for (int i = 0; i < 8; ++i) {
        waits.push_back(b.failed("Too many open files", line));
        CHECK(line.empty());
    }
    CHECK(waits == std::vector<std::chrono::milliseconds>{100ms, 200ms, 400ms, 800ms, 1600ms,
                                                          2000ms, 2000ms, 2000ms});
    CHECK(b.succeeded() == "accepting again after 9 failed accepts");
    CHECK(b.succeeded().empty());
    CHECK(b.failed("Too many open files", line) == 50ms);
    CHECK_FALSE(line.empty());
}

namespace {

// Whether the collector closes `fd` within `timeout` (EOF or a reset), reading nothing.
bool closed_by_peer(int fd, std::chrono::milliseconds timeout) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(timeout.count())) != 1)
        return false;
    char c;
    return ::recv(fd, &c, 1, 0) <= 0;
}

} // namespace

TEST_CASE("a collector at its connection caps closes new connections, says so once, and takes "
          "them again when some end — strangers on the agent port cannot crowd out an agent",
          "[collector][connections][integration]") {
    test_support::temp_dir dir;
    test_support::collector_proc coll(
        dir.path / "sessions", {"--max-http-connections", "4", "--max-agent-connections", "8"});
    INFO(coll.proc->stderr_text());
    // Four idle HTTP connections hold every slot (accepted in order, one after the other).
    std::vector<int> idle;
    for (int i = 0; i < 4; ++i) {
        idle.push_back(test_support::connect_loopback(coll.http_port));
        REQUIRE(idle.back() >= 0);
    }
    for (int i = 0; i < 3; ++i) {
        const int over = test_support::connect_loopback(coll.http_port);
        REQUIRE(over >= 0);
        CHECK(closed_by_peer(over, 10s));
        ::close(over);
    }
    for (const int fd : idle) {
        CHECK_FALSE(closed_by_peer(fd, 0ms)); // still held
        ::close(fd);
    }
    // Their slots come back as the collector sees them end.
    const auto status = test_support::poll_json(coll.http_port, "/api/status", 10s,
                                                [](const json::value&) { return true; });
    const auto& http = status.at("connections").at("http");
    CHECK(http.at("max").as_int64() == 4);
    CHECK(http.at("refused").as_int64() >= 3); // (and any ask for the status made too soon)
    CHECK(coll.proc->stderr_text().find("at the cap of 4 HTTP connections") != std::string::npos);
    CHECK(coll.proc->stderr_text().find("at the cap of 4 HTTP connections") ==
          coll.proc->stderr_text().rfind("at the cap of 4 HTTP connections"));
    CHECK(coll.proc->stderr_text().find("connections closed at the cap") != std::string::npos);

    // The agent port: 8 agents, 1 of them (8 / 8) without a hello yet.
    const auto agents = status.at("connections").at("agents");
    CHECK(agents.at("max").as_int64() == 8);
    CHECK(agents.at("max_unproven").as_int64() == 1);
    const int stranger = test_support::connect_loopback(coll.agent_port);
    REQUIRE(stranger >= 0);
    // Once the collector holds it (its time counts from its accept, which a loaded machine
    // may make later than the connect), the agent behind it finds the unproven cap reached
    // and, the stranger having had its time to say hello, takes its place.
    test_support::wait_for(coll, "/api/status", 10s, [](const json::value& v) {
        return v.at("connections").at("agents").at("unproven").as_int64() == 1;
    });
    std::this_thread::sleep_for(connection_budget::evictable_after);
    auto board = test_support::hello_agent(coll, "board-1");
    CHECK(closed_by_peer(stranger, 10s));
    ::close(stranger);
    test_support::wait_for(coll, "/api/targets", 10s, [](const json::value& v) {
        return json::serialize(v).find("board-1") != std::string::npos;
    });
    // Having said hello it holds no unproven slot, so the next stranger is accepted too.
    const int next = test_support::connect_loopback(coll.agent_port);
    REQUIRE(next >= 0);
    const auto after = test_support::wait_for(coll, "/api/status", 10s, [](const json::value& v) {
        return v.at("connections").at("agents").at("open").as_int64() == 2;
    });
    CHECK(after.at("connections").at("agents").at("unproven").as_int64() == 1);
    CHECK(after.at("connections").at("agents").at("evicted").as_int64() == 1);
    CHECK_FALSE(closed_by_peer(next, 0ms));
    ::close(next);
}

TEST_CASE("sixty agents connecting at once reach a browser as the targets that changed, not the "
          "whole list each time, and their leaving as ids",
          "[collector][connections][sse][integration]") {
    test_support::temp_dir dir;
    test_support::collector_proc coll(dir.path, {"--agent-auth", "token"});
    std::string token;
    std::ifstream(dir.path / ".agent-token") >> token;
    REQUIRE_FALSE(token.empty());

    const int browser = test_support::open_event_stream(coll);
    std::string raw;
    test_support::read_stream(browser, raw, 10s, [](const std::string& r) {
        return !test_support::stream_events(r).empty();
    });

    constexpr int n = 60;
    std::vector<test_support::framing_peer> agents;
    for (int i = 0; i < n; ++i)
        agents.push_back(
            std::move(*test_support::enrolled_agent(coll, "board-" + std::to_string(i), token)));
    // The browser learns of every one of them from changes alone.
    std::set<std::string> told, gone;
    const auto learn = [&](const auto& events) {
        told.clear();
        gone.clear();
        for (const auto& [what, data] : events)
            if (what == "targets_changed") {
                const auto v = json::parse(data);
                for (const auto& t : v.at("targets").as_array())
                    told.insert(std::string(t.at("hostname").as_string()));
                for (const auto& id : v.at("gone").as_array())
                    gone.insert(std::string(id.as_string()));
            }
    };
    test_support::read_stream(browser, raw, 20s, [&](const std::string& r) {
        learn(test_support::stream_events(r));
        return told.size() == n;
    });
    CHECK(told.size() == n);
    const auto listed = test_support::poll_json(coll.http_port, "/api/targets", 10s,
                                                [](const json::value&) { return true; });
    REQUIRE(listed.as_array().size() == n);

    agents.clear(); // all leave
    test_support::read_stream(browser, raw, 20s, [&](const std::string& r) {
        learn(test_support::stream_events(r));
        return gone.size() == n;
    });
    CHECK(gone.size() == n);
    for (const auto& t : listed.as_array())
        CHECK(gone.count(std::string(t.at("id").as_string())) == 1);
    ::close(browser);

    std::size_t snapshots = 0, target_bytes = 0;
    for (const auto& [what, data] : test_support::stream_events(raw)) {
        snapshots += what == "targets";
        if (what == "targets" || what == "targets_changed")
            target_bytes += data.size();
    }
    CHECK(snapshots == 1); // the one the stream opened with
    // Each target is told a few times (hello, then each state) in ~400 bytes: sending the whole
    // list at each change, as before, took n * n / 2 * 400 = 720 kB here.
    const auto one = json::serialize(listed.as_array()[0]).size();
    INFO("targets events: " << target_bytes << " bytes, one target " << one << " bytes");
    CHECK(target_bytes < 6 * n * one);
}
