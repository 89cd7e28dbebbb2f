#include "collector/http/sse.hpp"

#include <catch2/catch.hpp>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/use_future.hpp>

using namespace collector;

namespace {

std::string take(asio::io_context& io, sse_client& c, std::chrono::seconds heartbeat) {
    auto f = asio::co_spawn(io, c.next(heartbeat), asio::use_future);
    io.restart();
    io.run();
    auto buf = f.get();
    if (!buf)
        return "<dropped>";
    c.written(buf->size());
    return *buf;
}

} // namespace

TEST_CASE("SSE events are formatted byte for byte", "[collector][sse]") {
    CHECK(sse_hub::format("data_version", R"({"session_id":"s","chunks":3})") ==
          "event: data_version\ndata: {\"session_id\":\"s\",\"chunks\":3}\n\n");
    // Line breaks in data become more "data:" lines: no payload can end the event or start
    // another.
    CHECK(sse_hub::format("metrics", "a\n\nevent: targets\r\ndata: x\r") ==
          "event: metrics\ndata: a\ndata: \ndata: event: targets\ndata: data: x\ndata: \n\n");
}

TEST_CASE("SSE fan-out: every client gets each event once, a heartbeat when idle",
          "[collector][sse]") {
    asio::io_context io;
    sse_hub hub;
    sse_client a(hub, io.get_executor()), b(hub, io.get_executor());
    CHECK(hub.clients() == 2);
    hub.broadcast("targets", "[]");
    hub.broadcast("sessions", R"({"session_id":"x"})");
    CHECK(take(io, a, std::chrono::seconds(15)) == "event: targets\ndata: []\n\n");
    CHECK(take(io, a, std::chrono::seconds(15)) ==
          "event: sessions\ndata: {\"session_id\":\"x\"}\n\n");
    CHECK(take(io, b, std::chrono::seconds(15)) == "event: targets\ndata: []\n\n");
    // Nothing queued: a comment line keeps proxies and the browser from timing out.
    CHECK(take(io, a, std::chrono::seconds(0)) == ": keep-alive\n\n");
}

TEST_CASE("SSE: a slow client is dropped at its byte cap, the others keep going",
          "[collector][sse]") {
    asio::io_context io;
    sse_hub hub(1000);
    sse_client slow(hub, io.get_executor()), fast(hub, io.get_executor());
    const std::string payload(200, 'x');
    for (int i = 0; i < 10; ++i) {
        hub.broadcast("metrics", payload);
        CHECK(take(io, fast, std::chrono::seconds(15)).size() > 200); // fast keeps up
    }
    CHECK(slow.dropped());
    CHECK_FALSE(fast.dropped());
    CHECK(hub.dropped() == 1);
    CHECK(take(io, slow, std::chrono::seconds(15)) == "<dropped>");
    {
        sse_client gone(hub, io.get_executor());
        CHECK(hub.clients() == 3);
    }
    CHECK(hub.clients() == 2); // a client that leaves unregisters itself

    // One event larger than the cap (the targets of a big fleet) reaches a reader that keeps
    // up; the next one finds its queue at the cap only if it did not read.
    sse_client reader(hub, io.get_executor()), stalled(hub, io.get_executor());
    const std::string big(3000, 'y');
    hub.broadcast("targets", big);
    CHECK_FALSE(reader.dropped());
    CHECK_FALSE(stalled.dropped());
    CHECK(take(io, reader, std::chrono::seconds(15)).size() > big.size());
    hub.broadcast("targets", big);
    CHECK_FALSE(reader.dropped());
    CHECK(stalled.dropped());
}
