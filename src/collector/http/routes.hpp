// The HTTP API (docs/api.md): a request in, a response out, no socket — the server and the
// tests both call handle_request. One table maps (method, path pattern) to a handler; a path
// the table has with a method it does not take is 405, any other 404. Each handler parses the
// request, calls the part of the collector that does the work, and answers: session views in
// http/views.hpp, targets in http/target_routes.cpp, the fleet in http/fleet_routes.cpp.
#pragma once

#include "collector/context.hpp"
#include "collector/http/response.hpp"

#include <boost/asio/awaitable.hpp>

namespace collector {

// Who may ask: Host must name the collector (a loopback name or the bind address), which defeats
// DNS rebinding; a state-changing request carrying Origin must come from the collector's own
// origin; and every request but a GET of the UI's static files presents the API token
// (http/access.hpp) unless the collector runs with --http-auth none. Returns the refusal, or
// nullopt when the request may proceed. (http/access.cpp)
std::optional<http_response> check_access(const app_context& app, const http_request& req);

asio::awaitable<http_response> handle_request(app_context& app, http_request req);

} // namespace collector
