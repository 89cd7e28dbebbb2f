#include "collector/http/server.hpp"

#include "collector/accepting.hpp"
#include "collector/http/byte_stream.hpp"
#include "collector/http/connection.hpp"
#include "collector/log.hpp"
#include "protocol/error.hpp"
#include "protocol/use_nothrow.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/ssl/ssl_stream.hpp>

namespace collector {
namespace beast = boost::beast;
using asio::ip::tcp;
using protocol::use_nothrow;

namespace {

asio::awaitable<void> http_session(app_context& app, beast::tcp_stream tcp,
                                   connection_budget::slot) {
    stream_of<beast::tcp_stream> stream(std::move(tcp));
    // A stop ends the connection wherever it is: reading a request, streaming events, or
    // reading an import's body (whose import is then dropped).
    const auto end = app.stops.on_stop([&stream] { stream.close(); });
    co_await serve_connection(app, stream);
}

// --http-tls: the handshake (10 s), then the same connection over TLS.
asio::awaitable<void> https_session(app_context& app, beast::tcp_stream tcp,
                                    connection_budget::slot) {
    stream_of<beast::ssl_stream<beast::tcp_stream>> stream(std::move(tcp), *app.http_tls);
    const auto end = app.stops.on_stop([&stream] { stream.close(); });
    stream.expires_after(std::chrono::seconds(10));
    auto [ec] = co_await stream.next().async_handshake(asio::ssl::stream_base::server, use_nothrow);
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
