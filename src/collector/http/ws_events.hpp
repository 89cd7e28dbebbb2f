// GET /api/ws: the live stream of GET /api/stream over a WebSocket, for the UI. A browser
// holds at most six HTTP/1.1 connections per host, shared by all its tabs, and an EventSource
// holds one for as long as its tab is open: a sixth tab leaves no connection for anyone's
// requests. WebSockets do not count against that pool, so every tab streams over one and
// asks its views over the pool. The events are the SSE hub's, byte for byte, one text
// message each ("event: KIND\ndata: JSON\n\n", or ": keep-alive\n\n"); /api/stream stays
// SSE for scripts and curl. Beast's WebSocket is heavy: it is compiled in ws_events.cpp alone.
#pragma once

#include "collector/http/routes.hpp"

#include <boost/asio/awaitable.hpp>

#include <chrono>

namespace collector {

class byte_stream;

// Whether a request asks to become a WebSocket.
bool wants_websocket(const http_request& req);

// The upgrade accepted (within `io_timeout`), then each queued event sent as a text message
// until the browser leaves or falls more than the hub's cap behind (dropped: the page opens a
// new one). Frames from the browser (it sends none but control frames) are read, at most
// 4 KiB each, so pings are answered and a close is seen at once.
asio::awaitable<void> serve_ws_events(app_context& app, byte_stream& stream, http_request req,
                                      std::chrono::seconds io_timeout,
                                      std::chrono::steady_clock::duration heartbeat);

} // namespace collector
