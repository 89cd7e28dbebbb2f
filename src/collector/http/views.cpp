#include "collector/http/views.hpp"

#include "collector/export/exports.hpp"
#include "collector/live_session.hpp"
#include "collector/model/reshape.hpp"
#include "collector/model/view_json.hpp"
#include "collector/symbols/source_view.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/json/monotonic_resource.hpp>
#include <boost/json/serialize.hpp>

#include <algorithm>
#include <map>

namespace collector {

namespace {

// What a view needs, parsed from the query.
struct view_params {
    std::string event;
    bool by_period = true;
    std::optional<std::uint32_t> tid;
    std::optional<double> start_s, end_s, min_pct;
    std::optional<double> last_s; // last=N: the last N seconds of the session (a rolling window)
    std::optional<int> max_depth;
    std::string baseline; // session id to compare against
    std::string metrics_type;
    source_request source;  // file=, function=
    std::string module;     // sandwich: module= narrows function= to one module
    bool by_thread = false; // collapsed export: threads=1 roots each stack at its thread
    // inverted=1, focus=NAME, hide=A;B, drop=A;B, recursion=collapse, collapse=M;N
    tree_shape shape;
    std::optional<std::size_t> width; // timeline: buckets across the window
    function_page page;               // functions: sort=, order=, match=, offset=, limit=
};

result<view_params> parse_view_params(const target_url& u) {
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
    if (const auto it = u.query.find("module"); it != u.query.end())
        v.module = it->second;
    v.by_thread = u.param("threads") == "1";
    v.shape.inverted = u.param("inverted") == "1";
    v.shape.focus = u.param("focus");
    v.shape.callers = u.param("callers") == "1";
    v.shape.collapse_recursion = u.param("recursion") == "collapse";
    // Names as the views show them, ';' between (as in collapsed stacks): at most 64.
    auto names = [&](const char* key, std::vector<std::string>& out) {
        for (std::string_view rest = u.param(key); !rest.empty();) {
            const auto semi = rest.find(';');
            if (const auto name = rest.substr(0, semi); !name.empty())
                out.emplace_back(name);
            rest = semi == std::string_view::npos ? std::string_view() : rest.substr(semi + 1);
        }
        return out.size() <= 64;
    };
    if (!names("hide", v.shape.hide))
        return failure{"bad_parameter", "hide= names at most 64 functions"};
    if (!names("drop", v.shape.drop))
        return failure{"bad_parameter", "drop= names at most 64 functions"};
    if (!names("collapse", v.shape.collapse))
        return failure{"bad_parameter", "collapse= names at most 64 modules"};
    if (const auto it = u.query.find("weight"); it != u.query.end()) {
        if (it->second == "samples")
            v.by_period = false;
        else if (it->second != "period" && !it->second.empty())
            return failure{"bad_parameter", "weight must be period or samples"};
    }
    bool bad = false;
    if (const auto tid = number_param(u, "tid", bad)) {
        if (!(*tid >= 0 && *tid <= 4294967295.0))
            return failure{"bad_parameter", "tid must be a thread id"};
        v.tid = static_cast<std::uint32_t>(*tid);
    }
    // Seconds from the session's first sample, within a billion either way (ns stay within 64
    // bits; a window the health charts drew before the first sample starts below 0).
    v.start_s = number_param(u, "start", bad);
    v.end_s = number_param(u, "end", bad);
    for (const auto& t : {v.start_s, v.end_s})
        if (t && !(*t >= -1e9 && *t <= 1e9))
            return failure{"bad_parameter",
                           "start and end must be seconds within 1000000000 of the first sample"};
    v.last_s = number_param(u, "last", bad);
    if (v.last_s && !(*v.last_s > 0 && *v.last_s <= 1e9))
        return failure{"bad_parameter", "last must be a number of seconds above 0"};
    v.min_pct = number_param(u, "min_pct", bad);
    if (const auto d = number_param(u, "max_depth", bad)) {
        if (!(*d >= 0 && *d <= 1e6))
            return failure{"bad_parameter", "max_depth must be from 0 to 1000000"};
        v.max_depth = static_cast<int>(*d);
    }
    if (const auto w = number_param(u, "width", bad); w && *w >= 1 && *w <= 1e6)
        v.width = static_cast<std::size_t>(*w);
    if (const auto it = u.query.find("sort"); it != u.query.end()) {
        if (!sortable_function_field(it->second))
            return failure{"bad_parameter",
                           "sort must be self, total, self_pct, total_pct, name, module, "
                           "baseline_self_pct, delta_self_pct or delta_total_pct"};
        v.page.sort = it->second;
    }
    if (const auto order = u.param("order"); order == "asc" || order == "desc")
        v.page.descending = order == "desc";
    else if (!order.empty())
        return failure{"bad_parameter", "order must be asc or desc"};
    v.page.match = u.param("match");
    if (v.page.match.size() > 256)
        return failure{"bad_parameter", "match= is at most 256 characters"};
    if (const auto o = number_param(u, "offset", bad)) {
        if (!(*o >= 0 && *o <= 1e9))
            return failure{"bad_parameter", "offset must be from 0 to 1000000000"};
        v.page.offset = static_cast<std::size_t>(*o);
    }
    if (const auto l = number_param(u, "limit", bad)) {
        if (!(*l >= 0 && *l <= 1e9))
            return failure{"bad_parameter", "limit must be from 0 to 1000000000"};
        v.page.limit = static_cast<std::size_t>(*l);
    }
    if (bad)
        return failure{"bad_parameter",
                       "tid, start, end, min_pct, max_depth, offset and limit must be numbers"};
    return v;
}

// Resolves the event and the filter against a model (on the strand).
result<view_filter> make_filter(const profile& p, const view_params& v) {
    auto r = resolve_event(p, v.event);
    if (!r.event) {
        if (!p.event_count())
            return failure{"no_data", "the session has no samples yet", 404};
        return failure{"bad_event", "event '" + v.event + "' is not unique or unknown", 400,
                       std::move(r.candidates)};
    }
    view_filter f;
    f.event = *r.event;
    f.also = r.also.value_or(view_filter::no_event);
    f.by_period = v.by_period;
    f.tid = v.tid;
    const auto base = p.first_time();
    if (v.start_s)
        f.start_ns = base + static_cast<std::uint64_t>(std::max(0.0, *v.start_s) * 1e9);
    if (v.end_s)
        f.end_ns = base + static_cast<std::uint64_t>(std::max(0.0, *v.end_s) * 1e9);
    if (v.last_s) {
        // The last N seconds before the newest sample: what is hot now, in a live session.
        const auto span = static_cast<std::uint64_t>(*v.last_s * 1e9);
        const auto newest = p.last_time();
        const auto from = newest - base > span ? newest - span : base;
        f.start_ns = std::max(f.start_ns.value_or(0), from);
    }
    return f;
}

// On the baseline session's strand.
asio::awaitable<result<baseline_shares>> compute_baseline(std::shared_ptr<session_entry> e,
                                                          app_context* app, view_params v) {
    ensure_loaded(*e, app->store, &app->symbols);
    want_tables(e, *app);
    v.tid.reset(); // a thread or window of one session means nothing in the other
    v.start_s.reset();
    v.end_s.reset();
    v.last_s.reset();
    const auto f = make_filter(e->model->prof, v);
    if (!f)
        co_return failure{"bad_baseline", "baseline: " + f.error().message};
    co_return baseline_of(e->model->prof, *f, v.shape, v.min_pct.value_or(0.0));
}

// What a view computes on the strand: a JSON body (or a text body), or an error. The body
// lives in an arena of its own (a flame graph is a node per stack), freed whole with it;
// values built in that storage are moved into it, never copied.
struct view_result {
    http::status status = http::status::ok; // of a source view
    std::optional<failure> failed;
    json::value body = json::value(json::make_shared_resource<json::monotonic_resource>());
    std::string text;               // set for text exports
    std::string title;              // an export's: the session's name
    std::uint64_t view_samples = 0; // compared with a baseline: the samples of the view
};

// A session's name as the UI shows it: an import by the file it came from, else the process
// (its pid) on its host; its id when nothing names it.
std::string session_title(const json::object& meta, const session_model& m, const std::string& id) {
    auto text = [&](std::string_view key) -> std::string {
        const auto* v = meta.if_contains(key);
        return v && v->is_string() ? std::string(v->get_string()) : std::string();
    };
    std::string name;
    if (m.owner_recording) {
        name = text("source");
        name = name.substr(name.rfind('/') == std::string::npos ? 0 : name.rfind('/') + 1);
    } else {
        const auto* pid = meta.if_contains("pid");
        name = text("process");
        if (name.empty())
            name = std::string(process_name(m.prof, std::nullopt));
        if (pid && (pid->is_int64() || pid->is_uint64()))
            name += " (" + std::to_string(pid->to_number<std::uint64_t>()) + ")";
        if (const auto host = text("hostname"); !host.empty())
            name += " on " + host;
    }
    // Control characters never reach a title or a file name.
    std::erase_if(name, [](char c) { return static_cast<unsigned char>(c) < 0x20 || c == 0x7f; });
    return name.empty() ? id : name;
}

// An export's file name: the session's name in letters, digits, '.', '-' and '_' (at most 80),
// then its id.
std::string export_file_name(const std::string& title, const std::string& id) {
    std::string out;
    for (const char c : title) {
        const bool plain = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                           (c >= '0' && c <= '9') || c == '.' || c == '-' || c == '_';
        if (plain)
            out += c;
        else if (!out.empty() && out.back() != '_')
            out += '_';
        if (out.size() >= 80)
            break;
    }
    while (!out.empty() && (out.back() == '_' || out.front() == '.'))
        out.erase(out.back() == '_' ? out.end() - 1 : out.begin());
    return out.empty() || title == id ? id : out + "-" + id;
}

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
    source,
    sandwich,
    addresses,
    quality,
    timeline,
    disassembly
};

// A function's machine code with the samples that fell on each instruction (the session's
// own leaf addresses), disassembled from the symbol file the collector found for its module
// (symbolizer::disassemble). nullopt when no frame has that name.
std::optional<json::value> disassembly_json(const session_model& m, const view_filter& f,
                                            symbolizer& symbols, const std::string& name,
                                            const std::string& module,
                                            const json::storage_ptr& sp) {
    auto where = addresses_json(m.prof, f, name, module, SIZE_MAX, sp);
    if (!where)
        return std::nullopt;
    auto& o = where->as_object();
    // The module: the one asked for, else the one with the most samples in the function.
    std::string mod = module;
    std::map<std::uint64_t, std::uint64_t> by_offset;
    std::uint64_t sampled = 0;
    for (const auto& a : o.at("addresses").as_array()) {
        const auto& row = a.as_object();
        if (mod.empty())
            mod = std::string(row.at("module").as_string());
        if (row.at("module").as_string() != mod)
            continue;
        const auto w = row.at("self").to_number<std::uint64_t>();
        by_offset[row.at("offset").to_number<std::uint64_t>()] += w;
        sampled += w;
    }
    if (mod.empty()) // sampled only as a caller: its module from the frames
        for (std::uint32_t i = 0; i < m.prof.frame_count() && mod.empty(); ++i)
            if (m.prof.symbol(i) == name)
                mod = std::string(m.prof.module(i));
    const auto total = o.at("total").to_number<std::uint64_t>();
    const auto d = symbols.disassemble(mod, m.build_id_of(mod), name);
    json::array code(sp);
    std::uint64_t placed = 0;
    for (const auto& ins : d.code) {
        const auto it = by_offset.find(ins.offset);
        const std::uint64_t w = it == by_offset.end() ? 0 : it->second;
        placed += w;
        code.push_back(json::object(
            {{"offset", ins.offset},
             {"text", ins.text},
             {"self", w},
             {"self_pct",
              total ? 100.0 * static_cast<double>(w) / static_cast<double>(total) : 0.0}},
            sp));
    }
    o.erase("addresses");
    o.erase("addresses_total");
    o["module"] = mod;
    o["file"] = d.file;
    o["start"] = d.start;
    o["instructions"] = std::move(code);
    // Samples at an offset no instruction starts at (another build's addresses).
    o["unmatched"] = sampled - placed;
    o["error"] = d.error;
    return std::move(*where);
}

asio::awaitable<view_result> compute_body(std::shared_ptr<session_entry> e, app_context* app,
                                          view_kind kind, view_params v) {
    ensure_loaded(*e, app->store, &app->symbols);
    want_tables(e, *app); // what its parse did not wait for
    const session_model& m = *e->model;
    view_result r;
    if (kind == view_kind::metrics) {
        // Health history from metrics.jsonl; start/end in seconds from the session's start.
        const auto meta = app->store.meta(e->id);
        const double t0 = meta && meta->contains("started_at") && meta->at("started_at").is_number()
                              ? meta->at("started_at").to_number<double>()
                              : 0.0;
        r.body = metrics_history(app->store.metrics(e->id), t0, v.metrics_type, v.start_s, v.end_s);
        co_return r;
    }
    if (kind == view_kind::meta) {
        json::object o = app->store.meta(e->id).value_or(json::object());
        o["imported"] = m.owner_recording; // the store's mark, never the agent's word
        if (!o.contains("process")) {      // live: as the samples name it so far
            const auto* pid = o.if_contains("pid");
            o["process"] = process_name(
                m.prof, pid && pid->is_int64() ? std::optional<std::uint32_t>(
                                                     static_cast<std::uint32_t>(pid->as_int64()))
                                               : std::nullopt);
        }
        o["samples"] = m.prof.sample_count();
        // Symbol tables its parse did not wait for are still being read: the names of its
        // frames may yet change (named in place, or parsed again when next viewed).
        o["symbols_pending"] = e->reading_tables || !m.tables_wanted.empty();
        o["bad_chunks"] = m.bad_chunks;
        o["lost_samples"] = m.parser.stats().lost_events;
        o["skipped_lines"] = m.parser.stats().skipped_lines;
        // Live: as it stands now; saved: as the metadata recorded it (after a restart too).
        o["live"] = e->live.load();
        o["chunks"] = m.chunks;
        o["folded_samples"] = m.prof.sample_count() - m.prof.raw_samples();
        o["fold_interval_sec"] = static_cast<double>(m.prof.compact_width()) / 1e9;
        // Samples whose new frames, call paths or threads found the session's share of the
        // memory budget full (counted at profile::past_room_symbol).
        o["past_room_samples"] = m.prof.past_room_samples();
        if (e->live) {
            // Its run's link is down: the device records on, the samples come later.
            if (const double down = e->link_down_since.load(); down > 0)
                o["link_down_since"] = down;
            o["unsaved_chunks"] = e->unsaved_chunks();
            o["unsaved_samples"] = e->unsaved_samples();
            o["store_error"] = e->store_error;
            o["refused_chunks"] = e->refused_chunks;
            o["refused_bytes"] = e->refused_bytes;
        } else if (!o.contains("unsaved_chunks")) {
            o["unsaved_chunks"] = 0;
        }
        json::array events;
        for (const auto& ev : m.event_types)
            events.emplace_back(ev);
        o["event_types"] = std::move(events);
        o["perf_stat"] = stat_json(m);
        if (v.tid || v.start_s || v.end_s || v.last_s) {
            // Asked with a thread or a window: how many samples (of every event) it holds.
            std::uint64_t in_view = 0;
            for (std::uint8_t ev = 0; ev < m.prof.event_count(); ++ev) {
                v.event = std::string(m.prof.event_name(ev));
                if (const auto f = make_filter(m.prof, v))
                    in_view += view_samples(m.prof, *f);
            }
            o["view_samples"] = in_view;
        }
        o["duration_sec"] =
            m.prof.sample_count()
                ? static_cast<double>(m.prof.last_time() - m.prof.first_time()) / 1e9
                : 0.0;
        r.body = std::move(o);
        co_return r;
    }
    const auto f = make_filter(m.prof, v);
    if (!f) {
        r.failed = f.error();
        co_return r;
    }
    const json::storage_ptr arena = r.body.storage();
    // (Only the views a baseline is applied to: the others get the parameter too, unused.)
    if (!v.baseline.empty() && (kind == view_kind::functions || kind == view_kind::flamegraph))
        r.view_samples = view_samples(m.prof, *f);
    switch (kind) {
    case view_kind::functions:
        if (auto body = functions_json(m.prof, *f, 1000000, arena, v.shape))
            r.body = std::move(*body);
        else
            r.failed = failure("no_function",
                               "no sampled function " + v.shape.focus + " to focus on", 404);
        break;
    case view_kind::flamegraph:
        if (auto body = flamegraph_json(m.prof, *f, v.max_depth.value_or(256),
                                        v.min_pct.value_or(0.0), arena, v.shape))
            r.body = std::move(*body);
        else
            r.failed = failure("no_function",
                               "no sampled function " + v.shape.focus + " to focus on", 404);
        break;
    case view_kind::threads:
        r.body = threads_json(m.prof, *f, arena);
        break;
    case view_kind::timeline:
        r.body = timeline_json(m.prof, *f, v.width.value_or(1000), v.tid, arena, v.shape);
        break;
    case view_kind::quality:
        r.body = quality_json(m, *f, arena);
        break;
    case view_kind::sandwich:
        if (v.source.function.empty()) {
            r.failed = failure("bad_parameter", "function= names the function");
        } else if (auto body = sandwich_json(m.prof, *f, v.source.function, v.module, arena)) {
            r.body = std::move(*body);
        } else {
            r.failed = failure("no_function",
                               "no sampled function " + v.source.function + " in this view", 404);
        }
        break;
    case view_kind::addresses:
        if (v.source.function.empty()) {
            r.failed = failure("bad_parameter", "function= names the function");
        } else if (auto body =
                       addresses_json(m.prof, *f, v.source.function, v.module, 500, arena)) {
            r.body = std::move(*body);
        } else {
            r.failed = failure("no_function",
                               "no sampled function " + v.source.function + " in this view", 404);
        }
        break;
    case view_kind::export_collapsed:
    case view_kind::export_json:
    case view_kind::export_speedscope:
    case view_kind::export_svg:
    case view_kind::export_pprof: {
        // The file holds what the view shows: its transforms and its text filter too, the
        // view's samples made a profile of their own when either is asked for.
        std::unique_ptr<reshaped_view> shaped;
        const tree_shape& sh = v.shape;
        if (sh.reshapes() || !v.page.match.empty()) {
            shaped = reshape(m.prof, *f, sh, v.page.match);
            if (!shaped) {
                r.failed =
                    failure("no_function", "no sampled function " + sh.focus + " to focus on", 404);
                break;
            }
        }
        const profile& ep = shaped ? shaped->prof : m.prof;
        const view_filter ef = shaped ? shaped->filter : *f;
        const auto meta = app->store.meta(e->id).value_or(json::object());
        const std::string title = session_title(meta, m, e->id);
        r.title = title;
        if (kind == view_kind::export_collapsed) {
            r.text = collapsed_text(ep, ef, v.by_thread);
        } else if (kind == view_kind::export_json) {
            json::object o({{"name", title},
                            {"functions", *functions_json(ep, ef, 1000000, arena)},
                            {"flamegraph", *flamegraph_json(ep, ef, 1 << 20, 0.0, arena)},
                            {"threads", threads_json(ep, ef, arena)}},
                           arena);
            say_shape(o, sh);
            if (!v.page.match.empty())
                o["match"] = v.page.match;
            r.text = json::serialize(o);
        } else if (kind == view_kind::export_speedscope) {
            r.text = speedscope_json(ep, ef, title);
        } else if (kind == view_kind::export_svg) {
            r.text = flame_svg(ep, ef,
                               title + " — " + std::string(view_event_name(ep, ef)) + " by " +
                                   (ef.by_period ? "period" : "samples"));
        } else {
            // Symbolized as the source view is (on this strand, which runs on the pool).
            // A live session began at its first samples; an import's started_at is when it
            // was imported, which says nothing of when it was recorded.
            const bool imported = app->store.owner_import(e->id);
            const auto* started = !imported ? meta.if_contains("started_at") : nullptr;
            r.text =
                pprof_profile(ep, ef,
                              {&app->symbols, &m.device_build_ids,
                               started && started->is_number()
                                   ? static_cast<std::uint64_t>(started->to_number<double>() * 1e9)
                                   : 0,
                               m.build_id_of({})});
        }
        break;
    }
    case view_kind::source: {
        auto a =
            source_view(m.prof, *f, app->symbols, v.source, m.device_build_ids, m.build_id_of({}));
        r.status = static_cast<http::status>(a.status);
        r.body = std::move(a.body);
        break;
    }
    case view_kind::disassembly:
        if (v.source.function.empty() || v.source.function == "[unknown]") {
            r.failed = failure("bad_parameter", "function= names a function with a symbol");
        } else if (auto body =
                       disassembly_json(m, *f, app->symbols, v.source.function, v.module, arena)) {
            r.body = std::move(*body);
        } else {
            r.failed = failure("no_function",
                               "no sampled function " + v.source.function + " in this view", 404);
        }
        break;
    case view_kind::meta:
    case view_kind::metrics:
        break; // answered above
    }
    co_return r;
}

// The view, then what is done to its answer, on the strand too (a table of 100 k functions is
// sorted here, not on the I/O thread): a baseline's columns, then the page of the table asked
// for (after the columns it may be sorted by).
asio::awaitable<view_result> compute_view(std::shared_ptr<session_entry> e, app_context* app,
                                          view_kind kind, view_params v,
                                          std::optional<baseline_shares> base) {
    const function_page page = v.page;
    const std::string baseline_id = v.baseline;
    const double min_pct = v.min_pct.value_or(0.0);
    auto r = co_await compute_body(std::move(e), app, kind, std::move(v));
    if (r.failed || r.status != http::status::ok)
        co_return r;
    if (base)
        apply_baseline(r.body, *base, baseline_id, r.view_samples, min_pct);
    if (kind == view_kind::functions && r.body.is_object())
        page_functions(r.body.get_object(), page);
    co_return r;
}

struct export_format {
    std::string_view name;
    view_kind kind;
    const char* content_type; // nullptr: a JSON body
    const char* suffix;
};

constexpr export_format export_formats[] = {
    {"json", view_kind::export_json, "application/json", ".json"},
    {"collapsed", view_kind::export_collapsed, "text/plain; charset=utf-8", ".collapsed.txt"},
    {"speedscope", view_kind::export_speedscope, "application/json", ".speedscope.json"},
    {"svg", view_kind::export_svg, "image/svg+xml", ".svg"},
    {"pprof", view_kind::export_pprof, "application/octet-stream", ".pb.gz"},
};

constexpr std::pair<std::string_view, view_kind> views[] = {
    {"", view_kind::meta},
    {"functions", view_kind::functions},
    {"flamegraph", view_kind::flamegraph},
    {"threads", view_kind::threads},
    {"sandwich", view_kind::sandwich},
    {"addresses", view_kind::addresses},
    {"quality", view_kind::quality},
    {"timeline", view_kind::timeline},
    {"metrics", view_kind::metrics},
    {"source", view_kind::source},
    {"disassembly", view_kind::disassembly},
};

} // namespace

