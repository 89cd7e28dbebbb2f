#include "collector/http/routes.hpp"

#include "collector/agents/registry.hpp"
#include "collector/fleet/backlog.hpp"
#include "collector/fleet/store.hpp"
#include "collector/http/access.hpp"
#include "collector/http/handlers.hpp"
#include "collector/http/settings.hpp"
#include "collector/http/status.hpp"
#include "collector/http/target.hpp"
#include "collector/http/upload.hpp"
#include "collector/http/views.hpp"
#include "collector/live_session.hpp"
#include "protocol/pairing.hpp"
#include "protocol/tls.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/string.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <limits>
#include <optional>
#include <sstream>
#include <unistd.h>

namespace collector::routes {
namespace json = boost::json;

result<page_params> parse_page(const target_url& u) {
    page_params p;
    for (auto [key, out] : {std::pair{"offset", &p.offset}, std::pair{"limit", &p.limit}}) {
        const auto it = u.query.find(key);
        if (it == u.query.end())
            continue;
        const auto& v = it->second;
        if (v.empty() || v.size() > 9 ||
            !std::all_of(v.begin(), v.end(), [](char c) { return c >= '0' && c <= '9'; }))
            return failure{"bad_parameter", std::string(key) + " must be a number"};
        *out = std::stoul(v);
    }
    if (const auto it = u.query.find("q"); it != u.query.end())
        for (char c : it->second)
            p.q.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
    return p;
}

namespace {

// Keeps the page of `metas` (newest first by the time in `when`) that `p` asks for; returns
// how many matched.
std::size_t select_page(std::vector<json::object>& metas, const page_params& p, const char* when) {
    auto field = [](const json::object& m, const char* key) {
        const auto* v = m.if_contains(key);
        std::string out = v && v->is_string() ? std::string(v->as_string()) : std::string();
        for (char& c : out)
            c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
        return out;
    };
    if (!p.q.empty())
        std::erase_if(metas, [&](const json::object& m) {
            for (const char* key : {"id", "hostname", "agent", "peer", "process", "source"})
                if (field(m, key).find(p.q) != std::string::npos)
                    return false;
            if (const auto* pid = m.if_contains("pid"); pid && pid->is_number())
                if (std::to_string(pid->to_number<std::int64_t>()) == p.q)
                    return false;
            if (const auto* events = m.if_contains("event_types"); events && events->is_array())
                for (const auto& ev : events->as_array())
                    if (ev.is_string() &&
                        std::string(ev.as_string()).find(p.q) != std::string::npos)
                        return false;
            // What asked for it (a CI job: its name, URL, commit).
            if (const auto* o = m.if_contains("origin"); o && o->is_object())
                for (const auto& [key, v] : o->as_object())
                    if (field(o->as_object(), key.data()).find(p.q) != std::string::npos)
                        return false;
            return true;
        });
    auto started = [when](const json::object& m) {
        const auto* v = m.if_contains(when);
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

} // namespace

http_response page_answer(const http_request& req, std::vector<json::object> items,
                          const page_params& p, const char* when) {
    const auto total = select_page(items, p, when);
    json::array list;
    for (auto& m : items)
        list.emplace_back(std::move(m));
    auto res = make_json(req, http::status::ok, list);
    res.set("X-Total-Count", std::to_string(total));
    return res;
}
namespace {

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

// On a session's strand: its folder removed.
asio::awaitable<boost::system::error_code> remove_session(session_store* store, std::string id) {
    co_return store->remove(id);
}

// On the pool: every session's metadata from disk.
asio::awaitable<std::vector<json::object>> read_session_list(const session_store* store) {
    co_return store->list();
}

// On the I/O thread, which owns the registry: live sessions get their current counts, process
// and events (before a search, which finds them by those too).
void add_live_facts(app_context& app, std::vector<json::object>& metas) {
    // Removed while the list was read (an agent that came and went without a sample).
    std::erase_if(metas, [&](const json::object& meta) {
        return app.sessions.gone(meta.at("id").as_string());
    });
    for (auto& meta : metas) {
        const std::string id(meta.at("id").as_string());
        const bool live = app.sessions.is_live(id);
        meta["live"] = live;
        // A live session's counts are its model's; so are those of one that just ended,
        // until its final metadata is written (on its strand, a moment later).
        if (live || !meta.contains("samples"))
            if (auto e = live ? app.sessions.find(id) : app.sessions.known(id)) {
                meta["samples"] = e->samples.load();
                meta["chunks"] = e->chunks.load();
                // What it is so far: listed by its process and events, not its id.
                meta["duration_sec"] = static_cast<double>(e->span_ns.load()) / 1e9;
                auto l = e->named();
                if (!l.process.empty() && !meta.contains("process"))
                    meta["process"] = l.process;
                if (!l.events.empty() && !meta.contains("event_types")) {
                    json::array events;
                    for (auto& ev : l.events)
                        events.emplace_back(std::move(ev));
                    meta["event_types"] = std::move(events);
                }
            }
    }
}

// POST /api/sign-in {"token": "…"}: the browser's cookie for the right access token (the UI's
// sign-in form: the token never enters an address or the history); 401 for a wrong one.
asio::awaitable<http_response> sign_in(request_context& c) {
    const auto body = json_body(c.req);
    const auto* token = body ? body->if_contains("token") : nullptr;
    if (c.app.api_token.empty() || !token || !token->is_string() ||
        !protocol::constant_time_equal(c.app.api_token, token->as_string()))
        co_return make_error(c.req, http::status::unauthorized, "wrong_token",
                             c.app.api_token.empty()
                                 ? "this collector asks for no token (--http-auth none)"
                                 : "that is not this collector's access token (kept in " +
                                       c.app.api_token_file + ")");
    auto res = no_content(c.req);
    res.set(http::field::set_cookie, sign_in_cookie(c.app.api_token, c.app.http_tls != nullptr));
    res.set(http::field::cache_control, "no-store");
    co_return res;
}

asio::awaitable<http_response> get_status(request_context& c) {
    co_return make_json(c.req, http::status::ok, status_json(c.app));
}

asio::awaitable<http_response> get_config(request_context& c) {
    co_return make_json(c.req, http::status::ok, config_json(c.app.symbols.config(), c.app.limits));
}

asio::awaitable<http_response> put_config(request_context& c) {
    const auto body = json_body(c.req);
    if (!body)
        co_return make_error(c.req, http::status::bad_request, "bad_request",
                             "body must be a JSON object");
    auto cfg = c.app.symbols.config();
    if (auto updated = update_config(cfg, *body, c.app.limits); !updated)
        co_return make_error(c.req, updated.error());
    c.app.symbols.configure(cfg);
    rename_frames(c.app);
    co_return make_json(c.req, http::status::ok, config_json(cfg, c.app.limits));
}

asio::awaitable<http_response> list_agent_binaries(request_context& c) {
    json::array list;
    for (const auto& b : c.app.agent_binaries)
        list.push_back({{"arch", b.arch},
                        {"file", b.file},
                        {"size", b.size},
                        {"sha256", b.sha256},
                        {"download", "/api/agent-binaries/" + b.arch}});
    co_return make_json(c.req, http::status::ok, json::object{{"binaries", std::move(list)}});
}

asio::awaitable<http_response> get_agent_binary(request_context& c) {
    // Only a file found at start, by its architecture: no request names a path.
    const auto& arch = c.params[0];
    const auto& all = c.app.agent_binaries;
    const auto it =
        std::find_if(all.begin(), all.end(), [&](const agent_binary& b) { return b.arch == arch; });
    if (it == all.end())
        co_return make_error(c.req, http::status::not_found, "no_agent_binary",
                             "no agent built for " + arch);
    auto bytes = co_await asio::co_spawn(c.app.pool, read_whole_file(it->path.string()),
                                         asio::use_awaitable);
    if (!bytes)
        co_return make_error(c.req, http::status::internal_server_error, "io",
                             "cannot read " + it->file);
    http_response res{http::status::ok, c.req.version()};
    res.set(http::field::content_type, "application/octet-stream");
    res.set(http::field::content_disposition, "attachment; filename=\"" + it->file + "\"");
    res.set(http::field::cache_control, "no-store");
    res.keep_alive(c.req.keep_alive());
    res.body() = std::move(*bytes);
    res.prepare_payload();
    co_return res;
}

asio::awaitable<http_response> get_browse(request_context& c) {
    std::string path = c.url.param("path"); // (a local: GCC 12 frees a temporary in co_await twice)
    auto r = co_await asio::co_spawn(c.app.pool, list_folder(c.app.limits.browse_root, path),
                                     asio::use_awaitable);
    if (r.status != 200)
        co_return make_json(c.req, static_cast<http::status>(r.status),
                            json::object{{"error", std::move(r.body)}});
    co_return make_json(c.req, http::status::ok, r.body);
}

asio::awaitable<http_response> list_sessions(request_context& c) {
    // Newest first; ?q= keeps those whose id, host, agent, peer, process, source (an import's
    // file) or event contain it (any case), or whose pid it is,
    // ?offset= and ?limit= page them; X-Total-Count says how many matched.
    const auto page = parse_page(c.url);
    if (!page)
        co_return make_error(c.req, page.error());
    auto metas = co_await asio::co_spawn(asio::make_strand(c.app.pool),
                                         read_session_list(&c.app.store), asio::use_awaitable);
    add_live_facts(c.app, metas);
    co_return page_answer(c.req, std::move(metas), *page);
}

asio::awaitable<http_response> import_session(request_context& c) {
    // The connection streams real uploads through the same path (upload.hpp); here the body
    // has arrived whole.
    if (c.req.body().empty())
        co_return make_error(c.req, http::status::bad_request, "empty",
                             "send a perf.data file or perf script text as the body");
    auto up = upload::start(c.app, c.req.body().size(), c.req.target());
    if (!up)
        co_return busy_importing(c.req);
    (void)co_await up->feed(c.req.body()); // a failure is answered by finish()
    co_return co_await up->finish(c.req);
}

http_response no_session(request_context& c) {
    return make_error(c.req, http::status::not_found, "no_session", "no session " + c.params[0]);
}

asio::awaitable<http_response> delete_session(request_context& c) {
    auto e = c.app.sessions.find(c.params[0]);
    if (!e)
        co_return no_session(c);
    if (c.app.sessions.is_live(e->id))
        co_return make_error(c.req, http::status::conflict, "live",
                             "the session is still receiving; disconnect its agent first");
    // Disk work on the session's strand: off the I/O thread, after any view still replaying it.
    auto ec = co_await asio::co_spawn(e->strand, remove_session(&c.app.store, e->id),
                                      asio::use_awaitable);
    if (ec)
        co_return make_error(c.req, http::status::internal_server_error, "io", ec.message());
    c.app.sessions.forget(e->id);
    c.app.changed(change::sessions, e->id);
    co_return no_content(c.req);
}

asio::awaitable<http_response> get_session(request_context& c) {
    auto e = c.app.sessions.find(c.params[0]);
    if (!e)
        co_return no_session(c);
    const std::string view = c.params.size() > 1 ? c.params[1] : std::string();
    co_return co_await session_view(c.app, c.req, c.url, std::move(e), view);
}

struct route {
    http::verb method;
    std::string_view pattern; // segments; ":name" matches any one
    handler handle;
};

// A path's routes are listed together, literal patterns before those with parameters.
constexpr route route_table[] = {
    {http::verb::post, "/api/sign-in", sign_in},
    {http::verb::get, "/api/status", get_status},
    {http::verb::get, "/api/config", get_config},
    {http::verb::put, "/api/config", put_config},
    {http::verb::get, "/api/agent-binaries", list_agent_binaries},
    {http::verb::get, "/api/agent-binaries/:arch", get_agent_binary},
    {http::verb::get, "/api/browse", get_browse},
    {http::verb::get, "/api/fleet/devices", get_fleet_devices},
    {http::verb::get, "/api/fleet/functions", get_fleet_functions},
    {http::verb::get, "/api/fleet/flamegraph", get_fleet_flamegraph},
    {http::verb::get, "/api/targets", list_targets},
    {http::verb::post, "/api/targets/connect", connect_target},
    {http::verb::delete_, "/api/targets/:id", disconnect_target},
    {http::verb::post, "/api/targets/:id/command", command_target},
    {http::verb::post, "/api/targets/:id/capture", capture_target},
    {http::verb::post, "/api/targets/:id/update", update_target},
    {http::verb::get, "/api/sessions", list_sessions},
    {http::verb::post, "/api/sessions/import", import_session},
    {http::verb::get, "/api/sessions/:id", get_session},
    {http::verb::delete_, "/api/sessions/:id", delete_session},
    {http::verb::get, "/api/sessions/:id/:view", get_session},
};

// The pattern's parameters when `segments` match it.
std::optional<std::vector<std::string>> match(std::string_view pattern,
                                              const std::vector<std::string>& segments) {
    std::vector<std::string> params;
    std::size_t i = 0;
    while (!pattern.empty()) {
        pattern.remove_prefix(1); // '/'
        const auto seg = pattern.substr(0, pattern.find('/'));
        pattern.remove_prefix(seg.size());
        if (i == segments.size())
            return std::nullopt;
        if (seg.front() == ':')
            params.push_back(segments[i]);
        else if (seg != segments[i])
            return std::nullopt;
        ++i;
    }
    if (i != segments.size())
        return std::nullopt;
    return params;
}

} // namespace
} // namespace collector::routes

namespace collector {

asio::awaitable<http_response> handle_request(app_context& app, http_request req) {
    using namespace routes;
    if (auto refused = check_access(app, req))
        co_return std::move(*refused);
    const auto url = split_target(req.target());
    // The first pattern that matches names the resource ("/api/sessions/import" before
    // "/api/sessions/:id"); only its routes are candidates for the method.
    std::string_view resource;
    for (const auto& r : route_table) {
        if (!resource.empty() && r.pattern != resource)
            continue;
        auto params = match(r.pattern, url.segments);
        if (!params)
            continue;
        resource = r.pattern;
        if (r.method != req.method())
            continue;
        request_context c{app, req, url, std::move(*params)};
        co_return co_await r.handle(c);
    }
    if (!resource.empty())
        co_return make_error(req, http::status::method_not_allowed, "method_not_allowed",
                             "method not allowed here");
    co_return make_error(req, http::status::not_found, "not_found", "no such resource");
}

} // namespace collector
