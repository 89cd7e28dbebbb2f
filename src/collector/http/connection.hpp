// One browser connection: read a request, answer it, repeat; GET /api/stream turns the
// connection into a Server-Sent Events stream, GET /api/ws (an upgrade) into a WebSocket
// carrying the same events. Templated on the stream so the tests drive it
// over beast::test::stream; server.cpp instantiates it once for beast::tcp_stream.
//
// This header pulls in Beast's HTTP reader and writer: include it only where a connection is
// instantiated, never from a widely-included header.
#pragma once

#include "collector/agents/agent_link.hpp"
#include "collector/http/events.hpp"
#include "collector/http/routes.hpp"
#include "collector/http/sse.hpp"
#include "collector/http/ui_assets.hpp"
#include "collector/http/upload.hpp"
#include "collector/http/ws_events.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/stream_traits.hpp>
#include <boost/beast/http/buffer_body.hpp>
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
    // Recordings stream through the import in blocks, so memory does not bound them: disk does.
    std::uint64_t import_body = std::uint64_t{64} << 30;
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
// (Over TLS, the deadline and the socket are the lowest layer's.)
template <class Stream>
void arm_timeout(Stream& stream, std::chrono::seconds timeout) {
    if constexpr (requires { stream.expires_after(timeout); })
        stream.expires_after(timeout);
    else if constexpr (requires { stream.next_layer().expires_after(timeout); })
        stream.next_layer().expires_after(timeout);
}

template <class Stream>
void close_stream(Stream& stream) {
    boost::system::error_code ignored;
    if constexpr (requires { stream.socket(); })
        stream.socket().shutdown(asio::ip::tcp::socket::shutdown_both, ignored);
    else if constexpr (requires { stream.next_layer().socket(); })
        stream.next_layer().socket().shutdown(asio::ip::tcp::socket::shutdown_both, ignored);
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
        else if constexpr (requires { stream.next_layer().expires_never(); })
            stream.next_layer().expires_never();
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
    sse_client client(events::hub(app), stream.get_executor());
    client.on_drop = [&stream] { boost::beast::get_lowest_layer(stream).close(); };
    push_initial_events(app, client);
    co_await (write_events(stream, client, limits) || watch_for_close(stream));
}

// Up to `want` bytes of a body into `into`: first what was read with the header, then the
// socket, read after read until the block is full or, once something is there, the parse of
// the previous block (`fed`) is done. So a fast upload fills whole blocks and a slow one is
// parsed as it comes.
template <class Stream>
asio::awaitable<void> read_block(Stream& stream, boost::beast::flat_buffer& buffer, char* into,
                                 std::size_t want, std::size_t& got, boost::system::error_code& ec,
                                 std::chrono::seconds timeout, const bool& fed) {
    got = std::min(want, buffer.size());
    asio::buffer_copy(asio::buffer(into, got), buffer.data());
    buffer.consume(got);
    while (got < want && (got == 0 || !fed)) {
        arm_timeout(stream, timeout);
        std::size_t n = 0;
        std::tie(ec, n) =
            co_await stream.async_read_some(asio::buffer(into + got, want - got), use_nothrow);
        got += n;
        if (ec)
            co_return;
    }
}

inline asio::awaitable<void> feed_block(upload& up, std::string_view data, bool& ok, bool& fed) {
    ok = co_await up.feed(data);
    fed = true;
}

