// Inside the HTTP API: what a handler is given, and the handlers the route table
// (http/routes.cpp) names from the other files.
#pragma once

#include "collector/context.hpp"
#include "collector/http/response.hpp"
#include "collector/http/target.hpp"

#include <boost/asio/awaitable.hpp>

#include <limits>
#include <string>
#include <vector>

namespace collector::routes {

// A request on its way to a handler: the path's :parameters in order.
struct request_context {
    app_context& app;
    const http_request& req;
    const target_url& url;
    std::vector<std::string> params;
};

using handler = asio::awaitable<http_response> (*)(request_context&);

// A list's page: ?q= (lowercased), ?offset=, ?limit=.
struct page_params {
    std::string q;
    std::size_t offset = 0;
    std::size_t limit = std::numeric_limits<std::size_t>::max();
};
result<page_params> parse_page(const target_url& u);
// The page of `items` (newest first by the time in `when`) that `p` asks for, as a JSON
// array, with X-Total-Count saying how many matched.
http_response page_answer(const http_request& req, std::vector<boost::json::object> items,
                          const page_params& p, const char* when = "started_at");

// http/target_routes.cpp
asio::awaitable<http_response> list_targets(request_context& c);
asio::awaitable<http_response> connect_target(request_context& c);
asio::awaitable<http_response> disconnect_target(request_context& c);
asio::awaitable<http_response> command_target(request_context& c);
asio::awaitable<http_response> capture_target(request_context& c);
asio::awaitable<http_response> update_target(request_context& c);

// http/fleet_routes.cpp
asio::awaitable<http_response> get_fleet_devices(request_context& c);
asio::awaitable<http_response> get_fleet_functions(request_context& c);
asio::awaitable<http_response> get_fleet_flamegraph(request_context& c);

} // namespace collector::routes
