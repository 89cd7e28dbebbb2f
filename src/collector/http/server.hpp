// The HTTP listener: one coroutine per browser connection. No Beast in this header.
#pragma once

#include "collector/context.hpp"

#include <boost/asio/awaitable.hpp>
#include <boost/asio/ip/tcp.hpp>

namespace collector {

asio::awaitable<void> serve_http(app_context& app, asio::ip::tcp::acceptor& acceptor);

} // namespace collector
