#include "collector/http/connection.hpp"

#include "collector/http/access.hpp"
#include "collector/http/byte_stream.hpp"
#include "collector/http/events.hpp"
#include "collector/http/sse.hpp"
#include "collector/http/ui_assets.hpp"
#include "collector/http/upload.hpp"
#include "collector/http/ws_events.hpp"
#include "collector/log.hpp"
#include "protocol/pairing.hpp"
#include "protocol/use_nothrow.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/buffer_body.hpp>
#include <boost/beast/http/empty_body.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/serializer.hpp>
#include <boost/beast/http/write.hpp>

#include <algorithm>
#include <array>
#include <optional>
#include <tuple>
#include <vector>

namespace collector {

void push_initial_events(app_context& app, sse_client& client) {
    for (auto& event : events::first_picture(app))
        client.push(std::make_shared<const std::string>(std::move(event)));
}

http_response ui_response(app_context& app, const http_request& req) {
    http_response res{http::status::not_found, req.version()};
    res.keep_alive(req.keep_alive());
    const std::string_view target(req.target().data(), req.target().size());
    const auto presented = app.api_token.empty() ? std::nullopt : query_parameter(target, "code");
    auto file = find_ui_file(req.target(), app.cfg.ui_dir);
    if (presented) {
        // The one-time sign-in link: its code gets the cookie and the UI at "/", and is spent
        // (the next link is printed); a spent or wrong one is refused.
        res.set(http::field::cache_control, "no-store");
        if (app.sign_in.redeem(*presented)) {
            res.result(http::status::see_other);
            res.set(http::field::set_cookie,
                    sign_in_cookie(app.api_token, app.http_tls != nullptr));
            res.set(http::field::location, "/");
            log("a browser signed in with the sign-in link; the next one: " + app.ui_url +
                "?code=" + app.sign_in.current());
        } else {
            res.result(http::status::unauthorized);
            res.set(http::field::content_type, "text/plain; charset=utf-8");
            res.body() = "This sign-in link was used already, or is not this collector's. Open "
                         "the newest link perfwire-collector printed (UI and API on "
                         "http://…/?code=…; each use prints the next), or open the UI and paste "
                         "the access token.\n";
        }
    } else if (!file) {
        res.set(http::field::content_type, "application/json");
        res.body() = R"({"error":{"code":"not_found","message":"no such resource"}})";
    } else if (req[http::field::if_none_match] == file->etag) {
        res.result(http::status::not_modified);
        res.set(http::field::etag, file->etag);
    } else {
        res.result(http::status::ok);
        res.set(http::field::content_type, file->mime);
        res.set(http::field::etag, file->etag);
        res.set(http::field::cache_control, "no-cache");
        res.body() = std::move(file->content);
    }
    res.prepare_payload();
    return res;
}

namespace {

http_response too_large(unsigned version) {
    http_response res{http::status::payload_too_large, version};
    res.set(http::field::content_type, "application/json");
    res.body() = R"({"error":{"code":"too_large","message":"request body too large"}})";
    res.keep_alive(false);
    res.prepare_payload();
    return res;
}

// Headers on every answer: no other site may frame the UI (clickjacking) or make the
// browser guess a type, and the page runs only its own scripts.
void add_security_headers(http_response& res) {
    res.set(http::field::x_frame_options, "DENY");
    res.set("X-Content-Type-Options", "nosniff");
    res.set("Referrer-Policy", "no-referrer");
    if (res.find("Content-Security-Policy") == res.end()) // an answer may set a stricter one
        res.set("Content-Security-Policy",
                "default-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
                "frame-ancestors 'none'; base-uri 'none'; form-action 'self'");
}

using protocol::use_nothrow;

// Writes queued events until the browser falls too far behind or the stream fails.
asio::awaitable<void> write_events(byte_stream& stream, sse_client& client,
                                   const connection_limits& limits) {
    for (;;) {
        auto next = co_await client.next(limits.heartbeat);
        if (!next)
            break; // dropped for falling behind: EventSource reconnects
        // Reset the expiry before each write: the request's timeout must not end the stream,
        // and a browser that stops reading for that long is gone.
        stream.expires_after(limits.io_timeout);
        auto [ec, n] = co_await asio::async_write(stream, asio::buffer(*next), use_nothrow);
        if (ec)
            break;
        client.written(next->size());
    }
    // Ends the reader below too (its read completes), so the pair finishes together.
    stream.shutdown();
}

// A browser sends nothing after its GET; a completed read means it left. Noticing here frees
// its queue at once instead of at the next failed write.
asio::awaitable<void> watch_for_close(byte_stream& stream) {
    std::array<char, 256> scratch;
    for (;;) {
        stream.expires_never(); // the writer re-arms the deadline for its own writes
        auto [ec, n] = co_await stream.async_read_some(asio::buffer(scratch.data(), scratch.size()),
                                                       use_nothrow);
        if (ec)
            co_return;
    }
}

// GET /api/stream: the header without Content-Length or chunking (so no prepare_payload),
// then raw event blocks until the browser leaves or falls too far behind.
asio::awaitable<void> serve_events(app_context& app, byte_stream& stream, unsigned version,
                                   const connection_limits& limits) {
    using namespace asio::experimental::awaitable_operators;
    http::response<http::empty_body> res{http::status::ok, version};
    res.set(http::field::content_type, "text/event-stream");
    res.set(http::field::cache_control, "no-store");
    res.keep_alive(true);
    http::response_serializer<http::empty_body> sr{res};
    stream.expires_after(limits.io_timeout);
    auto [hec, hn] = co_await http::async_write_header(stream, sr, use_nothrow);
    if (hec)
        co_return;
    sse_client client(events::hub(app), stream.get_executor());
    client.on_drop = [&stream] { stream.close(); };
    push_initial_events(app, client);
    co_await (write_events(stream, client, limits) || watch_for_close(stream));
}

// Up to `want` bytes of a body into `into`: first what was read with the header, then the
// socket, read after read until the block is full or, once something is there, the parse of
// the previous block (`fed`) is done. So a fast upload fills whole blocks and a slow one is
// parsed as it comes.
asio::awaitable<void> read_block(byte_stream& stream, boost::beast::flat_buffer& buffer, char* into,
                                 std::size_t want, std::size_t& got, boost::system::error_code& ec,
                                 std::chrono::seconds timeout, const bool& fed) {
    got = std::min(want, buffer.size());
    asio::buffer_copy(asio::buffer(into, got), buffer.data());
    buffer.consume(got);
    while (got < want && (got == 0 || !fed)) {
        stream.expires_after(timeout);
        std::size_t n = 0;
        std::tie(ec, n) =
            co_await stream.async_read_some(asio::buffer(into + got, want - got), use_nothrow);
        got += n;
        if (ec)
            co_return;
    }
}

asio::awaitable<void> feed_block(upload& up, std::string_view data, bool& ok, bool& fed) {
    ok = co_await up.feed(data);
    fed = true;
}

// POST /api/sessions/import: the body is read in blocks and fed to the import as it
// arrives, so an upload of any size needs two blocks of memory here. `whole` says whether the
// body was read to its end (the connection may then serve another request).
asio::awaitable<http_response> serve_import(app_context& app, byte_stream& stream,
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
        stream.expires_after(limits.io_timeout);
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

} // namespace

asio::awaitable<void> serve_connection(app_context& app, byte_stream& stream,
                                       connection_limits limits) {
    namespace beast = boost::beast;
    beast::flat_buffer buffer;
    for (;;) {
        stream.expires_after(limits.io_timeout);
        http::request_parser<http::string_body> parser;
        parser.header_limit(static_cast<std::uint32_t>(limits.header));
        // Beast checks Content-Length against the limit while reading the header, before the
        // target is known: read the header under the largest limit, then apply the right one.
        parser.body_limit(std::max(limits.request_body, limits.import_body));
        auto [hec, hn] = co_await http::async_read_header(stream, buffer, parser, use_nothrow);
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
                res = co_await serve_import(app, stream, buffer, parser, limits, whole);
            if (res.result_int() == 0)
                break; // the client left mid-upload
            res.keep_alive(whole && res.keep_alive());
            add_security_headers(res);
            stream.expires_after(limits.io_timeout);
            co_await http::async_write(stream, res, use_nothrow);
            if (!res.keep_alive())
                break;
            continue;
        } else
            std::tie(ec, std::ignore) =
                co_await http::async_read(stream, buffer, parser, use_nothrow);
        if (ec == http::error::body_limit) {
            auto res = too_large(parser.get().version());
            co_await http::async_write(stream, res, use_nothrow);
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
        const bool ws_events = get && route == "/api/ws" && wants_websocket(req);
        // (Ifs, not ?: — GCC 12 mis-compiles co_await inside a conditional expression.)
        http_response res;
        if (ws_events) {
            if (auto refused = check_access(app, req)) { // Host, Origin and the token
                res = std::move(*refused);
            } else {
                co_await serve_ws_events(app, stream, std::move(req), limits.io_timeout,
                                         limits.heartbeat);
                break;
            }
        } else if ((target.rfind("/api/", 0) == 0 && !events) || (!get && !head)) {
            res = co_await handle_request(app, std::move(req)); // checks Host and Origin
        } else if (auto refused = check_access(app, req)) {
            res = std::move(*refused);
        } else if (events) {
            co_await serve_events(app, stream, req.version(), limits);
            break;
        } else {
            res = ui_response(app, req);
            if (head)
                res.body().clear(); // Content-Length stays that of the GET
        }
        add_security_headers(res);
        stream.expires_after(limits.io_timeout);
        auto [wec, wn] = co_await http::async_write(stream, res, use_nothrow);
        if (wec || !res.keep_alive())
            break;
    }
    stream.shutdown();
}

} // namespace collector
