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

// Seconds since the epoch of "1764460800" or a UTC "2026-11-30[THH:MM[:SS]][Z]" (a day that
// exists; no other zone).
std::optional<std::int64_t> epoch_seconds(std::string v) {
    if (!v.empty() && v.size() <= 12 && v.find_first_not_of("0123456789") == std::string::npos)
        return std::stoll(v);
    if (!v.empty() && v.back() == 'Z' && v.size() > 10)
        v.pop_back();
    static constexpr std::string_view shape = "dddd-dd-ddTdd:dd:dd";
    if (!(v.size() == 10 || v.size() == 16 || v.size() == 19))
        return std::nullopt;
    for (std::size_t i = 0; i < v.size(); ++i)
        if (shape[i] == 'd' ? !std::isdigit(static_cast<unsigned char>(v[i])) : v[i] != shape[i])
            return std::nullopt;
    const auto at = [&](std::size_t i, std::size_t n) {
        return i < v.size() ? std::stoi(v.substr(i, n)) : 0;
    };
    std::tm t{};
    t.tm_year = at(0, 4) - 1900;
    t.tm_mon = at(5, 2) - 1;
    t.tm_mday = at(8, 2);
    t.tm_hour = at(11, 2);
    t.tm_min = at(14, 2);
    t.tm_sec = at(17, 2);
    const std::tm asked = t;
    const auto seconds = ::timegm(&t);
    // (timegm moves 2025-02-30 to March the 2nd: a date it had to move does not exist)
    if (t.tm_year < 70 || t.tm_year != asked.tm_year || t.tm_mon != asked.tm_mon ||
        t.tm_mday != asked.tm_mday || t.tm_hour != asked.tm_hour || t.tm_min != asked.tm_min ||
        t.tm_sec != asked.tm_sec)
        return std::nullopt;
    return static_cast<std::int64_t>(seconds);
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
    // Frames held once (name and parent); a path spelled only for a frame with weight of its
    // own, and within bounds a hostile answer cannot stretch: 200,000 paths, 256 MiB of them.
    struct frame {
        std::string_view name;
        std::size_t parent; // npos: under the root
        int depth;
    };
    std::vector<frame> frames;
    std::vector<std::pair<const boost::json::object*, std::size_t>> todo{
        {&root, std::string::npos}};
    std::size_t paths = 0, bytes = 0;
    while (!todo.empty()) {
        const auto [node, at] = todo.back();
        todo.pop_back();
        if (at != std::string::npos)
            if (const auto* self = node->if_contains("self"); self && self->is_number())
                if (const double w = self->to_number<double>(); w > 0) {
                    std::vector<std::string_view> names;
                    for (auto f = at; f != std::string::npos; f = frames[f].parent)
                        names.push_back(frames[f].name);
                    std::string path;
                    for (auto it = names.rbegin(); it != names.rend(); ++it)
                        path += (path.empty() ? "" : ";") + std::string(*it);
                    if (++paths > 200'000 || (bytes += path.size()) > (std::size_t{256} << 20))
                        return;
                    stacks[std::move(path)] += w;
                }
        const int depth = at == std::string::npos ? 0 : frames[at].depth;
        if (depth >= 512)
            continue;
        if (const auto* c = node->if_contains("children"); c && c->is_array())
            for (const auto& k : c->as_array())
                if (const auto* o = k.if_object())
                    if (const auto* name = o->if_contains("name"); name && name->is_string()) {
                        frames.push_back({name->as_string(), at, depth + 1});
                        todo.emplace_back(o, frames.size() - 1);
                    }
    }
}

} // namespace

