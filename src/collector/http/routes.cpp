#include "collector/http/routes.hpp"

#include "collector/agents/agent_link.hpp"
#include "collector/export/exports.hpp"
#include "collector/http/access.hpp"
#include "collector/http/settings.hpp"
#include "collector/http/upload.hpp"
#include "collector/model/views.hpp"
#include "collector/symbols/source_view.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/json/monotonic_resource.hpp>
#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>

#include <boost/asio/strand.hpp>

#include <algorithm>
#include <charconv>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <sstream>
#include <unistd.h>
#include <unordered_map>

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

namespace {

http_response no_content(const http_request& req) {
    http_response res{http::status::no_content, req.version()};
    res.keep_alive(req.keep_alive());
    res.prepare_payload();
    return res;
}

std::string percent_decode(std::string_view s) {
    std::string out;
    out.reserve(s.size());
    for (std::size_t i = 0; i < s.size(); ++i) {
        if (s[i] == '%' && i + 2 < s.size()) {
            int v = 0;
            const auto [p, ec] = std::from_chars(s.data() + i + 1, s.data() + i + 3, v, 16);
            if (ec == std::errc() && p == s.data() + i + 3) {
                out.push_back(static_cast<char>(v));
                i += 2;
                continue;
            }
        }
        out.push_back(s[i] == '+' ? ' ' : s[i]);
    }
    return out;
}

struct target_url {
    std::vector<std::string> segments; // decoded path segments
    std::map<std::string, std::string> query;
};

target_url split_target(std::string_view target) {
    target_url t;
    const auto q = target.find('?');
    std::string_view path = target.substr(0, q);
    while (!path.empty()) {
        const auto slash = path.find('/');
        const auto seg = path.substr(0, slash);
        if (!seg.empty())
            t.segments.push_back(percent_decode(seg));
        if (slash == std::string_view::npos)
            break;
        path.remove_prefix(slash + 1);
    }
    if (q != std::string_view::npos) {
        std::string_view qs = target.substr(q + 1);
        while (!qs.empty()) {
            const auto amp = qs.find('&');
            const auto kv = qs.substr(0, amp);
            const auto eq = kv.find('=');
            t.query[percent_decode(kv.substr(0, eq))] =
                eq == std::string_view::npos ? std::string() : percent_decode(kv.substr(eq + 1));
            if (amp == std::string_view::npos)
                break;
            qs.remove_prefix(amp + 1);
        }
    }
    return t;
}

std::optional<double> number_param(const target_url& u, const std::string& key, bool& bad) {
    const auto it = u.query.find(key);
    if (it == u.query.end() || it->second.empty())
        return std::nullopt;
    double v = 0;
    const auto& s = it->second;
    const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec != std::errc() || p != s.data() + s.size()) {
        bad = true;
        return std::nullopt;
    }
    return v;
}

// The name in a Host header, lowercased ("LocalHost:8080" -> "localhost", "[::1]:80" ->
// "[::1]"); empty when anything but ":" and a port of digits follows the name, so
// "localhost:8080@evil.example" names nothing.
std::string host_only(std::string_view host) {
    std::string_view name = host, rest;
    if (!host.empty() && host.front() == '[') {
        const auto close = host.find(']');
        if (close == std::string_view::npos)
            return {};
        name = host.substr(0, close + 1);
        rest = host.substr(close + 1);
    } else if (const auto colon = host.find(':'); colon != std::string_view::npos) {
        name = host.substr(0, colon);
        rest = host.substr(colon);
    }
    if (!rest.empty() &&
        (rest.size() < 2 || rest.size() > 6 || rest[0] != ':' ||
         !std::all_of(rest.begin() + 1, rest.end(), [](char c) { return c >= '0' && c <= '9'; })))
        return {};
    std::string out(name);
    for (char& c : out)
        if (c >= 'A' && c <= 'Z')
            c = static_cast<char>(c - 'A' + 'a');
    return out;
}

bool allowed_host(const app_context& app, std::string_view host) {
    const auto h = host_only(host);
    return !h.empty() && (h == "localhost" || h == "127.0.0.1" || h == "[::1]" ||
                          (h == app.cfg.http_bind && app.cfg.http_bind != "0.0.0.0"));
}

// What a view needs, parsed from the query; `error` set for a bad parameter.
struct view_params {
    std::string event;
    bool by_period = true;
    std::optional<std::uint32_t> tid;
    std::optional<double> start_s, end_s, min_pct;
    std::optional<int> max_depth;
    std::string baseline; // session id to compare against
    std::string metrics_type;
    source_request source; // file=, function=
    std::string error;
};

