#include "collector/http/server.hpp"

#include "collector/accepting.hpp"
#include "collector/http/access.hpp"
#include "collector/http/connection.hpp"
#include "collector/http/events.hpp"
#include "collector/log.hpp"
#include "protocol/error.hpp"
#include "protocol/link_stream.hpp"
#include "protocol/pairing.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/ssl/ssl_stream.hpp>
#include <boost/beast/websocket/ssl.hpp>

namespace collector {
namespace beast = boost::beast;
using asio::ip::tcp;
constexpr auto use_nothrow = asio::as_tuple(asio::use_awaitable);

namespace detail {

http_response too_large(unsigned version) {
    http_response res{http::status::payload_too_large, version};
    res.set(http::field::content_type, "application/json");
    res.body() = R"({"error":{"code":"too_large","message":"request body too large"}})";
    res.keep_alive(false);
    res.prepare_payload();
    return res;
}

void add_security_headers(http_response& res) {
    res.set(http::field::x_frame_options, "DENY");
    res.set("X-Content-Type-Options", "nosniff");
    res.set("Referrer-Policy", "no-referrer");
    if (res.find("Content-Security-Policy") == res.end()) // an answer may set a stricter one
        res.set("Content-Security-Policy",
                "default-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
                "frame-ancestors 'none'; base-uri 'none'; form-action 'self'");
}

} // namespace detail

void push_initial_events(app_context& app, sse_client& client) {
    for (auto& event : events::first_picture(app))
        client.push(std::make_shared<const std::string>(std::move(event)));
}

http_response ui_response(app_context& app, const http_request& req) {
    http_response res{http::status::not_found, req.version()};
    res.keep_alive(req.keep_alive());
    const std::string_view target(req.target().data(), req.target().size());
    const auto presented = app.api_token.empty() ? std::nullopt : token_in_query(target);
    auto file = find_ui_file(req.target(), app.cfg.ui_dir);
    if (presented) {
        // The sign-in link: the right token gets the cookie and the UI at "/", so the token
        // leaves the address bar and the history; a wrong one is refused.
        res.set(http::field::cache_control, "no-store");
        if (protocol::constant_time_equal(app.api_token, *presented)) {
            res.result(http::status::see_other);
            res.set(http::field::set_cookie,
                    sign_in_cookie(app.api_token, app.http_tls != nullptr));
            res.set(http::field::location, "/");
        } else {
            res.result(http::status::unauthorized);
            res.set(http::field::content_type, "text/plain; charset=utf-8");
            res.body() = "This link's access token is not this collector's. Open the link "
                         "perfwire-collector printed at start (UI and API on http://…/?token=…).\n";
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

template asio::awaitable<void> serve_connection(app_context&, beast::tcp_stream&,
                                                connection_limits);
template asio::awaitable<void> serve_connection(app_context&, beast::ssl_stream<beast::tcp_stream>&,
                                                connection_limits);

namespace {

asio::awaitable<void> http_session(app_context& app, beast::tcp_stream stream,
                                   connection_budget::slot) {
    // A stop ends the connection wherever it is: reading a request, streaming events, or
    // reading an import's body (whose import is then dropped).
    const auto end = app.stops.on_stop([&stream] { stream.close(); });
    co_await serve_connection(app, stream);
}

// --http-tls: the handshake (10 s), then the same connection over TLS.
asio::awaitable<void> https_session(app_context& app, beast::tcp_stream tcp,
                                    connection_budget::slot) {
    beast::ssl_stream<beast::tcp_stream> stream(std::move(tcp), *app.http_tls);
    const auto end = app.stops.on_stop([&stream] { beast::get_lowest_layer(stream).close(); });
    beast::get_lowest_layer(stream).expires_after(std::chrono::seconds(10));
    auto [ec] = co_await stream.async_handshake(asio::ssl::stream_base::server, use_nothrow);
    if (ec)
        co_return; // a browser that refused the certificate, a scanner: nothing to say
    co_await serve_connection(app, stream);
}

} // namespace

asio::awaitable<void> serve_http(app_context& app, tcp::acceptor& acceptor) {
    budgeted_acceptor accepting(acceptor, app.connections, connection_budget::kind::http, "HTTP");
    for (;;) {
        auto socket = co_await accepting.next();
        if (!socket)
            co_return;
        auto& [s, slot] = *socket;
        auto failed = [](std::exception_ptr e) {
            if (e)
                log("HTTP connection failed: " + protocol::describe(e));
        };
        if (app.http_tls)
            asio::co_spawn(acceptor.get_executor(),
                           https_session(app, beast::tcp_stream(std::move(s)), std::move(slot)),
                           failed);
        else
            asio::co_spawn(acceptor.get_executor(),
                           http_session(app, beast::tcp_stream(std::move(s)), std::move(slot)),
                           failed);
    }
}

} // namespace collector
