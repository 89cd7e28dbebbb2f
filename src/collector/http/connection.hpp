// One browser connection: read a request, answer it, repeat; GET /api/stream turns the
// connection into a Server-Sent Events stream, GET /api/ws (an upgrade) into a WebSocket
// carrying the same events. Written against byte_stream (byte_stream.hpp), so it is compiled
// once (connection.cpp) for TCP, TLS and the tests' streams alike.
#pragma once

#include "collector/context.hpp"
#include "collector/http/routes.hpp"

#include <boost/asio/awaitable.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>

namespace collector {

class byte_stream;
class sse_client;

struct connection_limits {
    std::size_t request_body = std::size_t{1} << 20;
    // Recordings stream through the import in blocks, so memory does not bound them: disk does.
    std::uint64_t import_body = std::uint64_t{64} << 30;
    std::size_t header = std::size_t{16} << 10;
    std::chrono::seconds io_timeout{30};
    std::chrono::steady_clock::duration heartbeat = std::chrono::seconds(15);
};

asio::awaitable<void> serve_connection(app_context& app, byte_stream& stream,
                                       connection_limits limits = {});

// The response to a request for a UI file (or 404/304).
http_response ui_response(app_context& app, const http_request& req);

// The first events of a fresh stream: a new page needs the current picture, not only what
// changes next.
void push_initial_events(app_context& app, sse_client& client);

} // namespace collector
