// GET /api/ws: the live stream of GET /api/stream over a WebSocket, for the UI. A browser
// holds at most six HTTP/1.1 connections per host, shared by all its tabs, and an EventSource
// holds one for as long as its tab is open: a sixth tab leaves no connection for anyone's
// requests. WebSockets do not count against that pool, so every tab streams over one and
// asks its views over the pool. The events are the SSE hub's, byte for byte, one text
// message each ("event: KIND\ndata: JSON\n\n", or ": keep-alive\n\n"); /api/stream stays
// SSE for scripts and curl. Included by connection.hpp only (Beast's WebSocket is heavy).
#pragma once

#include "collector/http/events.hpp"
#include "collector/http/sse.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/message.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/beast/websocket/stream.hpp>

#include <chrono>

namespace collector {

struct app_context;
void push_initial_events(app_context& app, sse_client& client); // connection.hpp

namespace detail {

// Whether a request asks to become a WebSocket.
template <class Request>
bool wants_websocket(const Request& req) {
    return boost::beast::websocket::is_upgrade(req);
}

// The upgrade accepted (within `io_timeout`), then each queued event sent as a text message
// until the browser leaves or falls more than the hub's cap behind (dropped: the page opens a
// new one). Frames from the browser (it sends none but control frames)
// are read, at most 4 KiB each, so pings are answered and a close is seen at once.
template <class Stream, class Request>
asio::awaitable<void> serve_ws_events(app_context& app, Stream& stream, Request req,
                                      std::chrono::seconds io_timeout,
                                      std::chrono::steady_clock::duration heartbeat) {
    namespace websocket = boost::beast::websocket;
    using namespace asio::experimental::awaitable_operators;
    constexpr auto nothrow = asio::as_tuple(asio::use_awaitable);
    if constexpr (requires { stream.expires_never(); })
        stream.expires_never(); // the WebSocket keeps its own timeouts from here
    else if constexpr (requires { stream.next_layer().expires_never(); })
        stream.next_layer().expires_never(); // (over TLS: the TCP stream's)
    websocket::stream<Stream&> ws(stream);
    websocket::stream_base::timeout limits{};
    limits.handshake_timeout = io_timeout;
    limits.idle_timeout = websocket::stream_base::none();
    limits.keep_alive_pings = false;
    ws.set_option(limits);
    ws.read_message_max(4096);
    auto [aec] = co_await ws.async_accept(req, nothrow);
    if (aec)
        co_return;
    ws.text(true);
    sse_client client(events::hub(app), stream.get_executor());
    bool closed = false;
    client.on_drop = [&] {
        closed = true;
        boost::beast::get_lowest_layer(stream).close();
    };
    push_initial_events(app, client);
    auto writer = [&]() -> asio::awaitable<void> {
        for (;;) {
            auto next = co_await client.next(heartbeat);
            if (!next || closed)
                break;
            // A browser that stops reading is dropped by the hub past its cap (on_drop closes
            // the socket, so this write ends too).
            auto [ec, n] = co_await ws.async_write(asio::buffer(*next), nothrow);
            if (ec)
                break;
            client.written(next->size());
        }
        boost::beast::get_lowest_layer(stream).close(); // ends the reader too
    };
    auto reader = [&]() -> asio::awaitable<void> {
        boost::beast::flat_buffer incoming;
        for (;;) {
            auto [ec, n] = co_await ws.async_read(incoming, nothrow);
            if (ec)
                co_return;
            incoming.consume(incoming.size()); // nothing a page sends is used
        }
    };
    co_await (writer() || reader());
}

} // namespace detail
} // namespace collector