view_params parse_view_params(const target_url& u) {
    view_params v;
    if (const auto it = u.query.find("event"); it != u.query.end())
        v.event = it->second;
    if (const auto it = u.query.find("baseline"); it != u.query.end())
        v.baseline = it->second;
    if (const auto it = u.query.find("type"); it != u.query.end())
        v.metrics_type = it->second;
    if (const auto it = u.query.find("file"); it != u.query.end())
        v.source.file = it->second;
    if (const auto it = u.query.find("function"); it != u.query.end())
        v.source.function = it->second;
    if (const auto it = u.query.find("weight"); it != u.query.end()) {
        if (it->second == "samples")
            v.by_period = false;
        else if (it->second != "period" && !it->second.empty())
            v.error = "weight must be period or samples";
    }
    bool bad = false;
    if (const auto tid = number_param(u, "tid", bad))
        v.tid = static_cast<std::uint32_t>(*tid);
    v.start_s = number_param(u, "start", bad);
    v.end_s = number_param(u, "end", bad);
    v.min_pct = number_param(u, "min_pct", bad);
    if (const auto d = number_param(u, "max_depth", bad))
        v.max_depth = static_cast<int>(*d);
    if (bad && v.error.empty())
        v.error = "tid, start, end, min_pct and max_depth must be numbers";
    return v;
}

// Resolves the event and the filter against a model (on the strand).
std::optional<view_filter> make_filter(const profile& p, const view_params& v, json::object& err) {
    const auto r = resolve_event(p, v.event);
    if (!r.event) {
        json::array c;
        for (const auto& name : r.candidates)
            c.emplace_back(name);
        err = {{"code", p.event_count() ? "bad_event" : "no_data"},
               {"message", p.event_count() ? "event '" + v.event + "' is not unique or unknown"
                                           : std::string("the session has no samples yet")},
               {"candidates", std::move(c)}};
        return std::nullopt;
    }
    view_filter f;
    f.event = *r.event;
    f.by_period = v.by_period;
    f.tid = v.tid;
    const auto base = p.first_time();
    if (v.start_s)
        f.start_ns = base + static_cast<std::uint64_t>(std::max(0.0, *v.start_s) * 1e9);
    if (v.end_s)
        f.end_ns = base + static_cast<std::uint64_t>(std::max(0.0, *v.end_s) * 1e9);
    return f;
}

double pct(std::uint64_t part, std::uint64_t whole) {
    return whole ? 100.0 * static_cast<double>(part) / static_cast<double>(whole) : 0.0;
}

json::object view_header(const profile& p, const view_filter& f, std::uint64_t total,
                         json::storage_ptr sp) {
    return json::object({{"event", p.event_name(f.event)},
                         {"weight", f.by_period ? "period" : "samples"},
                         {"total", total},
                         {"samples", p.sample_count()}},
                        std::move(sp));
}

json::value functions_json(const profile& p, const view_filter& f, std::size_t limit,
                           const json::storage_ptr& sp) {
    const auto t = functions(p, f);
    json::object o = view_header(p, f, t.total_weight, sp);
    json::array rows(sp);
    rows.reserve(std::min(limit, t.rows.size()));
    for (const auto& r : t.rows) {
        if (rows.size() >= limit)
            break;
        rows.push_back(json::object({{"name", p.symbol(r.frame)},
                                     {"module", p.module(r.frame)},
                                     {"self", r.self},
                                     {"total", r.total},
                                     {"self_pct", pct(r.self, t.total_weight)},
                                     {"total_pct", pct(r.total, t.total_weight)}},
                                    sp));
    }
    o["functions"] = std::move(rows);
    return o;
}

json::value flamegraph_json(const profile& p, const view_filter& f, int max_depth, double min_pct,
                            const json::storage_ptr& sp) {
    const auto self = node_self_weights(p, f);
    const auto incl = inclusive_weights(p, self);
    const auto kids = children_of(p);
    const std::uint64_t total = incl.empty() ? 0 : incl[0];
    const auto min_value = static_cast<std::uint64_t>(static_cast<double>(total) * min_pct / 100.0);
    json::object o = view_header(p, f, total, sp);
    // Iterative build: deep stacks cannot exhaust the call stack.
    json::object root({{"name", "all"}, {"module", ""}, {"value", total}, {"self", self[0]}}, sp);
    struct item {
        std::uint32_t node;
        json::object* out;
        int depth;
    };
    std::vector<item> todo{{0, &root, 0}};
    while (!todo.empty()) {
        const item it = todo.back();
        todo.pop_back();
        json::array& children = (*it.out)["children"].emplace_array();
        if (it.depth >= max_depth)
            continue;
        std::vector<std::uint32_t> order(kids.child.begin() + kids.offset[it.node],
                                         kids.child.begin() + kids.offset[it.node + 1]);
        std::sort(order.begin(), order.end(),
                  [&](std::uint32_t a, std::uint32_t b) { return incl[a] > incl[b]; });
        for (const auto c : order) {
            if (incl[c] == 0 || incl[c] < min_value)
                continue;
            const auto frame = p.node_frame(c);
            children.push_back(json::object({{"name", p.symbol(frame)},
                                             {"module", p.module(frame)},
                                             {"value", incl[c]},
                                             {"self", self[c]}},
                                            sp));
        }
        // Children were pushed in order; recurse into each (addresses are stable now).
        std::size_t i = 0;
        for (const auto c : order) {
            if (incl[c] == 0 || incl[c] < min_value)
                continue;
            todo.push_back({c, &children[i++].as_object(), it.depth + 1});
        }
    }
    o["root"] = std::move(root);
    return o;
}

