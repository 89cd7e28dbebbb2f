// One browser connection: read a request, answer it, repeat; GET /api/stream turns the
// connection into a Server-Sent Events stream. Templated on the stream so the tests drive it
// over beast::test::stream; server.cpp instantiates it once for beast::tcp_stream.
//
// This header pulls in Beast's HTTP reader and writer: include it only where a connection is
// instantiated, never from a widely-included header.
#pragma once

#include "collector/agents/agent_link.hpp"
#include "collector/http/routes.hpp"
#include "collector/http/sse.hpp"
#include "collector/http/ui_assets.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/empty_body.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/serializer.hpp>
#include <boost/beast/http/write.hpp>
#include <boost/json/serialize.hpp>

#include <algorithm>
#include <array>
#include <chrono>
#include <tuple>

namespace collector {

struct connection_limits {
    std::size_t request_body = std::size_t{1} << 20;
    std::size_t import_body = std::size_t{512} << 20; // recordings may be uploaded
    std::size_t header = std::size_t{16} << 10;
    std::chrono::seconds io_timeout{30};
    std::chrono::steady_clock::duration heartbeat = std::chrono::seconds(15);
};

template <class Stream>
asio::awaitable<void> serve_connection(app_context& app, Stream& stream,
                                       connection_limits limits = {});

// The response to a request for a UI file (or 404/304).
http_response ui_response(app_context& app, const http_request& req);

// The first events of a fresh stream: a new page needs the current picture, not only what
// changes next.
void push_initial_events(app_context& app, sse_client& client);

namespace detail {

constexpr auto use_nothrow = asio::as_tuple(asio::use_awaitable);

// Streams with a deadline (beast::tcp_stream) get it reset before each read or write; others
// (test streams) have none.
template <class Stream>
void arm_timeout(Stream& stream, std::chrono::seconds timeout) {
    if constexpr (requires { stream.expires_after(timeout); })
        stream.expires_after(timeout);
}

template <class Stream>
void close_stream(Stream& stream) {
    boost::system::error_code ignored;
    if constexpr (requires { stream.socket(); })
        stream.socket().shutdown(asio::ip::tcp::socket::shutdown_both, ignored);
    else
        stream.close();
}

http_response too_large(unsigned version);

// Headers on every answer: no other site may frame the UI (clickjacking) or make the
// browser guess a type, and the page runs only its own scripts.
void add_security_headers(http_response& res);

// Writes queued events until the browser falls too far behind or the stream fails.
template <class Stream>
asio::awaitable<void> write_events(Stream& stream, sse_client& client,
                                   const connection_limits& limits) {
    for (;;) {
        auto next = co_await client.next(limits.heartbeat);
        if (!next)
            break; // dropped for falling behind: EventSource reconnects
        // Reset the expiry before each write: the request's timeout must not end the stream,
        // and a browser that stops reading for that long is gone.
        arm_timeout(stream, limits.io_timeout);
        auto [ec, n] = co_await asio::async_write(stream, asio::buffer(*next), use_nothrow);
        if (ec)
            break;
        client.written(next->size());
    }
    // Ends the reader below too (its read completes), so the pair finishes together.
    close_stream(stream);
}

// A browser sends nothing after its GET; a completed read means it left. Noticing here frees
// its queue at once instead of at the next failed write.
template <class Stream>
asio::awaitable<void> watch_for_close(Stream& stream) {
    std::array<char, 256> scratch;
    for (;;) {
        if constexpr (requires { stream.expires_never(); })
            stream.expires_never(); // the writer re-arms the deadline for its own writes
        auto [ec, n] = co_await stream.async_read_some(asio::buffer(scratch.data(), scratch.size()),
                                                       use_nothrow);
        if (ec)
            co_return;
    }
}

// GET /api/stream: the header without Content-Length or chunking (so no prepare_payload),
// then raw event blocks until the browser leaves or falls too far behind.
template <class Stream>
asio::awaitable<void> serve_events(app_context& app, Stream& stream, unsigned version,
                                   const connection_limits& limits) {
    using namespace asio::experimental::awaitable_operators;
    http::response<http::empty_body> res{http::status::ok, version};
    res.set(http::field::content_type, "text/event-stream");
    res.set(http::field::cache_control, "no-store");
    res.keep_alive(true);
    http::response_serializer<http::empty_body> sr{res};
    arm_timeout(stream, limits.io_timeout);
    auto [hec, hn] = co_await http::async_write_header(stream, sr, use_nothrow);
    if (hec)
        co_return;
    sse_client client(app.sse, stream.get_executor());
    push_initial_events(app, client);
    co_await (write_events(stream, client, limits) || watch_for_close(stream));
}

} // namespace detail

template <class Stream>
asio::awaitable<void> serve_connection(app_context& app, Stream& stream, connection_limits limits) {
    namespace beast = boost::beast;
    beast::flat_buffer buffer;
    for (;;) {
        detail::arm_timeout(stream, limits.io_timeout);
        http::request_parser<http::string_body> parser;
        parser.header_limit(static_cast<std::uint32_t>(limits.header));
        // Beast checks Content-Length against the limit while reading the header, before the
        // target is known: read the header under the largest limit, then apply the right one.
        parser.body_limit(std::max(limits.request_body, limits.import_body));
        auto [hec, hn] =
            co_await http::async_read_header(stream, buffer, parser, detail::use_nothrow);
        if (hec)
            break;
        const std::size_t body_limit = parser.get().target() == "/api/sessions/import"
                                           ? limits.import_body
                                           : limits.request_body;
        parser.body_limit(body_limit); // still applies to a chunked body as it arrives
        const auto declared = parser.content_length();
        boost::system::error_code ec;
        if (declared && *declared > body_limit)
            ec = http::error::body_limit; // refused before a byte of it is read
        else
            std::tie(ec, std::ignore) =
                co_await http::async_read(stream, buffer, parser, detail::use_nothrow);
        if (ec == http::error::body_limit) {
            auto res = detail::too_large(parser.get().version());
            co_await http::async_write(stream, res, detail::use_nothrow);
            break;
        }
        if (ec)
            break; // closed, timed out, or not HTTP: nothing to answer
        auto req = parser.release();
        const std::string_view target(req.target().data(), req.target().size());
        const bool head = req.method() == http::verb::head;
        const bool get = req.method() == http::verb::get;
        const bool events = get && target.substr(0, target.find('?')) == "/api/stream";
        // (Ifs, not ?: — GCC 12 mis-compiles co_await inside a conditional expression.)
        http_response res;
        if ((target.rfind("/api/", 0) == 0 && !events) || (!get && !head)) {
            res = co_await handle_request(app, std::move(req)); // checks Host and Origin
        } else if (auto refused = check_request_origin(app, req)) {
            res = std::move(*refused);
        } else if (events) {
            co_await detail::serve_events(app, stream, req.version(), limits);
            break;
        } else {
            res = ui_response(app, req);
            if (head)
                res.body().clear(); // Content-Length stays that of the GET
        }
        detail::add_security_headers(res);
        detail::arm_timeout(stream, limits.io_timeout);
        auto [wec, wn] = co_await http::async_write(stream, res, detail::use_nothrow);
        if (wec || !res.keep_alive())
            break;
    }
    detail::close_stream(stream);
}

} // namespace collector
