#include "collector/fleet/clickhouse.hpp"

#include "collector/http/target.hpp"
#include "protocol/digest.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/beast/http/write.hpp>

#include <optional>

namespace collector {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using asio::ip::tcp;

namespace {

constexpr auto nothrow = asio::as_tuple(asio::use_awaitable);

// ClickHouse's message without its stack trace: the first line, at most 500 bytes.
std::string first_line(std::string_view body) {
    auto line = body.substr(0, body.find('\n'));
    return std::string(line.substr(0, 500));
}

} // namespace

result<clickhouse_client> clickhouse_client::make(clickhouse_config c) {
    std::string_view url = c.url;
    if (!url.starts_with("http://"))
        return failure("bad_clickhouse",
                       "--clickhouse takes http://HOST[:PORT] (ClickHouse's HTTP interface), not " +
                           c.url);
    url.remove_prefix(7);
    if (url.ends_with('/'))
        url.remove_suffix(1);
    if (url.empty() || url.find_first_of("/?#@ ") != std::string_view::npos)
        return failure("bad_clickhouse", "--clickhouse takes http://HOST[:PORT], not " + c.url);
    std::string host(url), port = "8123";
    if (url.front() == '[') { // [IPv6]:port
        const auto close = url.find(']');
        if (close == std::string_view::npos)
            return failure("bad_clickhouse", "--clickhouse: an unclosed [ in " + c.url);
        host = std::string(url.substr(1, close - 1));
        if (close + 1 < url.size()) {
            if (url[close + 1] != ':')
                return failure("bad_clickhouse", "--clickhouse: bad port in " + c.url);
            port = std::string(url.substr(close + 2));
        }
    } else if (const auto colon = url.rfind(':'); colon != std::string_view::npos) {
        host = std::string(url.substr(0, colon));
        port = std::string(url.substr(colon + 1));
    }
    if (host.empty() || port.empty() || port.size() > 5 ||
        port.find_first_not_of("0123456789") != std::string::npos)
        return failure("bad_clickhouse", "--clickhouse: bad host or port in " + c.url);
    if (c.database.empty() || c.database.find_first_not_of("abcdefghijklmnopqrstuvwxyz"
                                                           "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                                           "0123456789_") != std::string::npos)
        return failure("bad_clickhouse",
                       "--clickhouse-database takes letters, digits and _, not " + c.database);
    clickhouse_client out;
    out.cfg_ = std::move(c);
    out.host_ = std::move(host);
    out.port_ = std::move(port);
    return out;
}

result<std::string> clickhouse_client::run(std::string_view sql, std::string_view data,
                                           std::size_t max_answer, bool in_database) const {
    return exchange(sql, data, max_answer, in_database, {});
}

result<std::string> clickhouse_client::ask(std::string_view sql, std::size_t max_answer) const {
    // (Settings ClickHouse 18.16 knows; readonly=2 forbids writes, not settings.) The result's
    // own bound is the answer's: ClickHouse stops making rows it could not send.
    const std::string settings =
        "&readonly=2&max_execution_time=" + std::to_string(cfg_.query_seconds) +
        "&timeout_overflow_mode=throw&max_memory_usage=" + std::to_string(cfg_.query_bytes) +
        "&max_rows_to_group_by=" + std::to_string(cfg_.query_groups) +
        "&group_by_overflow_mode=throw&max_result_bytes=" + std::to_string(max_answer) +
        "&result_overflow_mode=throw";
    auto r = exchange(sql, {}, max_answer, true, settings);
    if (r)
        return r;
    // ClickHouse's error codes for a limit: 158 TOO_MANY_ROWS, 159 TIMEOUT_EXCEEDED,
    // 241 MEMORY_LIMIT_EXCEEDED, 396 TOO_MANY_ROWS_OR_BYTES; or an answer past max_answer.
    const auto& m = r.error().message;
    const auto code = m.find("Code: ");
    const auto number = code == std::string::npos ? std::string() : m.substr(code + 6, 3);
    std::string which;
    if (number == "159")
        which = std::to_string(cfg_.query_seconds) + " s";
    else if (number == "241")
        which = std::to_string(cfg_.query_bytes >> 20) + " MiB of the server's memory";
    else if (number == "158" || number == "396")
        which = std::to_string(cfg_.query_groups) + " groups or a " +
                std::to_string(max_answer >> 20) + " MiB answer";
    else if (r.error().code == "clickhouse_answer_too_large")
        which = "a " + std::to_string(max_answer >> 20) + " MiB answer";
    if (which.empty())
        return r;
    return failure("fleet_query_limit",
                   "this question needs more than one Fleet query may take (" + which +
                       "): ask about fewer devices, a shorter time or one event",
                   422);
}

result<std::string> clickhouse_client::exchange(std::string_view sql, std::string_view data,
                                                std::size_t max_answer, bool in_database,
                                                std::string_view settings) const {
    std::string target = "/?query=" + url_encode(sql);
    target += settings;
    // An INSERT into a Distributed table (a sharded store, docs/fleet.md) answers once every
    // shard holds its rows: the store's "written" and the backlog's check mean what they say.
    if (!data.empty())
        target += "&insert_distributed_sync=1";
    if (in_database)
        target += "&database=" + cfg_.database;
    http::request<http::string_body> req{http::verb::post, target, 11};
    req.set(http::field::host, host_ + ":" + port_);
    req.set(http::field::user_agent, "perfwire-collector");
    req.set(http::field::authorization,
            "Basic " + protocol::base64_encode(cfg_.user + ":" + cfg_.password));
    req.set(http::field::connection, "close");
    req.body().assign(data.data(), data.size());
    req.prepare_payload();

    asio::io_context io;
    std::optional<result<std::string>> answer;
    auto talk = [&]() -> asio::awaitable<result<std::string>> {
        beast::tcp_stream stream(io);
        stream.expires_after(cfg_.timeout);
        tcp::resolver resolver(io);
        auto [rec, endpoints] = co_await resolver.async_resolve(host_, port_, nothrow);
        if (rec)
            co_return failure("clickhouse_unreachable",
                              "ClickHouse at " + where() + ": " + rec.message(), 502);
        auto [cec, ep] = co_await stream.async_connect(endpoints, nothrow);
        if (cec)
            co_return failure("clickhouse_unreachable",
                              "ClickHouse at " + where() + ": " + cec.message(), 502);
        auto [wec, wn] = co_await http::async_write(stream, req, nothrow);
        if (wec)
            co_return failure("clickhouse_unreachable",
                              "ClickHouse at " + where() + ": " + wec.message(), 502);
        beast::flat_buffer buffer;
        http::response_parser<http::string_body> parser;
        parser.body_limit(max_answer);
        parser.header_limit(64 << 10);
        auto [rdec, rn] = co_await http::async_read(stream, buffer, parser, nothrow);
        if (rdec == http::error::body_limit)
            co_return failure("clickhouse_answer_too_large",
                              "ClickHouse at " + where() + " answered more than " +
                                  std::to_string(max_answer >> 20) + " MiB",
                              502);
        if (rdec)
            co_return failure("clickhouse_unreachable",
                              "ClickHouse at " + where() + ": " +
                                  (rdec == beast::error::timeout
                                       ? std::string("no answer within ") +
                                             std::to_string(cfg_.timeout.count()) + " ms"
                                       : rdec.message()),
                              502);
        auto res = parser.release();
        if (res.result() != http::status::ok)
            co_return failure("clickhouse_error",
                              "ClickHouse at " + where() + ": " + first_line(res.body()), 502);
        co_return std::move(res.body());
    };
    asio::co_spawn(io, talk(), [&](std::exception_ptr e, result<std::string> r) {
        if (e)
            answer.emplace(failure("clickhouse_unreachable",
                                   "ClickHouse at " + where() + ": the exchange failed", 502));
        else
            answer.emplace(std::move(r));
    });
    io.run();
    if (!answer)
        return failure("clickhouse_unreachable", "ClickHouse at " + where() + ": no answer", 502);
    return std::move(*answer);
}

std::string clickhouse_quote(std::string_view s) {
    std::string out = "'";
    for (const char c : s) {
        switch (c) {
        case '\'':
            out += "\\'";
            break;
        case '\\':
            out += "\\\\";
            break;
        case '\n':
            out += "\\n";
            break;
        case '\t':
            out += "\\t";
            break;
        case '\0':
            out += "\\0";
            break;
        default:
            out += c;
        }
    }
    out += '\'';
    return out;
}

} // namespace collector