json::value threads_json(const profile& p, const view_filter& f, const json::storage_ptr& sp) {
    const auto rows = threads(p, f);
    std::uint64_t total = 0;
    for (const auto& r : rows)
        total += r.weight;
    json::array out(sp);
    for (const auto& r : rows) {
        json::array top(sp);
        for (const auto& fn : r.top_functions)
            top.push_back(json::object({{"name", p.symbol(fn.frame)},
                                        {"module", p.module(fn.frame)},
                                        {"self", fn.self},
                                        {"self_pct", pct(fn.self, r.weight)}},
                                       sp));
        json::object row({{"tid", r.tid},
                          {"pid", r.pid},
                          {"comm", r.comm},
                          {"samples", r.samples},
                          {"weight", r.weight},
                          {"pct", pct(r.weight, total)}},
                         sp);
        row["top_functions"] = std::move(top);
        out.push_back(std::move(row));
    }
    return out;
}

// "a;b;c <weight>" lines, root first: the input of flamegraph.pl and friends.
std::string collapsed_text(const profile& p, const view_filter& f) {
    const auto self = node_self_weights(p, f);
    std::string out;
    for_each_stack(p, self, [&](std::uint32_t n, const std::vector<std::uint32_t>& frames) {
        for (auto it = frames.rbegin(); it != frames.rend(); ++it) {
            if (it != frames.rbegin())
                out.push_back(';');
            out.append(p.symbol(*it));
        }
        out.push_back(' ');
        out.append(std::to_string(self[n]));
        out.push_back('\n');
    });
    return out;
}

// speedscope's sampled format: every stack with self weight, outermost frame first.
json::value speedscope_json(const profile& p, const view_filter& f, const std::string& name) {
    json::array frames;
    frames.reserve(p.frame_count());
    for (std::uint32_t i = 0; i < p.frame_count(); ++i)
        frames.push_back({{"name", p.symbol(i)}, {"file", p.module(i)}});
    const auto self = node_self_weights(p, f);
    json::array samples, weights;
    std::uint64_t total = 0;
    for_each_stack(p, self, [&](std::uint32_t n, const std::vector<std::uint32_t>& stack) {
        json::array s;
        for (auto it = stack.rbegin(); it != stack.rend(); ++it)
            s.push_back(*it);
        samples.push_back(std::move(s));
        weights.push_back(self[n]);
        total += self[n];
    });
    const auto base = event_base_name(p.event_name(f.event));
    const bool clock = base == "cpu-clock" || base == "task-clock";
    json::object prof{{"type", "sampled"},
                      {"name", name + " (" + std::string(p.event_name(f.event)) + ")"},
                      {"unit", f.by_period && clock ? "nanoseconds" : "none"},
                      {"startValue", 0},
                      {"endValue", total},
                      {"samples", std::move(samples)},
                      {"weights", std::move(weights)}};
    return json::object{{"$schema", "https://www.speedscope.app/file-format-schema.json"},
                        {"shared", {{"frames", std::move(frames)}}},
                        {"profiles", json::array{std::move(prof)}},
                        {"name", name},
                        {"activeProfileIndex", 0},
                        {"exporter", "perfwire " PERFWIRE_VERSION}};
}

json::object stat_json(const session_model& m) {
    json::object o;
    if (!m.last_stat)
        return o;
    json::array counters;
    for (const auto& c : m.last_stat->counters) {
        json::object jc{{"event", c.event},
                        {"value", c.value ? json::value(*c.value) : json::value(nullptr)},
                        {"unit", c.unit},
                        {"supported", c.supported},
                        {"counted", c.counted},
                        {"note", c.note}};
        jc["running_pct"] = c.running_pct ? json::value(*c.running_pct) : json::value(nullptr);
        counters.push_back(std::move(jc));
    }
    o["counters"] = std::move(counters);
    auto opt = [](const std::optional<double>& v) {
        return v ? json::value(*v) : json::value(nullptr);
    };
    o["ipc"] = opt(m.last_stat->ipc);
    o["cache_miss_pct"] = opt(m.last_stat->cache_miss_pct);
    o["branch_miss_pct"] = opt(m.last_stat->branch_miss_pct);
    o["elapsed_seconds"] = opt(m.last_stat->elapsed_seconds);
    o["scaled"] = m.last_stat->scaled();
    return o;
}

// A baseline's shares, keyed by "name\x1fmodule" for functions and by the ';'-joined path for
// flame-graph nodes, in percent of its total. Computed on the baseline session's strand.
struct baseline_shares {
    std::unordered_map<std::string, std::pair<double, double>> functions; // self %, total %
    std::unordered_map<std::string, double> nodes;                        // inclusive %
    std::string error;
};

std::string function_key(std::string_view name, std::string_view module) {
    std::string k(name);
    k.push_back('\x1f');
    k.append(module);
    return k;
}

