// One browser connection driven byte for byte: over beast::test::stream for exact bytes, and
// over loopback TCP for a browser that stops reading.
#include "collector/http/byte_stream.hpp"
#include "collector/http/connection.hpp"
#include "collector/http/events.hpp"
#include "collector/http/sse.hpp"
#include "support/fixtures.hpp"

#include <catch2/catch.hpp>

#include <cstdio>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/socket_base.hpp>
#include <boost/asio/use_future.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/_experimental/test/stream.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/json/parse.hpp>

using namespace collector;
namespace beast = boost::beast;
using asio::ip::tcp;

namespace {

struct test_app {
    test_support::temp_dir dir;
    asio::io_context io;
    std::unique_ptr<app_context> app;

    test_app() {
        config c;
        c.sessions_dir = (dir.path / "sessions").string();
        app = std::make_unique<app_context>(io, c);
        app->agent_listen_address = "0.0.0.0:9999";
    }
    ~test_app() {
        // A test that failed midway leaves a connection under way: it ends, as on the
        // collector's stop, while the context it uses is still there.
        // In the collector's order (app.cpp): the loop runs until nothing is left, every job
        // handed to the pool done and its answer handled; then the pools are joined.
        app->stops.stop();
        app->browsers->stop();
        io.restart();
        io.run_for(std::chrono::minutes(1));
        app->pool.join();
        app->symbol_loads.join();
    }

    // Runs the loop until `done()` holds: handlers as they become ready, among them the
    // answers of thread-pool work, however long that work takes on a loaded machine (at most a
    // minute, so that a test that would hang fails instead).
    template <class Done>
    void run_until(Done done) {
        const auto bound = std::chrono::steady_clock::now() + std::chrono::minutes(1);
        while (!done() && std::chrono::steady_clock::now() < bound) {
            io.restart();
            if (io.run_one_for(std::chrono::milliseconds(10)) == 0)
                std::this_thread::sleep_for(std::chrono::milliseconds(1));
        }
    }

    // Runs until nothing is ready, then gives any thread-pool work a moment to come back.
    void settle() {
        for (int i = 0; i < 50; ++i) {
            io.restart();
            if (io.poll() == 0 && i > 2)
                break;
            std::this_thread::sleep_for(std::chrono::milliseconds(2));
        }
    }
};

// The browser's end of a connected test stream pair; the server end runs serve_connection.
struct test_browser {
    beast::test::stream browser;
    std::future<void> done;

    test_browser(test_app& t, connection_limits limits = {})
        : browser(t.io) {
        using server_stream = stream_of<beast::test::stream>;
        auto server = std::make_shared<server_stream>(t.io);
        server->next().connect(browser);
        // The connection holds its stream, as the server's do: it may outlive this browser
        // (a test that failed midway), and ends when the test's collector stops.
        done = asio::co_spawn(
            t.io,
            [](app_context& app, std::shared_ptr<server_stream> s,
               connection_limits l) -> asio::awaitable<void> {
                co_await serve_connection(app, *s, l);
            }(*t.app, std::move(server), limits),
            asio::use_future);
    }
    void send(std::string_view bytes) { asio::write(browser, asio::buffer(bytes)); }
    // Everything the server wrote since the last call.
    std::string received() {
        std::string out(browser.str());
        browser.clear();
        return out;
    }
};

const std::string stream_request = "GET /api/stream HTTP/1.1\r\nHost: 127.0.0.1:8080\r\n\r\n";

} // namespace

