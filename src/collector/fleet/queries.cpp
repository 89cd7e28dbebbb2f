#include "collector/fleet/queries.hpp"

#include "collector/fleet/clickhouse.hpp"
#include "protocol/off_cpu.hpp"

#include <boost/json/array.hpp>
#include <boost/json/object.hpp>
#include <boost/json/parse.hpp>

#include <algorithm>
#include <unordered_map>

namespace collector {
namespace json = boost::json;

namespace {

bool all_of(std::string_view s, std::string_view allowed) {
    return !s.empty() && s.find_first_not_of(allowed) == std::string_view::npos;
}

result<std::uint64_t> seconds_ns(const std::string& key, const std::string& v) {
    // (digits, at most one point, before the year 2286: the ns fit 64 bits)
    if (!all_of(v, "0123456789.") || v.size() > 20 || std::count(v.begin(), v.end(), '.') > 1 ||
        v.find_first_of("0123456789") == std::string::npos)
        return failure("bad_parameter", key + " must be seconds since the epoch");
    const double s = std::strtod(v.c_str(), nullptr);
    if (!(s < 1e10))
        return failure("bad_parameter", key + " must be seconds since the epoch");
    return static_cast<std::uint64_t>(s * 1e9);
}

// `weighed`: the samples are summed (functions, stacks, frames), not listed: "every event" is
// every sampled one, never the waits too (off-cpu: time off the CPU, chosen by name).
std::string where(std::string_view db, const fleet_filter& f, bool weighed = true) {
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
    else if (weighed)
        terms.push_back("event != " + clickhouse_quote(protocol::off_cpu_event_name));
    // The stacks holding a frame that…
    const auto through = [&](const std::string& frame_is) {
        return "stack GLOBAL IN (SELECT stack FROM " + std::string(db) +
               ".stacks ARRAY JOIN frames AS f WHERE f GLOBAL IN (SELECT frame FROM " +
               std::string(db) + ".frames WHERE " + frame_is + "))";
    };
    if (!f.build.empty())
        terms.push_back(through("build_id = " + clickhouse_quote(f.build)));
    if (!f.function.empty())
        terms.push_back(through("symbol = " + clickhouse_quote(f.function)));
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

// The stacks the chosen samples use: the stacks and frames tables are read for those only
// (they hold every device's, for every day; a device that sent millions of frames never seen
// again slows no question about the others).
std::string used_stacks(const std::string& db, const std::string& filtered) {
    return " WHERE stack GLOBAL IN (SELECT stack FROM " + db + ".samples" + filtered + ")";
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
    if (const auto it = query.find("function"); it != query.end()) {
        if (it->second.size() > 4096)
            return failure("bad_parameter", "function is a name of at most 4096 bytes");
        f.function = it->second;
    }
    return f;
}

result<std::optional<fleet_filter>>
parse_fleet_baseline(const std::map<std::string, std::string>& query, const fleet_filter& f) {
    auto asked = query;
    bool any = false;
    for (const char* key : {"devices", "from", "to", "event", "build"})
        if (const auto it = query.find(std::string("base_") + key); it != query.end()) {
            asked[key] = it->second;
            any = true;
        }
    if (!any)
        return std::optional<fleet_filter>();
    auto base = parse_fleet_filter(asked);
    if (!base)
        return failure(base.error().code, "the baseline's " + base.error().message);
    base->function = f.function;
    return std::optional<fleet_filter>(std::move(*base));
}

std::string fleet_devices_sql(std::string_view database, const fleet_filter& f) {
    const std::string db(database);
    return "SELECT device, count() AS n, toUInt32(min(time)), toUInt32(max(time)), "
           "groupUniqArray(event), "
           "groupUniqArray(build_id) FROM " +
           db + ".samples" + where(db, f, false) +
           " GROUP BY device ORDER BY n DESC, device LIMIT 10000 "
           "FORMAT JSONCompact";
}

std::string fleet_build_modules_sql(std::string_view database, const fleet_filter& f) {
    const std::string db(database);
    return "SELECT build_id, any(module) FROM " + db +
           ".frames WHERE build_id != '' AND build_id GLOBAL IN (SELECT DISTINCT build_id "
           "FROM " +
           db + ".samples" + where(db, f, false) +
           ") GROUP BY build_id ORDER BY build_id LIMIT 10000 FORMAT JSONCompact";
}

result<json::object> fleet_devices_json(std::string_view answer, std::string_view build_modules) {
    auto modules = rows_of(build_modules);
    if (!modules)
        return modules.error();
    json::object module_of;
    for (const auto& r : *modules) {
        if (!r.is_array() || r.as_array().size() != 2 || !r.as_array()[0].is_string() ||
            !r.as_array()[1].is_string())
            return failure("clickhouse_error", "ClickHouse's answer had unexpected rows", 502);
        module_of[r.as_array()[0].as_string()] = r.as_array()[1];
    }
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
    return json::object{{"devices", std::move(devices)}, {"build_modules", std::move(module_of)}};
}

std::string fleet_functions_sql(std::string_view database, const fleet_filter& f,
                                std::size_t limit) {
    const std::string db(database), filtered = where(db, f), used = used_stacks(db, filtered);
    // One JOIN a SELECT (ClickHouse 18.16): samples by stack, then the stacks' frames, one row
    // a frame with its depth, then the frames' names; a function counted once a stack.
    const std::string by_stack = "SELECT stack, count() AS n, sum(period) AS p FROM " + db +
                                 ".samples" + filtered + " GROUP BY stack";
    const std::string with_frames = "SELECT stack, n, p, frames FROM (" + by_stack +
                                    ") ANY LEFT JOIN (SELECT stack, any(frames) AS frames FROM " +
                                    db + ".stacks" + used + " GROUP BY stack) USING stack";
    const std::string per_frame = "SELECT stack, n, p, frame, depth FROM (" + with_frames +
                                  ") ARRAY JOIN frames AS frame, arrayEnumerate(frames) AS depth";
    const std::string named =
        "SELECT stack, symbol, module, any(n) AS n, any(p) AS p, max(depth = 1) AS leaf FROM (" +
        per_frame +
        ") ANY LEFT JOIN (SELECT frame, any(symbol) AS symbol, any(module) AS module "
        "FROM " +
        db + ".frames WHERE frame GLOBAL IN (SELECT arrayJoin(frames) FROM " + db + ".stacks" +
        used + ") GROUP BY frame) USING frame GROUP BY stack, symbol, module";
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
        if (!r.is_array() || r.as_array().size() != 8 || !r.as_array()[0].is_string() ||
            !r.as_array()[1].is_string())
            return failure("clickhouse_error", "ClickHouse's answer had unexpected rows", 502);
        const auto& a = r.as_array();
        samples = number(a[6]);
        period = number(a[7]);
        const double whole = samples ? static_cast<double>(samples) : 1.0;
        functions.push_back({{"name", a[0]},
                             {"module", a[1]},
                             {"self", number(a[2])},
                             {"total", number(a[3])},
                             {"self_pct", 100.0 * static_cast<double>(number(a[2])) / whole},
                             {"total_pct", 100.0 * static_cast<double>(number(a[3])) / whole},
                             {"self_period", number(a[4])},
                             {"total_period", number(a[5])}});
    }
    return json::object{
        {"samples", samples}, {"period", period}, {"functions", std::move(functions)}};
}

namespace {

std::string function_key(std::string_view name, std::string_view module) {
    std::string k(name);
    k += '\x1f';
    k += module;
    return k;
}

double pct_of(const json::value& v) {
    return v.is_double() ? v.as_double() : static_cast<double>(number(v));
}

// A flame graph's tree, one node a path of functions (frames of one name and module, whatever
// their build, are one function).
struct flame_tree {
    std::vector<std::pair<std::string, std::string>> functions{{"all", ""}}; // name, module
    std::unordered_map<std::string, std::uint32_t> function_index;
    std::vector<std::uint32_t> function{0}, parent{0};
    std::vector<std::uint64_t> value{0}, self{0}, samples{0};
    std::unordered_map<std::uint64_t, std::uint32_t> child; // parent << 32 | function
    std::uint64_t stacks_left_out = 0;

