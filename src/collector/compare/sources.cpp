#include "collector/compare/sources.hpp"

#include "collector/compare/client.hpp"

#include "collector/export/exports.hpp"
#include "collector/http/target.hpp"
#include "collector/model/view_json.hpp"
#include "collector/model/views.hpp"
#include "collector/session_model.hpp"
#include "collector/store/import.hpp"
#include "collector/store/session_store.hpp"
#include "collector/symbols/kernel_symbols.hpp"

#include <boost/json/value.hpp>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <optional>
#include <set>
#include <unistd.h>

namespace collector::compare {

namespace fs = std::filesystem;

namespace {

// A folder of its own under the system's temporary one, removed with this.
struct scratch {
    fs::path path;
    scratch() {
        std::string t = (fs::temp_directory_path() / "perfwire-compare-XXXXXX").string();
        if (::mkdtemp(t.data()))
            path = t;
    }
    ~scratch() {
        std::error_code ec;
        if (!path.empty())
            fs::remove_all(path, ec);
    }
};

void fact(run_table& t, const boost::json::object& meta, const char* key, const char* name) {
    if (const auto* v = meta.if_contains(key)) {
        if (v->is_string())
            t.facts[name] = std::string(v->as_string());
        else if (v->is_int64())
            t.facts[name] = std::to_string(v->as_int64());
        else if (v->is_uint64())
            t.facts[name] = std::to_string(v->as_uint64());
        else if (v->is_double())
            t.facts[name] = num("%g", v->as_double());
    }
}

// Seconds since the epoch of "1764460800" or a UTC "2026-11-30[THH:MM[:SS]]".
std::optional<std::int64_t> epoch_seconds(const std::string& v) {
    if (!v.empty() && v.size() <= 12 && v.find_first_not_of("0123456789") == std::string::npos)
        return std::stoll(v);
    std::tm t{};
    int y = 0, mo = 0, d = 0, h = 0, mi = 0, sec = 0;
    char extra = 0;
    const int n =
        std::sscanf(v.c_str(), "%4d-%2d-%2dT%2d:%2d:%2d%c", &y, &mo, &d, &h, &mi, &sec, &extra);
    if (!(n == 3 || n == 5 || n == 6) || (n == 3 && v.size() != 10) || mo < 1 || mo > 12 || d < 1 ||
        d > 31 || h > 23 || mi > 59 || sec > 60 || y < 1970 || y > 9999)
        return std::nullopt;
    t.tm_year = y - 1900;
    t.tm_mon = mo - 1;
    t.tm_mday = d;
    t.tm_hour = h;
    t.tm_min = mi;
    t.tm_sec = sec;
    return static_cast<std::int64_t>(::timegm(&t));
}

// Seconds of "3600", "90m", "24h", "7d".
std::optional<std::int64_t> span_seconds(const std::string& v) {
    if (v.empty() || v.size() > 10 || !std::isdigit(static_cast<unsigned char>(v[0])))
        return std::nullopt;
    std::size_t used = 0;
    const auto n = std::stoll(v, &used);
    const std::string unit = v.substr(used);
    const std::int64_t scale = unit.empty() || unit == "s" ? 1
                               : unit == "m"               ? 60
                               : unit == "h"               ? 3600
                               : unit == "d"               ? 86400
                                                           : 0;
    if (!scale || n <= 0)
        return std::nullopt;
    return n * scale;
}

// An API's function table into `t`: its samples, its whole weight (`whole`) and each row's
// self and total weight (`self`, `total`). Throws for what is not so (the caller says whose).
void read_functions(run_table& t, const boost::json::object& answer, const char* whole,
                    const char* self, const char* total) {
    t.samples = answer.at("samples").to_number<std::uint64_t>();
    t.weight = answer.at(whole).to_number<double>();
    for (const auto& r : answer.at("functions").as_array()) {
        const auto& row = r.as_object();
        t.rows.push_back({std::string(row.at("name").as_string()),
                          std::string(row.at("module").as_string()),
                          row.at(self).to_number<double>(), row.at(total).to_number<double>()});
    }
}

// A fleet answer's tree, root first, as collapsed call paths weighed by each frame's own.
void add_tree(std::map<std::string, double>& stacks, const boost::json::object& root) {
    struct at {
        const boost::json::object* node;
        std::string path;
        int depth;
    };
    std::vector<at> todo;
    const auto children = [&](const boost::json::object& n, const std::string& path, int depth) {
        if (const auto* c = n.if_contains("children"); c && c->is_array() && depth < 512)
            for (const auto& k : c->as_array())
                if (const auto* o = k.if_object())
                    if (const auto* name = o->if_contains("name"); name && name->is_string())
                        todo.push_back(
                            {o, (path.empty() ? "" : path + ";") + std::string(name->as_string()),
                             depth + 1});
    };
    children(root, "", 0);
    while (!todo.empty()) {
        const auto a = std::move(todo.back());
        todo.pop_back();
        if (const auto* self = a.node->if_contains("self"); self && self->is_number())
            if (const double w = self->to_number<double>(); w > 0)
                stacks[a.path] += w;
        children(*a.node, a.path, a.depth);
    }
}

} // namespace

result<std::string> fleet_query(std::string_view selection, std::int64_t now) {
    if (!is_fleet(selection))
        return failure("bad_fleet",
                       std::string(selection) + ": a fleet selection is fleet:KEY=VALUE&…");
    std::map<std::string, std::string> keys;
    std::string_view rest = selection.substr(6);
    while (!rest.empty()) {
        const auto amp = rest.find('&');
        const auto item = rest.substr(0, amp);
        rest = amp == std::string_view::npos ? std::string_view() : rest.substr(amp + 1);
        if (item.empty())
            continue;
        const auto eq = item.find('=');
        const std::string key(item.substr(0, eq)),
            value(eq == std::string_view::npos ? std::string_view() : item.substr(eq + 1));
        static const std::set<std::string> known{"devices", "build", "from",    "to",
                                                 "last",    "event", "function"};
        if (!known.count(key) || eq == std::string_view::npos || value.empty())
            return failure("bad_fleet",
                           std::string(selection) + ": " + key +
                               (known.count(key) ? " has no value"
                                                 : " is not a fleet key (devices, build, from, "
                                                   "to, last, event, function)"));
        if (keys.count(key))
            return failure("bad_fleet", std::string(selection) + ": " + key + " given twice");
        keys[key] = value;
    }
    for (const char* key : {"from", "to"})
        if (keys.count(key)) {
            const auto t = epoch_seconds(keys[key]);
            if (!t)
                return failure("bad_fleet", std::string(selection) + ": " + key +
                                                " is seconds since the epoch or a UTC date "
                                                "(2026-11-30, 2026-11-30T12:00)");
            keys[key] = std::to_string(*t);
        }
    if (keys.count("last")) {
        const auto span = span_seconds(keys["last"]);
        if (!span || keys.count("from"))
            return failure("bad_fleet", std::string(selection) +
                                            (span ? ": last or from, not both"
                                                  : ": last is a span: 3600, 90m, 24h or 7d"));
        keys["from"] = std::to_string(now - *span);
        keys.erase("last");
    }
    std::string q;
    for (const auto& [key, value] : keys)
        q += (q.empty() ? "" : "&") + key + "=" + url_encode(value);
    return q;
}

std::string fleet_link(const std::string& base_url, const std::string& base,
                       const std::string& cand, std::int64_t now) {
    const auto parts = [](const std::string& q) {
        std::map<std::string, std::string> out;
        for (std::size_t from = 0; from < q.size();) {
            const auto amp = std::min(q.find('&', from), q.size());
            const auto item = q.substr(from, amp - from);
            out[item.substr(0, item.find('='))] = item.substr(item.find('=') + 1);
            from = amp + 1;
        }
        return out;
    };
    auto b = parts(base), c = parts(cand);
    if (!b.count("build") || !c.count("build") || b["build"] == c["build"] || c.count("to"))
        return {};
    const auto base_build = b["build"], cand_build = c["build"];
    b.erase("build");
    c.erase("build");
    if (b != c)
        return {};
    std::string link = base_url + "/#fleet&build=" + cand_build;
    for (const auto& [key, value] : c)
        if (key == "devices" || key == "event")
            link += "&" + key + "=" + value;
        else if (key == "function")
            link += "&fn=" + value;
    // (a range back from now, as the view keeps it)
    if (c.count("from"))
        link += "&range=" + std::to_string(std::max<std::int64_t>(1, now - std::stoll(c["from"])));
    return link + "&compare=build&base_build=" + base_build;
}

result<run_table> run_from_fleet(const api_client& api, const std::string& selection,
                                 const source_options& o, std::int64_t now) {
    auto query = fleet_query(selection, now);
    if (!query)
        return query.error();
    if (!o.event.empty() && query->find("event=") == std::string::npos)
        *query += (query->empty() ? "" : "&") + std::string("event=") + url_encode(o.event);
    const auto amp = query->empty() ? "" : "&";
    const auto table = api.get("/api/fleet/functions?" + *query + amp + "limit=100000");
    if (!table)
        return table.error();
    const auto tree =
        api.get("/api/fleet/flamegraph?" + *query + amp + "weight=period&group=none&min_pct=0");
    if (!tree)
        return tree.error();
    run_table t;
    t.source = selection;
    try {
        read_functions(t, table->as_object(), "period", "self_period", "total_period");
        if (const auto* root = tree->as_object().if_contains("root"); root && root->is_object())
            add_tree(t.stacks, root->as_object());
        if (const auto* ev = tree->as_object().if_contains("event");
            ev && ev->is_string() && !ev->as_string().empty())
            t.facts["event"] = std::string(ev->as_string());
    } catch (const std::exception&) {
        return failure("bad_answer",
                       api.base() + ": the fleet store's answer for " + selection +
                           " is not as the API says",
                       502);
    }
    return t;
}

result<run_table> table_of(const session_model& m, const std::string& event, std::string source) {
    const auto& p = m.prof;
    const auto ev = resolve_event(p, event);
    if (!ev.event) {
        std::string names;
        for (const auto& c : ev.candidates)
            names += (names.empty() ? "" : ", ") + c;
        return failure("bad_event",
                       source + ": " +
                           (p.event_count() ? "no event " + event + " (it has " + names + ")"
                                            : std::string("no samples")));
    }
    view_filter f;
    f.event = *ev.event;
    if (ev.also)
        f.also = *ev.also;
    run_table t;
    t.source = std::move(source);
    const auto table = functions(p, f);
    t.weight = static_cast<double>(table.total_weight);
    t.samples = view_samples(p, f);
    for (const auto& r : table.rows)
        t.rows.push_back({std::string(p.symbol(r.frame)), std::string(p.module(r.frame)),
                          static_cast<double>(r.self), static_cast<double>(r.total)});
    t.facts["event"] = std::string(view_event_name(p, f));
    const auto q = quality(p, f);
    if (q.total && q.unknown_leaf) {
        const double all = static_cast<double>(q.total);
        t.unnamed = t.weight * static_cast<double>(q.unknown_leaf) / all;
        for (const auto& [module, w] : q.unknown_modules)
            if (static_cast<double>(w) >= 0.01 * all)
                t.unnamed_modules.push_back(module.substr(module.rfind('/') + 1));
    }
    add_collapsed(t.stacks, collapsed_text(p, f));
    return t;
}

result<run_table> run_from_path(const std::string& path, const source_options& o) {
    std::error_code ec;
    const fs::path where(path);
    if (fs::is_directory(where, ec)) {
        // A saved session: its folder in a sessions directory.
        const auto id = where.filename().empty() ? where.parent_path().filename().string()
                                                 : where.filename().string();
        const auto root = (where.filename().empty() ? where.parent_path() : where).parent_path();
        if (!session_store::valid_id(id) || !fs::exists(where / "meta.json", ec))
            return failure("not_a_session",
                           path + ": a folder, but not a saved session (no meta.json)");
        const session_store store(root.empty() ? fs::path(".") : root, session_store::read_only);
        const auto meta = store.meta(id);
        if (!meta)
            return failure("not_a_session", path + ": its meta.json cannot be read");
        session_model m(o.names);
        m.owner_recording = store.owner_import(id); // (the store's mark, never the agent's)
        for (const auto& line : store.metrics(id))
            m.note_metrics(line);
        if (const auto kept = store.kernel_symbols(id))
            m.kernel = std::make_shared<const kernel_symbols>(kernel_symbols::parse(*kept));
        m.parser.memoize_frames(true);
        const auto replayed = store.replay(
            id, [&](bool compressed, std::string_view payload) { m.ingest(compressed, payload); });
        m.parser.memoize_frames(false);
        if (!replayed)
            return failure("io", path + ": " + replayed.error().message(), 500);
        auto t = table_of(m, o.event, path);
        if (!t)
            return t;
        fact(*t, *meta, "frequency", "frequency");
        fact(*t, *meta, "callgraph", "call graphs");
        if (const auto* pl = meta->if_contains("platform"); pl && pl->is_object()) {
            fact(*t, pl->as_object(), "kernel", "kernel");
            fact(*t, pl->as_object(), "arch", "architecture");
        }
        return t;
    }
    if (!fs::is_regular_file(where, ec))
        return failure("not_found", path + ": no such file or session folder", 404);
    // A recording: imported into a scratch store, gone when this returns.
    scratch tmp;
    if (tmp.path.empty())
        return failure("io", "cannot make a temporary folder", 500);
    session_store store(tmp.path);
    auto imported = import_file(store, path, path, o.perf, {}, o.names);
    if (!imported)
        return imported.error();
    return table_of(*imported->model, o.event, path);
}

result<run_table> run_from_session(const api_client& api, const std::string& id,
                                   const source_options& o) {
    if (!session_store::valid_id(id))
        return failure("not_found", id + ": no such file, session folder or session id", 404);
    // The event asked, as a query parameter both requests share (percent-encoded).
    const std::string event = o.event.empty() ? "" : "&event=" + url_encode(o.event);
    const std::string query = "/api/sessions/" + id + "/functions?limit=100000000" + event;
    const auto table = api.get(query);
    if (!table)
        return table.error();
    const auto meta = api.get("/api/sessions/" + id);
    if (!meta)
        return meta.error();
    const auto collapsed = api.get_text("/api/sessions/" + id + "/export?format=collapsed" + event);
    if (!collapsed)
        return collapsed.error();
    run_table t;
    t.source = id;
    try {
        const auto& o2 = table->as_object();
        read_functions(t, o2, "total", "self", "total");
        if (const auto* ev = o2.if_contains("event"); ev && ev->is_string())
            t.facts["event"] = std::string(ev->as_string());
    } catch (const std::exception&) {
        return failure("bad_answer",
                       api.base() + ": the functions of " + id + " are not as the API says", 502);
    }
    add_collapsed(t.stacks, *collapsed);
    // Code the collector could not name either.
    if (const auto q = api.get("/api/sessions/" + id + "/quality?limit=1" + event);
        q && q->is_object())
        if (const auto* checks = q->as_object().if_contains("checks"); checks && checks->is_array())
            for (const auto& c : checks->as_array()) {
                const auto* o3 = c.if_object();
                const auto* name = o3 ? o3->if_contains("id") : nullptr;
                const auto* share = o3 ? o3->if_contains("pct") : nullptr;
                if (!name || *name != "unknown" || !share || !share->is_number())
                    continue;
                t.unnamed = t.weight * std::clamp(share->to_number<double>(), 0.0, 100.0) / 100;
                if (const auto* d = o3->if_contains("detail"); d && d->is_array())
                    for (const auto& m : d->as_array())
                        if (const auto* mo = m.if_object())
                            if (const auto* n = mo->if_contains("name"); n && n->is_string()) {
                                const std::string module(n->as_string());
                                t.unnamed_modules.push_back(module.substr(module.rfind('/') + 1));
                            }
            }
    if (meta->is_object()) {
        const auto& m = meta->as_object();
        fact(t, m, "frequency", "frequency");
        fact(t, m, "callgraph", "call graphs");
        if (const auto* pl = m.if_contains("platform"); pl && pl->is_object()) {
            fact(t, pl->as_object(), "kernel", "kernel");
            fact(t, pl->as_object(), "arch", "architecture");
        }
    }
    return t;
}

} // namespace collector::compare
