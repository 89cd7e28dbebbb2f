#include "collector/fleet/queries.hpp"

#include "collector/fleet/clickhouse.hpp"

#include <boost/json/array.hpp>
#include <boost/json/object.hpp>
#include <boost/json/parse.hpp>

#include <algorithm>

namespace collector {
namespace json = boost::json;

namespace {

bool all_of(std::string_view s, std::string_view allowed) {
    return !s.empty() && s.find_first_not_of(allowed) == std::string_view::npos;
}

result<std::uint64_t> seconds_ns(const std::string& key, const std::string& v) {
    if (!all_of(v, "0123456789.") || v.size() > 20 || std::count(v.begin(), v.end(), '.') > 1)
        return failure("bad_parameter", key + " must be seconds since the epoch");
    return static_cast<std::uint64_t>(std::stod(v) * 1e9);
}

std::string where(std::string_view db, const fleet_filter& f) {
    std::vector<std::string> terms;
    if (!f.devices.empty()) {
        std::string in;
        for (const auto& d : f.devices)
            in += (in.empty() ? "" : ", ") + clickhouse_quote(d);
        terms.push_back("device IN (" + in + ")");
    }
    if (f.from_ns)
        terms.push_back("time >= toDateTime(" + std::to_string(*f.from_ns / 1'000'000'000) + ")");
    if (f.to_ns)
        terms.push_back("time < toDateTime(" +
                        std::to_string((*f.to_ns + 999'999'999) / 1'000'000'000) + ")");
    if (!f.event.empty())
        terms.push_back("event = " + clickhouse_quote(f.event));
    if (!f.build.empty())
        terms.push_back("stack IN (SELECT stack FROM " + std::string(db) +
                        ".stacks ARRAY JOIN frames AS f WHERE f IN (SELECT frame FROM " +
                        std::string(db) + ".frames WHERE build_id = " + clickhouse_quote(f.build) +
                        "))");
    std::string out;
    for (const auto& t : terms)
        out += (out.empty() ? " WHERE " : " AND ") + t;
    return out;
}

// ClickHouse's JSONCompact "data" rows (64-bit integers come quoted).
result<json::array> rows_of(std::string_view answer) {
    boost::system::error_code ec;
    auto v = json::parse(answer, ec);
    if (ec || !v.is_object() || !v.as_object().contains("data") ||
        !v.as_object().at("data").is_array())
        return failure("clickhouse_error", "ClickHouse's answer was not the JSON asked for", 502);
    return std::move(v.as_object().at("data").as_array());
}

std::uint64_t number(const json::value& v) {
    if (v.is_string())
        return std::strtoull(v.as_string().c_str(), nullptr, 10);
    if (v.is_uint64())
        return v.as_uint64();
    if (v.is_int64())
        return static_cast<std::uint64_t>(std::max<std::int64_t>(0, v.as_int64()));
    return v.is_double() ? static_cast<std::uint64_t>(v.as_double()) : 0;
}

} // namespace

result<fleet_filter> parse_fleet_filter(const std::map<std::string, std::string>& query) {
    fleet_filter f;
    if (const auto it = query.find("devices"); it != query.end() && !it->second.empty()) {
        std::string_view rest = it->second;
        while (!rest.empty()) {
            const auto comma = rest.find(',');
            const auto one = rest.substr(0, comma);
            if (!one.empty())
                f.devices.emplace_back(one);
            rest.remove_prefix(comma == std::string_view::npos ? rest.size() : comma + 1);
        }
        if (f.devices.size() > 1000)
            return failure("bad_parameter", "at most 1000 devices at once");
    }
    for (const auto& [key, out] : {std::pair{"from", &f.from_ns}, std::pair{"to", &f.to_ns}})
        if (const auto it = query.find(key); it != query.end() && !it->second.empty()) {
            auto ns = seconds_ns(key, it->second);
            if (!ns)
                return ns.error();
            *out = *ns;
        }
    if (const auto it = query.find("event"); it != query.end())
        f.event = it->second;
    if (const auto it = query.find("build"); it != query.end() && !it->second.empty()) {
        if (!all_of(it->second, "0123456789abcdef") || it->second.size() > 128)
            return failure("bad_parameter", "build must be a build-id in lowercase hex");
        f.build = it->second;
    }
    return f;
}

std::string fleet_devices_sql(std::string_view database, const fleet_filter& f) {
    const std::string db(database);
    return "SELECT device, count() AS n, toUInt32(min(time)), toUInt32(max(time)), "
           "groupUniqArray(event), "
           "groupUniqArray(build_id) FROM " +
           db + ".samples" + where(db, f) +
           " GROUP BY device ORDER BY n DESC, device LIMIT 10000 "
           "FORMAT JSONCompact";
}

result<json::object> fleet_devices_json(std::string_view answer) {
    auto rows = rows_of(answer);
    if (!rows)
        return rows.error();
    json::array devices;
    for (const auto& r : *rows) {
        if (!r.is_array() || r.as_array().size() != 6)
            return failure("clickhouse_error", "ClickHouse's answer had unexpected rows", 502);
        const auto& a = r.as_array();
        json::array builds;
        for (const auto& b : a[5].as_array())
            if (!b.as_string().empty())
                builds.push_back(b);
        devices.push_back({{"device", a[0]},
                           {"samples", number(a[1])},
                           {"first_sec", number(a[2])},
                           {"last_sec", number(a[3])},
                           {"events", a[4]},
                           {"builds", std::move(builds)}});
    }
    return json::object{{"devices", std::move(devices)}};
}

std::string fleet_functions_sql(std::string_view database, const fleet_filter& f,
                                std::size_t limit) {
    const std::string db(database), filtered = where(db, f);
    // One JOIN a SELECT (ClickHouse 18.16): samples by stack, then the stacks' frames, one row
    // a frame with its depth, then the frames' names; a function counted once a stack.
    const std::string by_stack = "SELECT stack, count() AS n, sum(period) AS p FROM " + db +
                                 ".samples" + filtered + " GROUP BY stack";
    const std::string with_frames = "SELECT stack, n, p, frames FROM (" + by_stack +
                                    ") ANY LEFT JOIN (SELECT stack, any(frames) AS frames FROM " +
                                    db + ".stacks GROUP BY stack) USING stack";
    const std::string per_frame = "SELECT stack, n, p, frame, depth FROM (" + with_frames +
                                  ") ARRAY JOIN frames AS frame, arrayEnumerate(frames) AS depth";
    const std::string named =
        "SELECT stack, symbol, module, any(n) AS n, any(p) AS p, max(depth = 1) AS leaf FROM (" +
        per_frame +
        ") ANY LEFT JOIN (SELECT frame, any(symbol) AS symbol, any(module) AS module "
        "FROM " +
        db + ".frames GROUP BY frame) USING frame GROUP BY stack, symbol, module";
    return "SELECT symbol, module, sum(n * leaf) AS self, sum(n) AS total, sum(p * leaf), "
           "sum(p), (SELECT count() FROM " +
           db + ".samples" + filtered + "), (SELECT sum(period) FROM " + db + ".samples" +
           filtered + ") FROM (" + named + ") GROUP BY symbol, module ORDER BY total DESC, " +
           "self DESC, symbol LIMIT " + std::to_string(limit) + " FORMAT JSONCompact";
}

result<json::object> fleet_functions_json(std::string_view answer) {
    auto rows = rows_of(answer);
    if (!rows)
        return rows.error();
    json::array functions;
    std::uint64_t samples = 0, period = 0;
    for (const auto& r : *rows) {
        if (!r.is_array() || r.as_array().size() != 8)
            return failure("clickhouse_error", "ClickHouse's answer had unexpected rows", 502);
        const auto& a = r.as_array();
        functions.push_back({{"name", a[0]},
                             {"module", a[1]},
                             {"self", number(a[2])},
                             {"total", number(a[3])},
                             {"self_period", number(a[4])},
                             {"total_period", number(a[5])}});
        samples = number(a[6]);
        period = number(a[7]);
    }
    return json::object{
        {"samples", samples}, {"period", period}, {"functions", std::move(functions)}};
}

} // namespace collector