TEST_CASE("SSE over a test stream: header, first picture, events and heartbeat byte for byte",
          "[collector][sse][connection]") {
    test_app t;
    connection_limits limits;
    limits.heartbeat = std::chrono::milliseconds(30);
    test_browser b(t, limits);
    b.send(stream_request);
    t.settle();
    // No Content-Length, no chunking: the body is the event stream itself. The status is
    // GET /api/status's (its uptime and memory change: read, not compared byte for byte).
    const std::string head = "HTTP/1.1 200 OK\r\n"
                             "Content-Type: text/event-stream\r\n"
                             "Cache-Control: no-store\r\n"
                             "\r\n"
                             "event: status\n"
                             "data: ";
    const std::string tail = "\n\n"
                             "event: targets\n"
                             "data: []\n\n";
    const auto got = b.received();
    REQUIRE(got.size() > head.size() + tail.size());
    CHECK(got.substr(0, head.size()) == head);
    CHECK(got.substr(got.size() - tail.size()) == tail);
    const auto status =
        boost::json::parse(got.substr(head.size(), got.size() - head.size() - tail.size()))
            .as_object();
    CHECK(status.at("version") == PERFWIRE_VERSION);
    CHECK(status.at("agent_listener") == "0.0.0.0:9999");
    CHECK(status.at("memory").as_object().contains("budget"));
    CHECK(status.at("connections").as_object().contains("agents"));
    CHECK(events::hub(*t.app).clients() == 1);

    events::hub(*t.app).broadcast("data_version",
                                  R"({"session_id":"s1","chunks":2,"samples":480})");
    events::hub(*t.app).broadcast("metrics", R"({"type":"system","ts":1.5})");
    t.settle();
    CHECK(b.received() == "event: data_version\n"
                          "data: {\"session_id\":\"s1\",\"chunks\":2,\"samples\":480}\n\n"
                          "event: metrics\n"
                          "data: {\"type\":\"system\",\"ts\":1.5}\n\n");

    // Idle: a comment line, nothing else.
    std::this_thread::sleep_for(std::chrono::milliseconds(60));
    t.settle();
    CHECK(b.received() == ": keep-alive\n\n");

    // The browser leaves: the next write fails, the client unregisters, the coroutine ends.
    b.browser.close();
    events::hub(*t.app).broadcast("targets", "[]");
    t.settle();
    CHECK(events::hub(*t.app).clients() == 0);
    REQUIRE(b.done.wait_for(std::chrono::seconds(0)) == std::future_status::ready);
    b.done.get();
}

TEST_CASE("Connection over a test stream: keep-alive, refused Host, oversized body",
          "[collector][connection]") {
    test_app t;
    connection_limits limits;
    limits.request_body = 64;
    test_browser b(t, limits);

    // Two requests on one connection, answered in order.
    b.send("GET /api/status HTTP/1.1\r\nHost: localhost:8080\r\n\r\n"
           "GET /no/such/file HTTP/1.1\r\nHost: localhost:8080\r\n\r\n");
    t.run_until([&] { return b.browser.str().find("HTTP/1.1 404") != std::string_view::npos; });
    auto out = b.received();
    const auto second = out.find("HTTP/1.1 404 Not Found\r\n");
    REQUIRE(out.rfind("HTTP/1.1 200 OK\r\n", 0) == 0);
    REQUIRE(second != std::string::npos);
    CHECK(out.find("\"version\":\"" PERFWIRE_VERSION "\"") < second);
    // Every answer forbids framing by other sites and runs only the collector's own scripts.
    CHECK(out.find("X-Frame-Options: DENY\r\n") < second);
    CHECK(out.find("Content-Security-Policy: default-src 'self';") < second);
    CHECK(out.find("frame-ancestors 'none'", second) != std::string::npos);
    CHECK(b.done.wait_for(std::chrono::seconds(0)) != std::future_status::ready);

    // A page served from elsewhere (DNS rebinding) never reaches the event stream.
    b.send("GET /api/stream HTTP/1.1\r\nHost: evil.example:8080\r\n\r\n");
    t.settle();
    out = b.received();
    CHECK(out.rfind("HTTP/1.1 403 Forbidden\r\n", 0) == 0);
    CHECK(out.find("text/event-stream") == std::string::npos);
    CHECK(events::hub(*t.app).clients() == 0);

    // Recordings may be far larger than other requests.
    const auto recording = test_support::fixture("collector/fixtures/callchain_fields.txt");
    REQUIRE(recording.size() > limits.request_body);
    b.send("POST /api/sessions/import HTTP/1.1\r\nHost: localhost:8080\r\nContent-Length: " +
           std::to_string(recording.size()) + "\r\n\r\n" + recording);
    t.run_until([&] { return b.browser.str().find("session_id") != std::string_view::npos; });
    out = b.received();
    CHECK(out.rfind("HTTP/1.1 200 OK\r\n", 0) == 0);
    CHECK(out.find("\"session_id\":\"") != std::string::npos);

    // A body over the limit is refused before it is read, and the connection closes.
    b.send("POST /api/targets/connect HTTP/1.1\r\nHost: localhost:8080\r\nContent-Length: 100"
           "\r\n\r\n" +
           std::string(100, 'x'));
    t.settle();
    out = b.received();
    CHECK(out.rfind("HTTP/1.1 413 Payload Too Large\r\n", 0) == 0);
    CHECK(out.find(R"("code":"too_large")") != std::string::npos);
    REQUIRE(b.done.wait_for(std::chrono::seconds(0)) == std::future_status::ready);
}

