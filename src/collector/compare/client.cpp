#include "collector/compare/client.hpp"

#include "protocol/link_stream.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/beast/http/write.hpp>
#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>

#include <algorithm>

namespace collector::compare {

std::string printable(std::string_view text) {
    std::string out;
    out.reserve(text.size());
    for (std::size_t i = 0; i < text.size(); ++i) {
        const auto c = static_cast<unsigned char>(text[i]);
        // C1 controls are U+0080..U+009F: C2 80..C2 9F in UTF-8; marks that reorder a line
        // are U+200E/F, U+202A..E, U+2066..9: E2 80 8E/8F/AA..AE, E2 81 A6..A9.
        const auto next = [&](std::size_t k) {
            return i + k < text.size() ? static_cast<unsigned char>(text[i + k]) : 0;
        };
        if (c == 0xc2 && next(1) >= 0x80 && next(1) < 0xa0) {
            out += '?';
            ++i;
        } else if (c == 0xe2 && ((next(1) == 0x80 && (next(2) == 0x8e || next(2) == 0x8f ||
                                                      (next(2) >= 0xaa && next(2) <= 0xae))) ||
                                 (next(1) == 0x81 && next(2) >= 0xa6 && next(2) <= 0xa9))) {
            out += '?';
            i += 2;
        } else {
            out += c < 0x20 || c == 0x7f ? '?' : static_cast<char>(c);
        }
    }
    return out;
}

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;

result<api_client> api_client::at(const std::string& url, std::string token,
                                  std::chrono::seconds timeout, tls_trust trust) {
    const bool https = url.rfind("https://", 0) == 0;
    const std::string scheme = https ? "https://" : "http://";
    if (url.rfind(scheme, 0) != 0)
        return failure("bad_url", url + ": the collector's URL is http[s]://HOST[:PORT]");
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
        c.port_ = https ? "443" : "80";
    }
    if (bracketed && c.host_.size() > 2 && c.host_.back() == ']')
        c.host_ = c.host_.substr(1, c.host_.size() - 2);
    if (c.host_.empty() || c.port_.empty() ||
        c.port_.find_first_not_of("0123456789") != std::string::npos)
        return failure("bad_url", url + ": the collector's URL is http[s]://HOST[:PORT]");
    c.base_ = scheme + rest;
    c.https_ = https;
    c.trust_ = std::move(trust);

    // A token file's line end (CR LF too) is not the token; a control character left in it
    // would end the Authorization header and start another.
    while (!token.empty() && (token.back() == '\n' || token.back() == '\r' || token.back() == ' '))
        token.pop_back();
    if (std::any_of(token.begin(), token.end(),
                    [](unsigned char ch) { return ch < 0x20 || ch == 0x7f; }))
        return failure("bad_token", "the API token holds a control character");
    c.token_ = std::move(token);
    c.timeout_ = timeout;
    return c;
}

result<std::pair<int, std::string>> api_client::exchange(const char* method,
                                                         const std::string& target,
                                                         const std::string& body,
                                                         std::size_t max_body) const {
    // One coroutine under one deadline (the io_context's run): a collector that never answers,
    // or answers a byte at a time, fails here instead of holding the job until its runner
    // gives up.
    http::request<http::string_body> req(http::string_to_verb(method), target, 11);
    req.set(http::field::host, host_);
    if (!token_.empty())
        req.set(http::field::authorization, "Bearer " + token_);
    if (!body.empty()) {
        req.set(http::field::content_type, "application/json");
        req.body() = body;
    }
    req.prepare_payload();
    http::response_parser<http::string_body> parser;
    parser.body_limit(max_body);
    std::string failed; // what went wrong, once something did
    bool done = false;
    asio::io_context io;
    constexpr auto nothrow = asio::as_tuple(asio::use_awaitable);
    auto run = [&]() -> asio::awaitable<void> {
        asio::ip::tcp::resolver resolver(io);
        auto [resolving, endpoints] = co_await resolver.async_resolve(host_, port_, nothrow);
        if (resolving) {
            failed = resolving.message();
            co_return;
        }
        asio::ip::tcp::socket socket(io);
        auto [connecting, at] = co_await asio::async_connect(socket, endpoints, nothrow);
        if (connecting) {
            failed = connecting.message();
            co_return;
        }
        protocol::link_stream stream(std::move(socket));
        if (https_) {
            protocol::peer_check check;
            check.host = host_;
            if (!trust_.pin.empty())
                check.pin = trust_.pin;
            else
                check.ca_file = trust_.ca_file; // ("": the system's CAs)
            auto ctx = protocol::client_context(check);
            if (const auto* why = std::get_if<std::string>(&ctx)) {
                failed = *why;
                co_return;
            }
            failed = co_await stream.connect_tls(
                std::get<std::shared_ptr<asio::ssl::context>>(std::move(ctx)), check, timeout_);
            if (!failed.empty())
                co_return;
        }
        if (auto [writing, n] = co_await http::async_write(stream, req, nothrow); writing) {
            failed = writing.message();
            co_return;
        }
        beast::flat_buffer buffer;
        if (auto [reading, n] = co_await http::async_read(stream, buffer, parser, nothrow);
            reading) {
            failed = reading.message();
            co_return;
        }
        done = true;
    };
    asio::co_spawn(io, run(), [&](std::exception_ptr e) {
        if (!e)
            return;
        try {
            std::rethrow_exception(e);
        } catch (const std::exception& x) {
            failed = x.what();
        } catch (...) {
            failed = "failed";
        }
    });
    io.run_for(timeout_);
    if (!done)
        return failure("unreachable",
                       base_ + target + ": " +
                           (failed.empty()
                                ? "no answer within " + std::to_string(timeout_.count()) + " s"
                                : printable(failed)),
                       502);
    return std::pair{static_cast<int>(parser.get().result_int()), std::move(parser.get().body())};
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
                why += ": " + printable(std::string(m->as_string()).substr(0, 2000));
    return failure("http_" + std::to_string(status), where + ": " + why, status);
}

} // namespace

result<boost::json::value> api_client::call(const char* method, const std::string& target,
                                            const std::string& body) const {
    const auto answer = exchange(method, target, body, max_json);
    if (!answer)
        return answer.error();
    const auto& [status, text] = *answer;
    if (status < 200 || status >= 300)
        return refused(base_ + target, status, text);
    // (a flame graph nests two levels a frame, 512 frames deep at most)
    boost::json::parse_options deep;
    deep.max_depth = 1100;
    boost::system::error_code ec;
    auto v = boost::json::parse(text, ec, {}, deep);
    if (ec)
        return failure("bad_answer", base_ + target + ": the answer is not JSON", 502);
    return v;
}

result<std::string> api_client::get_text(const std::string& target) const {
    auto answer = exchange("GET", target, {}, max_text);
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
