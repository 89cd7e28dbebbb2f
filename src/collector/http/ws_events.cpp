#include "collector/http/ws_events.hpp"

#include "collector/http/byte_stream.hpp"
#include "collector/http/connection.hpp"
#include "collector/http/events.hpp"
#include "collector/http/sse.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/websocket/stream.hpp>

namespace collector {

bool wants_websocket(const http_request& req) {
    return boost::beast::websocket::is_upgrade(req);
}

asio::awaitable<void> serve_ws_events(app_context& app, byte_stream& stream, http_request req,
                                      std::chrono::seconds io_timeout,
                                      std::chrono::steady_clock::duration heartbeat) {
    namespace websocket = boost::beast::websocket;
    using namespace asio::experimental::awaitable_operators;
    constexpr auto nothrow = asio::as_tuple(asio::use_awaitable);
    stream.expires_never(); // the WebSocket keeps its own timeouts from here
    websocket::stream<byte_stream&> ws(stream);
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
        stream.close();
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
        stream.close(); // ends the reader too
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

} // namespace collector
