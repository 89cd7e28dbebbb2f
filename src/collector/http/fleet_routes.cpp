// The Fleet view's questions (docs/fleet.md), answered by ClickHouse (fleet/queries.hpp) on the
// collector's fleet query threads: the I/O thread and the sessions' pool never wait for it.
#include "collector/fleet/queries.hpp"
#include "collector/fleet/store.hpp"
#include "collector/http/handlers.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <functional>

namespace collector::routes {
namespace json = boost::json;

namespace {

using fleet_work = std::function<result<json::object>(const clickhouse_client&)>;

asio::awaitable<result<json::object>> run_fleet_work(const clickhouse_client* client,
                                                     fleet_work work) {
    co_return work(*client);
}

asio::awaitable<http_response> fleet_view(request_context& c, fleet_work work) {
    if (!c.app.fleet)
        co_return make_error(c.req, http::status::not_found, "no_fleet_store",
                             "this collector writes to no fleet store: start it with "
                             "--clickhouse URL (docs/fleet.md)");
    auto job = run_fleet_work(&c.app.fleet->client(), std::move(work)); // (GCC 12: no temporaries
    auto answer = co_await asio::co_spawn(*c.app.fleet_queries, std::move(job), // in co_await)
                                          asio::use_awaitable);
    if (!answer)
        co_return make_error(c.req, answer.error());
    co_return make_json(c.req, http::status::ok, *answer);
}

// The filter of a Fleet question, and its baseline when it compares.
struct fleet_question {
    fleet_filter now;
    std::optional<fleet_filter> baseline;
};
result<fleet_question> fleet_question_of(const request_context& c) {
    auto now = parse_fleet_filter(c.url.query);
    if (!now)
        return now.error();
    auto baseline = parse_fleet_baseline(c.url.query, *now);
    if (!baseline)
        return baseline.error();
    return fleet_question{std::move(*now), std::move(*baseline)};
}

} // namespace

asio::awaitable<http_response> get_fleet_devices(request_context& c) {
    auto q = fleet_question_of(c);
    if (!q)
        co_return make_error(c.req, q.error());
    fleet_work work = [f = q->now](const clickhouse_client& ch) -> result<json::object> {
        auto answer = ch.ask(fleet_devices_sql(ch.config().database, f));
        if (!answer)
            return answer.error();
        auto modules = ch.ask(fleet_build_modules_sql(ch.config().database, f));
        if (!modules)
            return modules.error();
        return fleet_devices_json(*answer, *modules);
    };
    co_return co_await fleet_view(c, std::move(work));
}

asio::awaitable<http_response> get_fleet_functions(request_context& c) {
    bool bad = false;
    const auto limit = number_param(c.url, "limit", bad);
    if (bad || (limit && (*limit < 1 || *limit > 100000)))
        co_return make_error(c.req, http::status::bad_request, "bad_parameter",
                             "limit must be from 1 to 100000");
    auto q = fleet_question_of(c);
    if (!q)
        co_return make_error(c.req, q.error());
    const auto n = static_cast<std::size_t>(limit.value_or(200));
    fleet_work work = [q = std::move(*q), n](const clickhouse_client& ch) -> result<json::object> {
        const auto functions = [&](const fleet_filter& f,
                                   std::size_t rows) -> result<json::object> {
            auto answer = ch.ask(fleet_functions_sql(ch.config().database, f, rows));
            if (!answer)
                return answer.error();
            return fleet_functions_json(*answer);
        };
        auto body = functions(q.now, n);
        if (!body || !q.baseline)
            return body;
        // Every function of the baseline: one cut off its top rows would read as new.
        auto base = functions(*q.baseline, 100000);
        if (!base)
            return base.error();
        fleet_compare_functions(*body, *base);
        return body;
    };
    co_return co_await fleet_view(c, std::move(work));
}

asio::awaitable<http_response> get_fleet_flamegraph(request_context& c) {
    bool bad = false;
    const auto min_pct = number_param(c.url, "min_pct", bad);
    if (bad || (min_pct && (*min_pct < 0 || *min_pct > 100)))
        co_return make_error(c.req, http::status::bad_request, "bad_parameter",
                             "min_pct must be from 0 to 100");
    auto q = fleet_question_of(c);
    if (!q)
        co_return make_error(c.req, q.error());
    fleet_flame_shape shape;
    shape.inverted = c.url.query.count("inverted") && c.url.query.at("inverted") == "1";
    shape.period = c.url.query.count("weight") && c.url.query.at("weight") == "period";
    shape.min_pct = min_pct.value_or(0.0);
    shape.by_process = !(c.url.query.count("group") && c.url.query.at("group") == "none");
    fleet_work work = [q = std::move(*q),
                       shape](const clickhouse_client& ch) -> result<json::object> {
        constexpr std::size_t max_stacks = 200'000; // the busiest; the rest are counted
        const auto& db = ch.config().database;
        const auto answers = [&](const fleet_filter& f) -> result<fleet_answers> {
            auto stacks = ch.ask(fleet_stacks_sql(db, f, max_stacks, shape.by_process));
            if (!stacks)
                return stacks.error();
            auto frames = ch.ask(fleet_frames_sql(db, f));
            if (!frames)
                return frames.error();
            return fleet_answers{std::move(*stacks), std::move(*frames)};
        };
        auto now = answers(q.now);
        if (!now)
            return now.error();
        std::optional<fleet_answers> base;
        if (q.baseline) {
            auto b = answers(*q.baseline);
            if (!b)
                return b.error();
            base = std::move(*b);
        }
        auto body = fleet_flame_json(*now, base ? &*base : nullptr, shape, max_stacks);
        if (body)
            (*body)["event"] = q.now.event;
        return body;
    };
    co_return co_await fleet_view(c, std::move(work));
}

} // namespace collector::routes
