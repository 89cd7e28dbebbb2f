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
#include <cstdlib>
#include <filesystem>
#include <fstream>
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

} // namespace

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
        t.samples = o2.at("samples").to_number<std::uint64_t>();
        t.weight = o2.at("total").to_number<double>();
        for (const auto& r : o2.at("functions").as_array()) {
            const auto& row = r.as_object();
            t.rows.push_back(
                {std::string(row.at("name").as_string()), std::string(row.at("module").as_string()),
                 row.at("self").to_number<double>(), row.at("total").to_number<double>()});
        }
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