result<std::string> fleet_query(std::string_view selection, std::int64_t now,
                                const std::string& event) {
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
        std::string key(item.substr(0, eq));
        // (%26 for a '&' in a name; '+' is a name's own: operator+)
        const auto value = url_decode(
            eq == std::string_view::npos ? std::string_view() : item.substr(eq + 1), false);
        // (the Fleet view's own names, so its address's keys can be pasted)
        if (key == "fn")
            key = "function";
        else if (key == "range")
            key = "last";
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
        keys["from"] = std::to_string(std::max<std::int64_t>(0, now - *span));
        keys.erase("last");
    }
    if (!event.empty() && !keys.count("event"))
        keys["event"] = event;
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
    link +=
        "&range=" + (c.count("from")
                         ? std::to_string(std::max<std::int64_t>(1, now - std::stoll(c["from"])))
                         : std::string("0")); // (0: everything kept)
    return link + "&compare=build&base_build=" + base_build;
}

result<std::vector<run_table>> run_from_fleet(const api_client& api, const std::string& selection,
                                              const source_options& o, std::int64_t now) {
    auto query = fleet_query(selection, now, o.event);
    if (!query)
        return query.error();
    const auto bad = [&] {
        return failure("bad_answer",
                       api.base() + ": the fleet store's answer for " + selection +
                           " is not as the API says",
                       502);
    };
    const auto with = [](const std::string& q, const std::string& more) {
        return q + (q.empty() ? "" : "&") + more;
    };
    // The devices it holds, and their events: one event compared (nanoseconds of one clock
    // are not cycles of a counter), each device a run of its own (their spread is the runs').
    const auto listed = api.get("/api/fleet/devices?" + *query);
    if (!listed)
        return listed.error();
    std::vector<std::string> devices;
    std::set<std::string> events;
    try {
        for (const auto& d : listed->as_object().at("devices").as_array()) {
            devices.emplace_back(d.as_object().at("device").as_string());
            for (const auto& e : d.as_object().at("events").as_array())
                if (e.as_string() != "off-cpu")
                    events.emplace(e.as_string());
        }
    } catch (const std::exception&) {
        return bad();
    }
    if (devices.empty())
        return failure("no_samples", selection + ": the fleet store holds no samples for it");
    if (query->find("event=") == std::string::npos) {
        if (events.size() > 1) {
            std::string names;
            for (const auto& e : events)
                names += (names.empty() ? "" : ", ") + e;
            return failure("several_events", selection + ": its devices sampled " + names +
                                                 ": name one (event= or --event)");
        }
        if (events.size() == 1)
            *query = with(*query, "event=" + url_encode(*events.begin()));
    }
    // Per device when there are a few (a query each); else the selection as one run.
    std::vector<std::pair<std::string, std::string>> asked; // source, query
    if (devices.size() > 1 && devices.size() <= 32) {
        std::string rest; // the query without its devices
        for (std::size_t from = 0; from < query->size();) {
            const auto amp = std::min(query->find('&', from), query->size());
            const auto item = query->substr(from, amp - from);
            if (!item.starts_with("devices="))
                rest = with(rest, item);
            from = amp + 1;
        }
        for (const auto& d : devices)
            asked.emplace_back(selection + " · " + d, with(rest, "devices=" + url_encode(d)));
    } else {
        asked.emplace_back(selection, *query);
    }
    std::vector<run_table> runs;
    for (const auto& [source, q] : asked) {
        const auto table = api.get("/api/fleet/functions?" + with(q, "limit=100000"));
        if (!table)
            return table.error();
        run_table t;
        t.source = source;
        try {
            read_functions(t, table->as_object(), "period", "self_period", "total_period");
        } catch (const std::exception&) {
            return bad();
        }
        runs.push_back(std::move(t));
    }
    // The call paths of the whole selection, for the diff flame graph.
    const auto tree =
        api.get("/api/fleet/flamegraph?" + with(*query, "weight=period&group=none&min_pct=0"));
    if (!tree)
        return tree.error();
    try {
        if (const auto* root = tree->as_object().if_contains("root"); root && root->is_object())
            add_tree(runs.front().stacks, root->as_object());
        if (const auto* ev = tree->as_object().if_contains("event");
            ev && ev->is_string() && !ev->as_string().empty())
            for (auto& r : runs)
                r.facts["event"] = std::string(ev->as_string());
    } catch (const std::exception&) {
        return bad();
    }
    return runs;
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
