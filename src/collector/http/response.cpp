#include "collector/http/response.hpp"

#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>

namespace collector {
namespace json = boost::json;

http_response make_json(const http_request& req, http::status status, const json::value& body) {
    http_response res{status, req.version()};
    res.set(http::field::content_type, "application/json");
    res.set(http::field::cache_control, "no-store");
    res.keep_alive(req.keep_alive());
    res.body() = json::serialize(body);
    res.prepare_payload();
    return res;
}

http_response make_error(const http_request& req, http::status status, std::string_view code,
                         std::string_view message) {
    return make_json(req, status, json::object{{"error", {{"code", code}, {"message", message}}}});
}

http_response make_error(const http_request& req, const failure& f) {
    json::object e{{"code", f.code}, {"message", f.message}};
    if (!f.candidates.empty()) {
        json::array c;
        for (const auto& name : f.candidates)
            c.emplace_back(name);
        e["candidates"] = std::move(c);
    }
    return make_json(req, static_cast<http::status>(f.status),
                     json::object{{"error", std::move(e)}});
}

http_response no_content(const http_request& req) {
    http_response res{http::status::no_content, req.version()};
    res.keep_alive(req.keep_alive());
    res.prepare_payload();
    return res;
}

std::optional<json::object> json_body(const http_request& req) {
    boost::system::error_code ec;
    auto v = json::parse(req.body(), ec);
    if (ec || !v.is_object())
        return std::nullopt;
    return std::move(v.as_object());
}

} // namespace collector