TEST_CASE("Connection over a test stream: an upload streams in blocks — its answer follows the "
          "request's Connection",
          "[collector][connection][import]") {
    test_app t;
    test_browser b(t);
    // More than one block of the reader (1 MiB), so the import is fed several times.
    const auto one = test_support::fixture("collector/fixtures/callchain_fields.txt");
    std::string recording;
    while (recording.size() < (std::size_t{5} << 19))
        recording += one;
    b.send("POST /api/sessions/import?name=x HTTP/1.1\r\nHost: localhost:8080\r\n"
           "Connection: close\r\nContent-Length: " +
           std::to_string(recording.size()) + "\r\n\r\n" + recording);
    t.run_until(
        [&] { return b.done.wait_for(std::chrono::seconds(0)) == std::future_status::ready; });
    const auto out = b.received();
    CHECK(out.rfind("HTTP/1.1 200 OK\r\n", 0) == 0);
    CHECK(out.find("Connection: close\r\n") != std::string::npos);
    CHECK(out.find("\"bytes\":" + std::to_string(recording.size())) != std::string::npos);
    REQUIRE(b.done.wait_for(std::chrono::seconds(0)) == std::future_status::ready);
}

TEST_CASE("Connection over a test stream: a chunked upload goes through the parser's chunks",
          "[collector][connection][import]") {
    test_app t;
    test_browser b(t);
    const auto text = test_support::fixture("collector/fixtures/flat.txt");
    std::string body;
    for (std::size_t pos = 0; pos < text.size(); pos += 4000) { // several chunks
        const auto part = text.substr(pos, 4000);
        char size[16];
        std::snprintf(size, sizeof size, "%zx\r\n", part.size());
        body += size + part + "\r\n";
    }
    b.send("POST /api/sessions/import HTTP/1.1\r\nHost: localhost:8080\r\n"
           "Transfer-Encoding: chunked\r\n\r\n" +
           body + "0\r\n\r\n");
    t.run_until([&] { return b.browser.str().find("session_id") != std::string_view::npos; });
    const auto out = b.received();
    CHECK(out.rfind("HTTP/1.1 200 OK\r\n", 0) == 0);
    CHECK(out.find("\"samples\":96,") != std::string::npos);
    CHECK(out.find("\"bytes\":" + std::to_string(text.size())) != std::string::npos);
}

TEST_CASE("SSE: a live session's chunks are told a few times a second, the last always, with "
          "the counts a page shows",
          "[collector][sse][connection]") {
    test_app t;
    test_browser b(t);
    b.send(stream_request);
    t.settle();
    (void)b.received(); // the header and the first picture
    auto e = t.app->sessions.create_live("agent", {});
    REQUIRE(e);
    const std::string id = (*e)->id;
    const auto notices = [&] {
        const std::string got = b.received();
        std::vector<boost::json::object> out;
        for (auto at = got.find("event: data_version\ndata: "); at != std::string::npos;
             at = got.find("event: data_version\ndata: ", at + 1)) {
            const auto from = at + std::string_view("event: data_version\ndata: ").size();
            out.push_back(
                boost::json::parse(got.substr(from, got.find('\n', from) - from)).as_object());
        }
        return out;
    };

    // Twenty chunks in a burst: the first is told at once, the rest wait for the next tick.
    const auto burst_start = std::chrono::steady_clock::now();
    for (int chunk = 1; chunk <= 20; ++chunk) {
        (*e)->samples = chunk * 100;
        (*e)->chunks = chunk;
        (*e)->threads = chunk < 10 ? 1 : 3;
        (*e)->span_ns = chunk * 333'000'000ULL;
        t.app->changed(change::data, id);
        t.settle();
    }
    auto told = notices();
    if (std::chrono::steady_clock::now() - burst_start < events::feed::interval) {
        REQUIRE(told.size() == 1);
        CHECK(told[0].at("samples").to_number<int>() == 100);
    }
    // The tick tells the last counts, once.
    std::this_thread::sleep_for(events::feed::interval + std::chrono::milliseconds(20));
    t.settle();
    const auto later = notices();
    told.insert(told.end(), later.begin(), later.end());
    REQUIRE_FALSE(told.empty());
    CHECK(told.size() <= 3);
    const auto& last = told.back();
    CHECK(last.at("session_id").as_string() == id);
    CHECK(last.at("samples").to_number<int>() == 2000);
    CHECK(last.at("chunks").to_number<int>() == 20);
    CHECK(last.at("threads").to_number<int>() == 3);
    CHECK(last.at("duration_sec").to_number<double>() == Approx(6.66));
    // Quiet since: nothing more.
    std::this_thread::sleep_for(events::feed::interval + std::chrono::milliseconds(20));
    t.settle();
    CHECK(notices().empty());
    t.app->browsers->stop();
    b.browser.close();
    events::hub(*t.app).broadcast("targets", "[]");
    t.settle();
}