// POST /api/sessions/import: the body is read in blocks and fed to the import as it
// arrives, so an upload of any size needs two blocks of memory here. `whole` says whether the
// body was read to its end (the connection may then serve another request).
template <class Stream>
asio::awaitable<http_response> serve_import(app_context& app, Stream& stream,
                                            boost::beast::flat_buffer& buffer,
                                            http::request_parser<http::string_body>& header,
                                            const connection_limits& limits, bool& whole) {
    whole = false;
    // What an answer needs of the request, kept apart: the header parser is moved from below.
    http_request req{header.get().method(), header.get().target(), header.get().version()};
    req.keep_alive(header.get().keep_alive());
    if (header.content_length() && *header.content_length() == 0)
        co_return make_error(req, http::status::bad_request, "empty",
                             "send a perf.data file or perf script text as the body");
    std::optional<std::uint64_t> declared;
    if (header.content_length())
        declared = *header.content_length();
    auto up = upload::start(app, declared, header.get().target());
    if (!up)
        co_return busy_importing(req);
    const auto end = app.stops.on_stop([up] { up->cancel(); });
    std::vector<char> block(std::size_t{4} << 20);
    if (!header.chunked() && declared) {
        // A known length: the bytes go straight from the socket into a block, a megabyte a
        // read, without the parser's small copies, and the next block is read while the pool
        // parses the last one.
        using namespace asio::experimental::awaitable_operators;
        std::vector<char> next(block.size());
        std::uint64_t left = *declared;
        auto want = [&] {
            return static_cast<std::size_t>(std::min<std::uint64_t>(left, block.size()));
        };
        std::size_t got = 0;
        boost::system::error_code ec;
        bool fed = true;
        co_await read_block(stream, buffer, block.data(), want(), got, ec, limits.io_timeout, fed);
        for (;;) {
            if (ec) {
                up->abandon();
                co_return http_response{}; // the client left: nobody to answer
            }
            left -= got;
            bool ok = true;
            const std::string_view ready(block.data(), got);
            if (left == 0) {
                ok = co_await up->feed(ready);
                whole = ok;
                co_return co_await up->finish(req);
            }
            std::size_t next_got = 0;
            fed = false;
            co_await (feed_block(*up, ready, ok, fed) &&
                      read_block(stream, buffer, next.data(), want(), next_got, ec,
                                 limits.io_timeout, fed));
            if (!ok)
                co_return co_await up->finish(req); // why it failed; the rest is not read
            std::swap(block, next);
            got = next_got;
        }
    }
    // Chunked: the parser takes the chunks apart.
    http::request_parser<http::buffer_body> body{std::move(header)};
    body.body_limit(limits.import_body);
    while (!body.is_done()) {
        body.get().body().data = block.data();
        body.get().body().size = block.size();
        arm_timeout(stream, limits.io_timeout);
        auto [ec, n] = co_await http::async_read(stream, buffer, body, use_nothrow);
        if (ec == http::error::need_buffer)
            ec = {};
        const std::size_t got = block.size() - body.get().body().size;
        if (!ec && got > 0 && !co_await up->feed(std::string_view(block.data(), got)))
            co_return co_await up->finish(req); // why it failed; the rest is not read
        if (ec) {
            up->abandon();
            if (ec == http::error::body_limit)
                co_return too_large(req.version());
            co_return http_response{}; // the client left: nobody to answer
        }
    }
    whole = true;
    co_return co_await up->finish(req);
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
        const auto path = parser.get().target().substr(0, parser.get().target().find('?'));
        const bool is_import = path == "/api/sessions/import";
        const std::uint64_t body_limit = is_import ? limits.import_body : limits.request_body;
        parser.body_limit(body_limit); // still applies to a chunked body as it arrives
        const auto declared = parser.content_length();
        boost::system::error_code ec;
        if (declared && *declared > body_limit) {
            ec = http::error::body_limit; // refused before a byte of it is read
        } else if (is_import && parser.get().method() == http::verb::post) {
            http_response res;
            bool whole = false;
            if (auto refused = check_access(app, parser.get()))
                res = std::move(*refused);
            else
                res = co_await detail::serve_import(app, stream, buffer, parser, limits, whole);
            if (res.result_int() == 0)
                break; // the client left mid-upload
            res.keep_alive(whole && res.keep_alive());
            detail::add_security_headers(res);
            detail::arm_timeout(stream, limits.io_timeout);
            co_await http::async_write(stream, res, detail::use_nothrow);
            if (!res.keep_alive())
                break;
            continue;
        } else
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
        const auto route = target.substr(0, target.find('?'));
        const bool events = get && route == "/api/stream";
        const bool ws_events = get && route == "/api/ws" && detail::wants_websocket(req);
        // (Ifs, not ?: — GCC 12 mis-compiles co_await inside a conditional expression.)
        http_response res;
        if (ws_events) {
            if (auto refused = check_access(app, req)) { // Host, Origin and the token
                res = std::move(*refused);
            } else {
                co_await detail::serve_ws_events(app, stream, std::move(req), limits.io_timeout,
                                                 limits.heartbeat);
                break;
            }
        } else if ((target.rfind("/api/", 0) == 0 && !events) || (!get && !head)) {
            res = co_await handle_request(app, std::move(req)); // checks Host and Origin
        } else if (auto refused = check_access(app, req)) {
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