asio::awaitable<baseline_shares> compute_baseline(std::shared_ptr<session_entry> e,
                                                  app_context* app, view_params v) {
    ensure_loaded(*e, app->store);
    const profile& p = e->model->prof;
    baseline_shares b;
    v.tid.reset(); // a thread or window of one session means nothing in the other
    v.start_s.reset();
    v.end_s.reset();
    json::object err;
    const auto f = make_filter(p, v, err);
    if (!f) {
        b.error = "baseline: " + std::string(err.at("message").as_string());
        co_return b;
    }
    const auto t = functions(p, *f);
    for (const auto& r : t.rows)
        b.functions[function_key(p.symbol(r.frame), p.module(r.frame))] = {
            pct(r.self, t.total_weight), pct(r.total, t.total_weight)};
    const auto incl = inclusive_weights(p, node_self_weights(p, *f));
    std::vector<std::string> path(p.node_count());
    for (std::uint32_t n = 1; n < p.node_count(); ++n) {
        const auto parent = p.node_parent(n);
        path[n] = (parent == profile::root ? std::string() : path[parent] + ";") +
                  std::string(p.symbol(p.node_frame(n)));
        if (incl[n])
            b.nodes[path[n]] = pct(incl[n], incl[0]);
    }
    co_return b;
}

// Adds baseline and delta fields: functions rows get baseline_self_pct and delta_self_pct
// (and the same for total); flame nodes get baseline_pct and delta_pct.
void apply_baseline(json::value& body, const baseline_shares& b, const std::string& id) {
    auto& o = body.as_object();
    o["baseline"] = id;
    if (auto* fns = o.if_contains("functions")) {
        for (auto& row : fns->as_array()) {
            auto& r = row.as_object();
            const auto it = b.functions.find(
                function_key(r.at("name").as_string(), r.at("module").as_string()));
            const double bs = it == b.functions.end() ? 0.0 : it->second.first;
            const double bt = it == b.functions.end() ? 0.0 : it->second.second;
            r["baseline_self_pct"] = bs;
            r["baseline_total_pct"] = bt;
            r["delta_self_pct"] = r.at("self_pct").as_double() - bs;
            r["delta_total_pct"] = r.at("total_pct").as_double() - bt;
        }
    }
    if (auto* root = o.if_contains("root")) {
        const double total = static_cast<double>(o.at("total").to_number<std::uint64_t>());
        struct item {
            json::object* node;
            std::string path;
        };
        std::vector<item> todo;
        for (auto& c : root->as_object()["children"].as_array())
            todo.push_back({&c.as_object(), std::string(c.at("name").as_string())});
        while (!todo.empty()) {
            auto [node, path] = std::move(todo.back());
            todo.pop_back();
            const auto it = b.nodes.find(path);
            const double base = it == b.nodes.end() ? 0.0 : it->second;
            const double now =
                total ? 100.0 * static_cast<double>(node->at("value").to_number<std::uint64_t>()) /
                            total
                      : 0.0;
            (*node)["baseline_pct"] = base;
            (*node)["delta_pct"] = now - base;
            for (auto& c : (*node)["children"].as_array())
                todo.push_back(
                    {&c.as_object(), path + ";" + std::string(c.at("name").as_string())});
        }
    }
}

// What a view computes on the strand: a JSON body (or a text body), or an error. The body
// lives in an arena of its own (a flame graph is a node per stack), freed whole with it;
// values built in that storage are moved into it, never copied.
struct view_result {
    http::status status = http::status::ok;
    json::value body = json::value(json::make_shared_resource<json::monotonic_resource>());
    std::string text; // set for text exports
};

enum class view_kind {
    functions,
    flamegraph,
    threads,
    meta,
    export_collapsed,
    export_json,
    export_speedscope,
    export_svg,
    export_pprof,
    metrics,
    source
};