    std::uint32_t function_of(std::string name, std::string module) {
        auto key = function_key(name, module);
        const auto [it, added] =
            function_index.emplace(std::move(key), static_cast<std::uint32_t>(functions.size()));
        if (added)
            functions.emplace_back(std::move(name), std::move(module));
        return it->second;
    }
    std::uint32_t step(std::uint32_t from, std::uint32_t f) {
        const auto [it, added] = child.emplace(std::uint64_t{from} << 32 | f,
                                               static_cast<std::uint32_t>(function.size()));
        if (added) {
            function.push_back(f);
            parent.push_back(from);
            value.push_back(0);
            self.push_back(0);
            samples.push_back(0);
        }
        return it->second;
    }
    std::optional<std::uint32_t> find(std::uint32_t from, std::uint32_t f) const {
        const auto it = child.find(std::uint64_t{from} << 32 | f);
        return it == child.end() ? std::nullopt : std::optional(it->second);
    }
};

// A process's frame: its name, in no module of its own.
constexpr std::string_view process_module = "[process]";

result<flame_tree> build_flame(const fleet_answers& a, const fleet_flame_shape& shape,
                               std::size_t max_stacks) {
    auto frames = rows_of(a.frames);
    if (!frames)
        return frames.error();
    auto stacks = rows_of(a.stacks);
    if (!stacks)
        return stacks.error();
    flame_tree t;
    const auto unexpected = [] {
        return failure("clickhouse_error", "ClickHouse's answer had unexpected rows", 502);
    };
    std::unordered_map<std::uint64_t, std::uint32_t> by_frame;
    for (const auto& r : *frames) {
        if (!r.is_array() || r.as_array().size() != 3 || !r.as_array()[1].is_string() ||
            !r.as_array()[2].is_string())
            return unexpected();
        const auto& f = r.as_array();
        by_frame[number(f[0])] =
            t.function_of(std::string(f[1].as_string()), std::string(f[2].as_string()));
    }
    const auto unknown = t.function_of("[unknown]", "");
    std::vector<std::uint32_t> path;
    for (const auto& r : *stacks) {
        if (!r.is_array() || r.as_array().size() != 4 || !r.as_array()[0].is_array() ||
            !r.as_array()[1].is_string())
            return unexpected();
        const auto& row = r.as_array();
        const auto n = number(row[2]), w = shape.period ? number(row[3]) : n;
        path.clear();
        for (const auto& id : row[0].as_array()) { // leaf first
            const auto it = by_frame.find(number(id));
            path.push_back(it == by_frame.end() ? unknown : it->second);
        }
        if (const auto& process = row[1].as_string(); shape.by_process && !process.empty())
            path.push_back(t.function_of(std::string(process), std::string(process_module)));
        if (!shape.inverted)
            std::reverse(path.begin(), path.end());
        std::uint32_t node = 0;
        t.value[0] += w;
        t.samples[0] += n;
        for (const auto f : path) {
            node = t.step(node, f);
            t.value[node] += w;
            t.samples[node] += n;
        }
        t.self[node] += w;
    }
    if (stacks->size() >= max_stacks)
        t.stacks_left_out = 1; // (at least one: the query kept the busiest)
    return t;
}

} // namespace

void fleet_compare_functions(json::object& body, const json::object& baseline) {
    std::unordered_map<std::string, std::pair<double, double>> base;
    for (const auto& r : baseline.at("functions").as_array())
        base[function_key(r.at("name").as_string(), r.at("module").as_string())] = {
            pct_of(r.at("self_pct")), pct_of(r.at("total_pct"))};
    for (auto& row : body.at("functions").as_array()) {
        auto& r = row.as_object();
        const auto it =
            base.find(function_key(r.at("name").as_string(), r.at("module").as_string()));
        const auto [bs, bt] = it == base.end() ? std::pair{0.0, 0.0} : it->second;
        r["baseline_self_pct"] = bs;
        r["baseline_total_pct"] = bt;
        r["delta_self_pct"] = pct_of(r.at("self_pct")) - bs;
        r["delta_total_pct"] = pct_of(r.at("total_pct")) - bt;
    }
    body["baseline_samples"] = baseline.at("samples");
}

std::string fleet_stacks_sql(std::string_view database, const fleet_filter& f,
                             std::size_t max_stacks, bool by_process) {
    const std::string db(database), filtered = where(db, f);
    // A process is named by its main thread (tid = pid), in its session on its device.
    const std::string stacks =
        by_process
            ? "SELECT stack, if(main_comm != '', main_comm, some_comm) AS process, count() AS n, "
              "sum(period) AS p FROM " +
                  db +
                  ".samples GLOBAL ANY LEFT JOIN (SELECT device, session, pid, anyIf(comm, tid = "
                  "pid) AS "
                  "main_comm, any(comm) AS some_comm FROM " +
                  db + ".samples" + filtered + " GROUP BY device, session, pid) USING (device, " +
                  "session, pid)" + filtered + " GROUP BY stack, process"
            : "SELECT stack, '' AS process, count() AS n, sum(period) AS p FROM " + db +
                  ".samples" + filtered + " GROUP BY stack";
    return "SELECT frames, process, n, p FROM (" + stacks + " ORDER BY n DESC LIMIT " +
           std::to_string(max_stacks) +
           ") ANY LEFT JOIN (SELECT stack, any(frames) AS frames FROM " + db + ".stacks" +
           used_stacks(db, filtered) + " GROUP BY stack) USING stack FORMAT JSONCompact";
}

std::string fleet_frames_sql(std::string_view database, const fleet_filter& f) {
    const std::string db(database);
    return "SELECT frame, any(symbol), any(module) FROM " + db +
           ".frames WHERE frame GLOBAL IN (SELECT arrayJoin(frames) FROM " + db + ".stacks" +
           used_stacks(db, where(db, f)) + ") GROUP BY frame FORMAT JSONCompact";
}

result<json::object> fleet_flame_json(const fleet_answers& now, const fleet_answers* baseline,
                                      const fleet_flame_shape& shape, std::size_t max_stacks) {
    auto t = build_flame(now, shape, max_stacks);
    if (!t)
        return t.error();
    std::optional<flame_tree> base;
    if (baseline) {
        auto b = build_flame(*baseline, shape, max_stacks);
        if (!b)
            return b.error();
        base = std::move(*b);
    }
    // Children by parent, busiest first.
    std::vector<std::vector<std::uint32_t>> kids(t->function.size());
    for (std::uint32_t n = 1; n < t->function.size(); ++n)
        kids[t->parent[n]].push_back(n);
    const auto total = t->value[0];
    const auto min_value =
        static_cast<std::uint64_t>(static_cast<double>(total) * shape.min_pct / 100.0);
    const double base_total = base && base->value[0] ? static_cast<double>(base->value[0]) : 0.0;
    const auto node_json = [&](std::uint32_t n, std::optional<std::uint32_t> b) {
        json::object o{{"name", t->functions[t->function[n]].first},
                       {"module", t->functions[t->function[n]].second},
                       {"value", t->value[n]},
                       {"self", t->self[n]},
                       {"samples", t->samples[n]}};
        if (base) {
            const double was =
                b && base_total ? 100.0 * static_cast<double>(base->value[*b]) / base_total : 0.0;
            const double is =
                total ? 100.0 * static_cast<double>(t->value[n]) / static_cast<double>(total) : 0.0;
            o["baseline_pct"] = was;
            o["delta_pct"] = is - was;
        }
        return o;
    };
    json::object root = node_json(0, base ? std::optional<std::uint32_t>(0) : std::nullopt);
    struct item {
        std::uint32_t node;
        std::optional<std::uint32_t> base;
        json::object* out;
    };
    std::vector<item> todo{{0, base ? std::optional<std::uint32_t>(0) : std::nullopt, &root}};
    std::uint64_t small = 0;
    while (!todo.empty()) {
        const item it = todo.back();
        todo.pop_back();
        auto& order = kids[it.node];
        std::erase_if(order, [&](std::uint32_t c) {
            small += t->value[c] < min_value;
            return t->value[c] < min_value || !t->value[c];
        });
        std::sort(order.begin(), order.end(),
                  [&](std::uint32_t a, std::uint32_t b) { return t->value[a] > t->value[b]; });
        json::array& children = (*it.out)["children"].emplace_array();
        std::vector<std::optional<std::uint32_t>> in_base;
        for (const auto c : order) {
            std::optional<std::uint32_t> b;
            if (it.base) {
                const auto& [name, module] = t->functions[t->function[c]];
                if (const auto f = base->function_index.find(function_key(name, module));
                    f != base->function_index.end())
                    b = base->find(*it.base, f->second);
            }
            children.push_back(node_json(c, b));
            in_base.push_back(b);
        }
        for (std::size_t i = 0; i < order.size(); ++i)
            todo.push_back({order[i], in_base[i], &children[i].as_object()});
    }
    json::object out{{"root", std::move(root)},
                     {"total", total},
                     {"samples", t->samples[0]},
                     {"weight", shape.period ? "period" : "samples"},
                     {"inverted", shape.inverted},
                     {"small_frames_hidden", small},
                     {"stacks_left_out", t->stacks_left_out != 0}};
    if (base) {
        out["baseline_total"] = base->value[0];
        out["baseline_samples"] = base->samples[0];
    }
    return out;
}

} // namespace collector