asio::awaitable<http_response> session_view(app_context& app, const http_request& req,
                                            const target_url& url, std::shared_ptr<session_entry> e,
                                            std::string_view view) {
    const export_format* format = nullptr;
    view_kind kind = view_kind::meta;
    if (view == "export") {
        const std::string& name = url.param("format");
        for (const auto& f : export_formats)
            if (f.name == (name.empty() ? "json" : name))
                format = &f;
        if (!format)
            co_return make_error(req, http::status::bad_request, "bad_format",
                                 "format must be collapsed, json, svg, speedscope or pprof");
        kind = format->kind;
    } else {
        const auto it = std::find_if(std::begin(views), std::end(views),
                                     [&](const auto& v) { return v.first == view; });
        if (it == std::end(views))
            co_return make_error(req, http::status::not_found, "not_found", "no such resource");
        kind = it->second;
    }
    auto parsed = parse_view_params(url);
    if (!parsed)
        co_return make_error(req, parsed.error());
    view_params v = std::move(*parsed);
    std::optional<baseline_shares> base;
    if (!v.baseline.empty() && (kind == view_kind::functions || kind == view_kind::flamegraph)) {
        auto b = app.sessions.find(v.baseline);
        if (!b)
            co_return make_error(req, http::status::not_found, "no_session",
                                 "no baseline session " + v.baseline);
        auto shares =
            co_await asio::co_spawn(b->strand, compute_baseline(b, &app, v), asio::use_awaitable);
        if (!shares)
            co_return make_error(req, shares.error());
        base = std::move(*shares);
    }
    auto r = co_await asio::co_spawn(
        e->strand, compute_view(e, &app, kind, std::move(v), std::move(base)), asio::use_awaitable);
    if (r.failed)
        co_return make_error(req, *r.failed);
    if (!format || !format->content_type || r.status != http::status::ok)
        co_return make_json(req, r.status, r.body);
    // A file to save: named after the session.
    http_response res{http::status::ok, req.version()};
    res.set(http::field::content_type, format->content_type);
    res.set(http::field::cache_control, "no-store");
    res.set(http::field::content_disposition,
            "attachment; filename=\"" + export_file_name(r.title, e->id) + format->suffix + "\"");
    if (kind == view_kind::export_svg) // its own zoom script runs; it can reach nothing
        res.set("Content-Security-Policy", "default-src 'none'; script-src 'unsafe-inline'; "
                                           "style-src 'unsafe-inline'; frame-ancestors 'none'");
    res.keep_alive(req.keep_alive());
    res.body() = std::move(r.text);
    res.prepare_payload();
    co_return res;
}

} // namespace collector