asio::awaitable<view_result> compute_view(std::shared_ptr<session_entry> e, app_context* app,
                                          view_kind kind, view_params v) {
    ensure_loaded(*e, app->store);
    const session_model& m = *e->model;
    view_result r;
    if (kind == view_kind::metrics) {
        // Health history from metrics.jsonl; start/end in seconds from the session's start.
        const auto meta = app->store.meta(e->id);
        const double t0 = meta && meta->contains("started_at") && meta->at("started_at").is_number()
                              ? meta->at("started_at").to_number<double>()
                              : 0.0;
        json::array out;
        for (const auto& line : app->store.metrics(e->id)) {
            boost::system::error_code ec;
            auto sample = json::parse(line, ec);
            if (ec || !sample.is_object())
                continue;
            const auto* type = sample.as_object().if_contains("type");
            const auto* ts = sample.as_object().if_contains("ts");
            if (!v.metrics_type.empty() &&
                (!type || !type->is_string() || type->as_string() != v.metrics_type))
                continue;
            const double rel = ts && ts->is_number() ? ts->to_number<double>() - t0 : 0.0;
            if ((v.start_s && rel < *v.start_s) || (v.end_s && rel > *v.end_s))
                continue;
            out.push_back(std::move(sample));
        }
        r.body = std::move(out);
        co_return r;
    }
    if (kind == view_kind::meta) {
        json::object o = app->store.meta(e->id).value_or(json::object());
        o["samples"] = m.prof.sample_count();
        o["bad_chunks"] = m.bad_chunks;
        o["lost_samples"] = m.parser.stats().lost_events;
        o["skipped_lines"] = m.parser.stats().skipped_lines;
        // Live: as it stands now; saved: as the metadata recorded it (after a restart too).
        o["live"] = e->live.load();
        o["unparsed_chunks"] = e->live ? e->unparsed_chunks : 0; // saved: replayed whole
        o["chunks"] = m.chunks + (e->live ? e->unparsed_chunks : 0);
        if (e->live) {
            o["unsaved_chunks"] = e->unsaved_chunks();
            o["unsaved_samples"] = e->unsaved_samples();
            o["store_error"] = e->store_error;
        } else if (!o.contains("unsaved_chunks")) {
            o["unsaved_chunks"] = 0;
        }
        json::array events;
        for (const auto& ev : m.event_types)
            events.emplace_back(ev);
        o["event_types"] = std::move(events);
        o["perf_stat"] = stat_json(m);
        o["duration_sec"] =
            m.prof.sample_count()
                ? static_cast<double>(m.prof.last_time() - m.prof.first_time()) / 1e9
                : 0.0;
        r.body = std::move(o);
        co_return r;
    }
    json::object err;
    const auto f = make_filter(m.prof, v, err);
    if (!f) {
        r.status = err.at("code").as_string() == "no_data" ? http::status::not_found
                                                           : http::status::bad_request;
        r.body = json::object{{"error", std::move(err)}};
        co_return r;
    }
    const json::storage_ptr arena = r.body.storage();
    switch (kind) {
    case view_kind::functions:
        r.body = functions_json(m.prof, *f, 1000000, arena);
        break;
    case view_kind::flamegraph:
        r.body =
            flamegraph_json(m.prof, *f, v.max_depth.value_or(256), v.min_pct.value_or(0.0), arena);
        break;
    case view_kind::threads:
        r.body = threads_json(m.prof, *f, arena);
        break;
    case view_kind::export_collapsed:
        r.text = collapsed_text(m.prof, *f);
        break;
    case view_kind::export_json:
        r.body = json::object({{"functions", functions_json(m.prof, *f, 1000000, arena)},
                               {"flamegraph", flamegraph_json(m.prof, *f, 1 << 20, 0.0, arena)},
                               {"threads", threads_json(m.prof, *f, arena)}},
                              arena);
        break;
    case view_kind::export_speedscope:
        r.body = speedscope_json(m.prof, *f, e->id);
        break;
    case view_kind::export_svg:
        r.text = flame_svg(m.prof, *f,
                           e->id + " — " + std::string(m.prof.event_name(f->event)) + " by " +
                               (f->by_period ? "period" : "samples"));
        break;
    case view_kind::export_pprof:
        r.text = pprof_profile(m.prof, *f);
        break;
    case view_kind::source: {
        auto a = source_view(m.prof, *f, app->symbols, v.source, m.device_build_ids);
        r.status = static_cast<http::status>(a.status);
        r.body = std::move(a.body);
        break;
    }
    case view_kind::meta:
    case view_kind::metrics:
        break; // answered above
    }
    co_return r;
}

std::vector<std::shared_ptr<agent_link>> agents_of(const app_context& app) {
    std::vector<std::shared_ptr<agent_link>> out;
    for (const auto& [id, weak] : app.targets)
        if (auto link = weak.lock(); link && link->introduced())
            out.push_back(std::move(link));
    return out;
}

// On the pool: a file handed out as it is (an agent executable).
asio::awaitable<std::optional<std::string>> read_whole_file(std::string path) {
    std::ifstream in(path, std::ios::binary);
    if (!in)
        co_return std::nullopt;
    std::ostringstream ss;
    ss << in.rdbuf();
    co_return std::move(ss).str();
}

// On the pool: a folder listing for the file browser.
asio::awaitable<browse_result> list_folder(std::string root, std::string path) {
    co_return browse(root, path);
}

// On the pool: every session's metadata from disk.
asio::awaitable<std::vector<json::object>> read_session_list(const session_store* store) {
    co_return store->list();
}

struct page_params {
    std::string q; // lowercased
    std::size_t offset = 0;
    std::size_t limit = std::numeric_limits<std::size_t>::max();
    std::string error;
};

page_params parse_page(const target_url& u) {
    page_params p;
    auto number = [&](const char* key, std::size_t& out) {
        const auto it = u.query.find(key);
        if (it == u.query.end())
            return;
        const auto& v = it->second;
        if (v.empty() || v.size() > 9 ||
            !std::all_of(v.begin(), v.end(), [](char c) { return c >= '0' && c <= '9'; }))
            p.error = std::string(key) + " must be a number";
        else
            out = std::stoul(v);
    };
    number("offset", p.offset);
    number("limit", p.limit);
    if (const auto it = u.query.find("q"); it != u.query.end())
        for (char c : it->second)
            p.q.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
    return p;
}

// Keeps the page of `metas` (newest first) that `p` asks for; returns how many matched.
std::size_t select_page(std::vector<json::object>& metas, const page_params& p) {
    auto field = [](const json::object& m, const char* key) {
        const auto* v = m.if_contains(key);
        std::string out = v && v->is_string() ? std::string(v->as_string()) : std::string();
        for (char& c : out)
            c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
        return out;
    };
    if (!p.q.empty())
        std::erase_if(metas, [&](const json::object& m) {
            for (const char* key : {"id", "hostname", "agent", "peer"})
                if (field(m, key).find(p.q) != std::string::npos)
                    return false;
            return true;
        });
    auto started = [](const json::object& m) {
        const auto* v = m.if_contains("started_at");
        return v && v->is_number() ? v->to_number<double>() : 0.0;
    };
    std::stable_sort(metas.begin(), metas.end(), [&](const json::object& a, const json::object& b) {
        return started(a) > started(b);
    });
    const std::size_t total = metas.size();
    const std::size_t from = std::min(p.offset, total);
    const std::size_t to = from + std::min(p.limit, total - from);
    metas.erase(metas.begin() + static_cast<std::ptrdiff_t>(to), metas.end());
    metas.erase(metas.begin(), metas.begin() + static_cast<std::ptrdiff_t>(from));
    return total;
}

