// The HTTP API (docs/api.md): a request in, a response out, no socket — the server and the
// tests both call handle_request. One table maps (method, path pattern) to a handler; a path
// the table has with a method it does not take is 405, any other 404. Session views are in
// http/views.hpp, computed on the session's strand.
#pragma once

#include "collector/context.hpp"
#include "collector/result.hpp"

#include <boost/asio/awaitable.hpp>
#include <boost/beast/http/message.hpp>
#include <boost/beast/http/string_body.hpp>

namespace collector {

namespace http = boost::beast::http;
using http_request = http::request<http::string_body>;
using http_response = http::response<http::string_body>;

// Who may ask: Host must name the collector (a loopback name or the bind address), which defeats
// DNS rebinding; a state-changing request carrying Origin must come from the collector's own
// origin; and every request but a GET of the UI's static files presents the API token
// (http/access.hpp) unless the collector runs with --http-auth none. Returns the refusal, or
// nullopt when the request may proceed.
std::optional<http_response> check_access(const app_context& app, const http_request& req);

asio::awaitable<http_response> handle_request(app_context& app, http_request req);

// A JSON answer, and the error shape every endpoint uses: {"error": {"code", "message"}}.
http_response make_json(const http_request& req, http::status status,
                        const boost::json::value& body);
http_response make_error(const http_request& req, http::status status, std::string_view code,
                         std::string_view message);
// The same for a failure, with its status, and its candidates when it has some.
http_response make_error(const http_request& req, const failure& f);

} // namespace collector
