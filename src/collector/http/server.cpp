#include "collector/http/server.hpp"

#include "collector/agents/agent_link.hpp"
#include "collector/http/routes.hpp"
#include "collector/http/sse.hpp"
#include "collector/http/ui_assets.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/empty_body.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/serializer.hpp>
#include <boost/beast/http/write.hpp>
#include <boost/json/serialize.hpp>

#include <boost/json/serialize.hpp>

#include <iostream>

namespace collector {
namespace beast = boost::beast;
using asio::ip::tcp;
constexpr auto use_nothrow = asio::as_tuple(asio::use_awaitable);

namespace {

constexpr std::size_t max_request_body = std::size_t{1} << 20;
constexpr std::size_t max_import_body = std::size_t{512} << 20;
constexpr auto io_timeout = std::chrono::seconds(30);

http_response too_large(unsigned version) {
    http_response res{http::status::payload_too_large, version};
    res.set(http::field::content_type, "application/json");
    res.body() = R"({"error":{"code":"too_large","message":"request body too large"}})";
    res.keep_alive(false);
    res.prepare_payload();
    return res;
}

// GET /api/stream: the header without Content-Length or chunking, then raw event blocks
// until the browser leaves or falls too far behind.
asio::awaitable<void> serve_events(app_context& app, beast::tcp_stream& stream, unsigned version) {
    http::response<http::empty_body> res{http::status::ok, version};
    res.set(http::field::content_type, "text/event-stream");
    res.set(http::field::cache_control, "no-store");
    res.keep_alive(true);
    http::response_serializer<http::empty_body> sr{res};
    stream.expires_after(io_timeout);
    auto [hec, hn] = co_await http::async_write_header(stream, sr, use_nothrow);
    if (hec)
        co_return;
    sse_client client(app.sse, stream.get_executor());
    // A fresh page needs the current picture, not just what changes next.
    boost::json::array targets;
    for (const auto& [id, weak] : app.targets)
        if (auto link = weak.lock(); link && link->introduced())
            targets.push_back(link->describe());
    client.push(std::make_shared<const std::string>(sse_hub::format(
        "status",
        boost::json::serialize(boost::json::object{
            {"version", PERFWIRE_VERSION}, {"agent_listener", app.agent_listen_address}}))));
    client.push(std::make_shared<const std::string>(
        sse_hub::format("targets", boost::json::serialize(targets))));
    for (;;) {
        auto next = co_await client.next(std::chrono::seconds(15));
        if (!next)
            break; // dropped for falling behind: EventSource reconnects
        // Reset the expiry before each write: the request's timeout must not end the stream.
        stream.expires_after(io_timeout);
        auto [ec, n] = co_await asio::async_write(stream, asio::buffer(*next), use_nothrow);
        if (ec)
            break;
        client.written(next->size());
    }
}

http_response ui_response(app_context& app, const http_request& req) {
    http_response res{http::status::not_found, req.version()};
    res.keep_alive(req.keep_alive());
    auto file = find_ui_file(req.target(), app.cfg.ui_dir);
    if (!file) {
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

asio::awaitable<void> http_session(app_context& app, beast::tcp_stream stream) {
    beast::flat_buffer buffer;
    for (;;) {
        stream.expires_after(io_timeout);
        http::request_parser<http::string_body> parser;
        parser.header_limit(16 << 10);
        parser.body_limit(max_request_body);
        auto [hec, hn] = co_await http::async_read_header(stream, buffer, parser, use_nothrow);
        if (hec)
            break;
        // Recordings may be uploaded; every other request is small.
        if (parser.get().target() == "/api/sessions/import")
            parser.body_limit(max_import_body);
        auto [ec, n] = co_await http::async_read(stream, buffer, parser, use_nothrow);
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
        const bool events = get && target.substr(0, target.find('?')) == "/api/stream";
        // (Ifs, not ?: — GCC 12 mis-compiles co_await inside a conditional expression.)
        http_response res;
        if ((target.rfind("/api/", 0) == 0 && !events) || (!get && !head)) {
            res = co_await handle_request(app, std::move(req)); // checks Host and Origin
        } else if (auto refused = check_request_origin(app, req)) {
            res = std::move(*refused);
        } else if (events) {
            co_await serve_events(app, stream, req.version());
            break;
        } else {
            res = ui_response(app, req);
            if (head)
                res.body().clear(); // Content-Length stays that of the GET
        }
        stream.expires_after(io_timeout);
        auto [wec, wn] = co_await http::async_write(stream, res, use_nothrow);
        if (wec || !res.keep_alive())
            break;
    }
    boost::system::error_code ignored;
    stream.socket().shutdown(tcp::socket::shutdown_both, ignored);
}

} // namespace

asio::awaitable<void> serve_http(app_context& app, tcp::acceptor& acceptor) {
    for (;;) {
        auto [ec, socket] = co_await acceptor.async_accept(use_nothrow);
        if (ec) {
            if (ec == asio::error::operation_aborted || !acceptor.is_open())
                co_return;
            continue;
        }
        asio::co_spawn(acceptor.get_executor(),
                       http_session(app, beast::tcp_stream(std::move(socket))),
                       [](std::exception_ptr e) {
                           if (e)
                               try {
                                   std::rethrow_exception(e);
                               } catch (const std::exception& x) {
                                   std::cerr
                                       << "perfwire-collector: HTTP connection failed: " << x.what()
                                       << "\n";
                               }
                       });
    }
}

} // namespace collector