// On the I/O thread, which owns the registry: live sessions get their current counts.
json::array session_list(app_context& app, std::vector<json::object> metas) {
    json::array out;
    for (auto& meta : metas) {
        const std::string id(meta.at("id").as_string());
        const bool live = app.sessions.is_live(id);
        meta["live"] = live;
        if (live)
            if (auto e = app.sessions.find(id)) {
                meta["samples"] = e->samples.load();
                meta["chunks"] = e->chunks.load();
            }
        out.push_back(std::move(meta));
    }
    return out;
}

std::optional<json::object> json_body(const http_request& req) {
    boost::system::error_code ec;
    auto v = json::parse(req.body(), ec);
    if (ec || !v.is_object())
        return std::nullopt;
    return std::move(v.as_object());
}

} // namespace

std::optional<http_response> check_access(const app_context& app, const http_request& req) {
    const auto host = req[http::field::host];
    if (!allowed_host(app, host))
        return make_error(req, http::status::forbidden, "bad_host",
                          "the Host header must name this collector");
    const auto method = req.method();
    const bool changes = method == http::verb::post || method == http::verb::put ||
                         method == http::verb::patch || method == http::verb::delete_;
    if (changes) {
        const auto origin = req[http::field::origin];
        if (!origin.empty() && origin != "http://" + std::string(host))
            return make_error(req, http::status::forbidden, "bad_origin",
                              "requests that change state must come from the collector's own "
                              "page");
    }
    const std::string_view target(req.target().data(), req.target().size());
    // The UI's own files, and the agent executables (public builds, checked by their sha256,
    // fetched from the device itself), need no token.
    const bool get = method == http::verb::get || method == http::verb::head;
    const bool ui_file = get && ((target.rfind("/api/", 0) != 0 && target != "/api") ||
                                 target.rfind("/api/agent-binaries", 0) == 0);
    if (!app.api_token.empty() && !ui_file &&
        !presents_token(req[http::field::authorization], req[http::field::cookie], app.api_token)) {
        auto res = make_json(
            req, http::status::unauthorized,
            json::object{
                {"error", json::object{{"code", "unauthorized"},
                                       {"message", "this collector asks for its access token: "
                                                   "open the link it printed at start (UI and "
                                                   "API on http://…/?token=…), or send "
                                                   "Authorization: Bearer with the token kept in " +
                                                       app.api_token_file},
                                       {"token_file", app.api_token_file}}}});
        res.set(http::field::www_authenticate, "Bearer realm=\"perfwire\"");
        return res;
    }
    return std::nullopt;
}

