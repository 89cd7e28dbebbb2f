// What every handler answers with: a JSON body, or the error shape every endpoint uses,
// {"error": {"code", "message", "candidates"?}}; and the JSON body a request sent.
#pragma once

#include "collector/result.hpp"

#include <boost/beast/http/message.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/json/object.hpp>
#include <boost/json/value.hpp>

#include <optional>
#include <string_view>

namespace collector {

namespace http = boost::beast::http;
using http_request = http::request<http::string_body>;
using http_response = http::response<http::string_body>;

http_response make_json(const http_request& req, http::status status,
                        const boost::json::value& body);
http_response make_error(const http_request& req, http::status status, std::string_view code,
                         std::string_view message);
// The same for a failure, with its status, and its candidates when it has some.
http_response make_error(const http_request& req, const failure& f);
http_response no_content(const http_request& req);
// The request's body when it is a JSON object.
std::optional<boost::json::object> json_body(const http_request& req);

} // namespace collector