TEST_CASE("SSE over loopback TCP: a browser that stops reading is dropped, the other gets "
          "everything",
          "[collector][sse][connection]") {
    test_app t;
    events::hub(*t.app).set_cap(std::size_t{256} << 10);
    tcp::acceptor acceptor(t.io, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
    const auto port = acceptor.local_endpoint().port();

    // Accepts one connection with a small send buffer, so the slow browser's backlog builds up
    // in the collector's queue rather than in the kernel.
    auto serve_one = [&]() {
        auto accepted = acceptor.async_accept(asio::use_future);
        t.io.restart();
        while (accepted.wait_for(std::chrono::seconds(0)) != std::future_status::ready)
            t.io.run_one_for(std::chrono::milliseconds(10));
        auto socket = accepted.get();
        socket.set_option(asio::socket_base::send_buffer_size(8192));
        asio::co_spawn(
            t.io,
            [](app_context& app, tcp::socket s) -> asio::awaitable<void> {
                stream_of<beast::tcp_stream> stream(std::move(s));
                co_await serve_connection(app, stream);
            }(*t.app, std::move(socket)),
            asio::use_future);
    };
    auto open_browser = [&](int receive_buffer) {
        tcp::socket s(t.io);
        s.open(tcp::v4());
        s.set_option(asio::socket_base::receive_buffer_size(receive_buffer));
        s.connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), port));
        asio::write(s, asio::buffer(stream_request));
        serve_one();
        return s;
    };
    tcp::socket slow = open_browser(4096);
    tcp::socket fast = open_browser(1 << 20);
    fast.non_blocking(true);
    t.settle();
    REQUIRE(events::hub(*t.app).clients() == 2);

    const std::string payload(16 << 10, 'x');
    const std::string event = sse_hub::format("metrics", payload);
    std::string fast_got;
    auto drain_fast = [&] {
        char buf[65536];
        boost::system::error_code ec;
        for (;;) {
            auto n = fast.read_some(asio::buffer(buf), ec);
            if (ec)
                break;
            fast_got.append(buf, n);
        }
    };
    constexpr int events = 120; // ~2 MB: far past the slow browser's 256 KiB cap
    for (int i = 0; i < events; ++i) {
        events::hub(*t.app).broadcast("metrics", payload);
        t.settle();
        drain_fast();
    }
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (std::chrono::steady_clock::now() < deadline && fast_got.size() < events * event.size()) {
        t.settle();
        drain_fast();
    }
    CHECK(events::hub(*t.app).dropped() == 1);
    CHECK(events::hub(*t.app).clients() == 1); // the slow one is gone, the fast one stays

    std::size_t count = 0;
    for (auto pos = fast_got.find(event); pos != std::string::npos;
         pos = fast_got.find(event, pos + event.size()))
        ++count;
    CHECK(count == events);

    // The slow browser finds its stream ended (EventSource would reconnect).
    slow.non_blocking(true);
    boost::system::error_code ec;
    std::size_t slow_bytes = 0;
    char buf[65536];
    const auto slow_deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (std::chrono::steady_clock::now() < slow_deadline) {
        t.settle();
        auto n = slow.read_some(asio::buffer(buf), ec);
        if (ec == asio::error::would_block)
            continue;
        if (ec)
            break;
        slow_bytes += n;
    }
    CHECK(ec == asio::error::eof);
    CHECK(slow_bytes < events * event.size());

    fast.close();
    acceptor.close();
    t.settle();
}
