#include "collector/compare/client.hpp"

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/beast/http/write.hpp>
#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>

namespace collector::compare {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;

result<api_client> api_client::at(const std::string& url, std::string token) {
    constexpr std::string_view scheme = "http://";
    if (url.rfind(scheme, 0) != 0)
        return failure("bad_url", url + ": the collector's URL is http://HOST[:PORT]");
    std::string rest = url.substr(scheme.size());
    if (const auto slash = rest.find('/'); slash != std::string::npos)
        rest.resize(slash);
    api_client c;
    const auto colon = rest.rfind(':');
    const bool bracketed = !rest.empty() && rest.front() == '[';
    if (colon != std::string::npos && (!bracketed || rest[colon - 1] == ']')) {
        c.host_ = rest.substr(0, colon);
        c.port_ = rest.substr(colon + 1);
    } else {
        c.host_ = rest;
        c.port_ = "80";
    }
    if (bracketed && c.host_.size() > 2 && c.host_.back() == ']')
        c.host_ = c.host_.substr(1, c.host_.size() - 2);
    if (c.host_.empty() || c.port_.empty() ||
        c.port_.find_first_not_of("0123456789") != std::string::npos)
        return failure("bad_url", url + ": the collector's URL is http://HOST[:PORT]");
    c.base_ = std::string(scheme) + rest;
    c.token_ = std::move(token);
    return c;
}

result<std::pair<int, std::string>>
api_client::exchange(const char* method, const std::string& target, const std::string& body) const {
    try {
        asio::io_context io;
        asio::ip::tcp::resolver resolver(io);
        beast::tcp_stream stream(io);
        stream.expires_after(timeout_);
        stream.connect(resolver.resolve(host_, port_));
        http::request<http::string_body> req(http::string_to_verb(method), target, 11);
        req.set(http::field::host, host_);
        if (!token_.empty())
            req.set(http::field::authorization, "Bearer " + token_);
        if (!body.empty()) {
            req.set(http::field::content_type, "application/json");
            req.body() = body;
        }
        req.prepare_payload();
        http::write(stream, req);
        beast::flat_buffer buffer;
        http::response_parser<http::string_body> parser;
        parser.body_limit(std::uint64_t{1} << 30);
        http::read(stream, buffer, parser);
        return std::pair{static_cast<int>(parser.get().result_int()),
                         std::move(parser.get().body())};
    } catch (const std::exception& e) {
        return failure("unreachable", base_ + ": " + e.what(), 502);
    }
}

namespace {

// A failure for an answer that is not 2xx, with the API's own message.
failure refused(const std::string& where, int status, const std::string& body) {
    std::string why = "HTTP " + std::to_string(status);
    boost::system::error_code ec;
    const auto v = boost::json::parse(body, ec);
    if (!ec && v.is_object())
        if (const auto* e = v.as_object().if_contains("error"); e && e->is_object())
            if (const auto* m = e->as_object().if_contains("message"); m && m->is_string())
                why += ": " + std::string(m->as_string());
    return failure("http_" + std::to_string(status), where + ": " + why, status);
}

} // namespace

result<boost::json::value> api_client::call(const char* method, const std::string& target,
                                            const std::string& body) const {
    const auto answer = exchange(method, target, body);
    if (!answer)
        return answer.error();
    const auto& [status, text] = *answer;
    if (status < 200 || status >= 300)
        return refused(base_ + target, status, text);
    boost::system::error_code ec;
    auto v = boost::json::parse(text, ec);
    if (ec)
        return failure("bad_answer", base_ + target + ": the answer is not JSON", 502);
    return v;
}

result<std::string> api_client::get_text(const std::string& target) const {
    auto answer = exchange("GET", target, {});
    if (!answer)
        return answer.error();
    if (answer->first < 200 || answer->first >= 300)
        return refused(base_ + target, answer->first, answer->second);
    return std::move(answer->second);
}

result<boost::json::value> api_client::get(const std::string& target) const {
    return call("GET", target, {});
}

result<boost::json::value> api_client::post(const std::string& target,
                                            const boost::json::value& body) const {
    return call("POST", target, boost::json::serialize(body));
}

} // namespace collector::compare
