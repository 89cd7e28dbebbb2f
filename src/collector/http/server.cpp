#include "collector/http/server.hpp"

#include "collector/http/routes.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/write.hpp>
#include <boost/json/serialize.hpp>

#include <iostream>

namespace collector {
namespace beast = boost::beast;
using asio::ip::tcp;
constexpr auto use_nothrow = asio::as_tuple(asio::use_awaitable);

namespace {

constexpr std::size_t max_request_body = std::size_t{1} << 20;
constexpr auto io_timeout = std::chrono::seconds(30);

http_response too_large(unsigned version) {
    http_response res{http::status::payload_too_large, version};
    res.set(http::field::content_type, "application/json");
    res.body() = R"({"error":{"code":"too_large","message":"request body over 1 MiB"}})";
    res.keep_alive(false);
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
        auto [ec, n] = co_await http::async_read(stream, buffer, parser, use_nothrow);
        if (ec == http::error::body_limit) {
            auto res = too_large(parser.get().version());
            co_await http::async_write(stream, res, use_nothrow);
            break;
        }
        if (ec)
            break; // closed, timed out, or not HTTP: nothing to answer
        auto res = co_await handle_request(app, parser.release());
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