asio::awaitable<http_response> handle_request(app_context& app, http_request req) {
    if (auto refused = check_access(app, req))
        co_return std::move(*refused);
    const auto url = split_target(req.target());
    const auto& s = url.segments;
    const auto method = req.method();
    auto not_found = [&] {
        return make_error(req, http::status::not_found, "not_found", "no such resource");
    };
    auto wrong_method = [&] {
        return make_error(req, http::status::method_not_allowed, "method_not_allowed",
                          "method not allowed here");
    };

    if (s.empty() || s[0] != "api")
        co_return not_found();

    if (s.size() == 2 && s[1] == "status") {
        if (method != http::verb::get)
            co_return wrong_method();
        const auto uptime =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - app.started).count();
        co_return make_json(req, http::status::ok,
                            json::object{{"version", PERFWIRE_VERSION},
                                         {"uptime_sec", uptime},
                                         {"agent_listener", app.agent_listen_address},
                                         {"targets", agents_of(app).size()},
                                         {"sessions", app.store.count()},
                                         {"token_file", app.api_token_file},
                                         {"enrollment", !app.enrollment.empty()},
                                         {"enrollment_file", app.enrollment_file}});
    }

    if (s.size() == 2 && s[1] == "config") {
        if (method == http::verb::get)
            co_return make_json(req, http::status::ok,
                                config_json(app.symbols.config(), app.limits));
        if (method != http::verb::put)
            co_return wrong_method();
        const auto body = json_body(req);
        if (!body)
            co_return make_error(req, http::status::bad_request, "bad_request",
                                 "body must be a JSON object");
        auto c = app.symbols.config();
        if (auto error = update_config(c, *body, app.limits); !error.empty())
            co_return make_error(req, http::status::bad_request, "bad_config", error);
        app.symbols.configure(c);
        co_return make_json(req, http::status::ok, config_json(c, app.limits));
    }

    if (s.size() >= 2 && s.size() <= 3 && s[1] == "agent-binaries") {
        if (method != http::verb::get)
            co_return wrong_method();
        if (s.size() == 2) {
            json::array list;
            for (const auto& b : app.agent_binaries)
                list.push_back({{"arch", b.arch},
                                {"file", b.file},
                                {"size", b.size},
                                {"sha256", b.sha256},
                                {"download", "/api/agent-binaries/" + b.arch}});
            co_return make_json(req, http::status::ok, json::object{{"binaries", std::move(list)}});
        }
        // Only a file found at start, by its architecture: no request names a path.
        const auto it = std::find_if(app.agent_binaries.begin(), app.agent_binaries.end(),
                                     [&](const agent_binary& b) { return b.arch == s[2]; });
        if (it == app.agent_binaries.end())
            co_return make_error(req, http::status::not_found, "no_agent_binary",
                                 "no agent built for " + s[2]);
        auto bytes = co_await asio::co_spawn(app.pool, read_whole_file(it->path.string()),
                                             asio::use_awaitable);
        if (!bytes)
            co_return make_error(req, http::status::internal_server_error, "io",
                                 "cannot read " + it->file);
        http_response res{http::status::ok, req.version()};
        res.set(http::field::content_type, "application/octet-stream");
        res.set(http::field::content_disposition, "attachment; filename=\"" + it->file + "\"");
        res.set(http::field::cache_control, "no-store");
        res.keep_alive(req.keep_alive());
        res.body() = std::move(*bytes);
        res.prepare_payload();
        co_return res;
    }

    if (s.size() == 2 && s[1] == "browse") {
        if (method != http::verb::get)
            co_return wrong_method();
        std::string path; // (a local: GCC 12 frees a ?: temporary inside co_await twice)
        if (const auto it = url.query.find("path"); it != url.query.end())
            path = it->second;
        auto r = co_await asio::co_spawn(app.pool, list_folder(app.limits.browse_root, path),
                                         asio::use_awaitable);
        if (r.status != 200)
            co_return make_json(req, static_cast<http::status>(r.status),
                                json::object{{"error", std::move(r.body)}});
        co_return make_json(req, http::status::ok, r.body);
    }

    if (s.size() >= 2 && s[1] == "targets") {
        if (s.size() == 2) {
            if (method != http::verb::get)
                co_return wrong_method();
            json::array out;
            for (const auto& link : agents_of(app))
                out.push_back(link->describe());
            co_return make_json(req, http::status::ok, out);
        }
        if (s.size() == 3 && s[2] == "connect") {
            if (method != http::verb::post)
                co_return wrong_method();
            const auto body = json_body(req);
            const auto* host = body ? body->if_contains("host") : nullptr;
            const auto* port = body ? body->if_contains("port") : nullptr;
            if (!host || !host->is_string() || !port || !(port->is_int64() || port->is_string()))
                co_return make_error(req, http::status::bad_request, "bad_request",
                                     "body must be {\"host\": string, \"port\": number, "
                                     "\"token\"?: string}");
            std::optional<std::string> token;
            if (const auto* t = body->if_contains("token"); t && t->is_string())
                token = std::string(t->as_string());
            const std::string port_text = port->is_int64() ? std::to_string(port->as_int64())
                                                           : std::string(port->as_string());
            auto [id, error] =
                co_await dial_agent(app, std::string(host->as_string()), port_text, token);
            if (id.empty())
                co_return make_error(req, http::status::bad_gateway, "connect_failed", error);
            json::object out{{"id", id}};
            if (auto link = app.targets[id].lock())
                out = link->describe();
            co_return make_json(req, http::status::ok, out);
        }
        const auto it = app.targets.find(s[2]);
        auto link = it == app.targets.end() ? nullptr : it->second.lock();
        if (!link)
            co_return make_error(req, http::status::not_found, "no_target",
                                 "no connected agent " + s[2]);
        if (s.size() == 3) {
            if (method != http::verb::delete_)
                co_return wrong_method();
            (void)co_await link->command(std::string(protocol::cmd::stop), {},
                                         std::chrono::seconds(5));
            link->close();
            co_return no_content(req);
        }
        if (s.size() == 4 && s[3] == "command") {
            if (method != http::verb::post)
                co_return wrong_method();
            const auto body = json_body(req);
            const auto* cmd = body ? body->if_contains("cmd") : nullptr;
            if (!cmd || !cmd->is_string() || cmd->as_string().empty())
                co_return make_error(req, http::status::bad_request, "bad_request",
                                     "body must be {\"cmd\": string, \"args\"?: object}");
            if (cmd->as_string() == "auth")
                co_return make_error(req, http::status::bad_request, "forbidden_command",
                                     "auth is not relayed; connect with a token instead");
            json::object args;
            if (const auto* a = body->if_contains("args"); a && a->is_object())
                args = a->as_object();
            auto r = co_await link->command(std::string(cmd->as_string()), std::move(args));
            json::object out = r.fields;
            out["ok"] = r.ok;
            if (!r.ok)
                out["error"] = r.error;
            co_return make_json(req, r.ok ? http::status::ok : http::status::conflict, out);
        }
        co_return not_found();
    }

    if (s.size() >= 2 && s[1] == "sessions") {
        if (s.size() == 2) {
            if (method != http::verb::get)
                co_return wrong_method();
            // Newest first; ?q= keeps those whose id, host, agent or peer contain it (any
            // case), ?offset= and ?limit= page them; X-Total-Count says how many matched.
            const auto page = parse_page(url);
            if (!page.error.empty())
                co_return make_error(req, http::status::bad_request, "bad_parameter", page.error);
            auto metas = co_await asio::co_spawn(
                asio::make_strand(app.pool), read_session_list(&app.store), asio::use_awaitable);
            const auto total = select_page(metas, page);
            auto res = make_json(req, http::status::ok, session_list(app, std::move(metas)));
            res.set("X-Total-Count", std::to_string(total));
            co_return res;
        }
        if (s.size() == 3 && s[2] == "import") {
            // The connection streams real uploads through the same path (upload.hpp); here
            // the body has arrived whole.
            if (method != http::verb::post)
                co_return wrong_method();
            if (req.body().empty())
                co_return make_error(req, http::status::bad_request, "empty",
                                     "send a perf.data file or perf script text as the body");
            auto up = upload::start(app, req.body().size());
            if (!up)
                co_return busy_importing(req);
            (void)co_await up->feed(req.body()); // a failure is answered by finish()
            co_return co_await up->finish(req);
        }
        auto e = app.sessions.find(s[2]);
        if (!e)
            co_return make_error(req, http::status::not_found, "no_session", "no session " + s[2]);
        if (s.size() == 3 && method == http::verb::delete_) {
            if (app.sessions.is_live(e->id))
                co_return make_error(req, http::status::conflict, "live",
                                     "the session is still receiving; disconnect its agent "
                                     "first");
            if (auto ec = app.store.remove(e->id))
                co_return make_error(req, http::status::internal_server_error, "io", ec.message());
            app.sessions.forget(e->id);
            app.changed("sessions", e->id);
            co_return no_content(req);
        }
        if (method != http::verb::get)
            co_return wrong_method();
        view_kind kind;
        if (s.size() == 3)
            kind = view_kind::meta;
        else if (s.size() == 4 && s[3] == "functions")
            kind = view_kind::functions;
        else if (s.size() == 4 && s[3] == "flamegraph")
            kind = view_kind::flamegraph;
        else if (s.size() == 4 && s[3] == "threads")
            kind = view_kind::threads;
        else if (s.size() == 4 && s[3] == "metrics")
            kind = view_kind::metrics;
        else if (s.size() == 4 && s[3] == "source")
            kind = view_kind::source;
        else if (s.size() == 4 && s[3] == "export") {
            const auto fmt = url.query.count("format") ? url.query.at("format") : "json";
            if (fmt == "collapsed")
                kind = view_kind::export_collapsed;
            else if (fmt == "json")
                kind = view_kind::export_json;
            else if (fmt == "speedscope")
                kind = view_kind::export_speedscope;
            else if (fmt == "svg")
                kind = view_kind::export_svg;
            else if (fmt == "pprof")
                kind = view_kind::export_pprof;
            else
                co_return make_error(req, http::status::bad_request, "bad_format",
                                     "format must be collapsed, json, svg, speedscope or pprof");
        } else
            co_return not_found();
        auto v = parse_view_params(url);
        if (!v.error.empty())
            co_return make_error(req, http::status::bad_request, "bad_parameter", v.error);
        std::optional<baseline_shares> base;
        if (!v.baseline.empty() &&
            (kind == view_kind::functions || kind == view_kind::flamegraph)) {
            auto b = app.sessions.find(v.baseline);
            if (!b)
                co_return make_error(req, http::status::not_found, "no_session",
                                     "no baseline session " + v.baseline);
            base = co_await asio::co_spawn(b->strand, compute_baseline(b, &app, v),
                                           asio::use_awaitable);
            if (!base->error.empty())
                co_return make_error(req, http::status::bad_request, "bad_baseline", base->error);
        }
        const std::string baseline_id = v.baseline;
        auto r = co_await asio::co_spawn(e->strand, compute_view(e, &app, kind, std::move(v)),
                                         asio::use_awaitable);
        if (base && r.status == http::status::ok)
            apply_baseline(r.body, *base, baseline_id);
        const bool binary_export = kind == view_kind::export_collapsed ||
                                   kind == view_kind::export_svg || kind == view_kind::export_pprof;
        if (binary_export && r.status == http::status::ok) {
            const char* type = kind == view_kind::export_svg     ? "image/svg+xml"
                               : kind == view_kind::export_pprof ? "application/octet-stream"
                                                                 : "text/plain; charset=utf-8";
            const char* suffix = kind == view_kind::export_svg     ? ".svg"
                                 : kind == view_kind::export_pprof ? ".pb"
                                                                   : ".collapsed.txt";
            http_response res{http::status::ok, req.version()};
            res.set(http::field::content_type, type);
            res.set(http::field::content_disposition,
                    "attachment; filename=\"" + e->id + suffix + "\"");
            if (kind == view_kind::export_svg) // its own zoom script runs; it can reach nothing
                res.set("Content-Security-Policy",
                        "default-src 'none'; script-src 'unsafe-inline'; "
                        "style-src 'unsafe-inline'; frame-ancestors 'none'");
            res.keep_alive(req.keep_alive());
            res.body() = std::move(r.text);
            res.prepare_payload();
            co_return res;
        }
        co_return make_json(req, r.status, r.body);
    }
    co_return not_found();
}

} // namespace collector
