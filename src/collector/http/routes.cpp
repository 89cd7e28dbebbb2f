#include "collector/http/routes.hpp"

#include "collector/agents/agent_link.hpp"
#include "collector/fleet/backlog.hpp"
#include "collector/fleet/queries.hpp"
#include "collector/fleet/store.hpp"
#include "collector/http/access.hpp"
#include "collector/http/settings.hpp"
#include "collector/http/target.hpp"
#include "collector/http/upload.hpp"
#include "collector/http/views.hpp"
#include "collector/live_session.hpp"
#include "protocol/digest.hpp"
#include "protocol/pairing.hpp"
#include "protocol/tls.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/string.hpp>
#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <limits>
#include <optional>
#include <sstream>
#include <unistd.h>

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

http_response make_error(const http_request& req, const failure& f) {
    json::object e{{"code", f.code}, {"message", f.message}};
    if (!f.candidates.empty()) {
        json::array c;
        for (const auto& name : f.candidates)
            c.emplace_back(name);
        e["candidates"] = std::move(c);
    }
    return make_json(req, static_cast<http::status>(f.status),
                     json::object{{"error", std::move(e)}});
}

namespace {

http_response no_content(const http_request& req) {
    http_response res{http::status::no_content, req.version()};
    res.keep_alive(req.keep_alive());
    res.prepare_payload();
    return res;
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

// On the pool: a file handed out as it is (an agent executable).
asio::awaitable<std::optional<std::string>> read_whole_file(std::string path) {
    std::ifstream in(path, std::ios::binary);
    if (!in)
        co_return std::nullopt;
    std::ostringstream ss;
    ss << in.rdbuf();
    co_return std::move(ss).str();
}

// On the pool: an agent build and its SHA-256 (tens of MB are hashed off the I/O thread).
asio::awaitable<std::optional<std::pair<std::string, std::string>>>
read_and_hash(std::string path) {
    auto bytes = co_await read_whole_file(std::move(path));
    if (!bytes)
        co_return std::nullopt;
    auto sum = protocol::sha256_hex(*bytes);
    co_return std::make_pair(std::move(*bytes), std::move(sum));
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

struct page_params {
    std::string q; // lowercased
    std::size_t offset = 0;
    std::size_t limit = std::numeric_limits<std::size_t>::max();
};

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

// Keeps the page of `metas` (newest first by the time in `when`) that `p` asks for; returns
// how many matched.
std::size_t select_page(std::vector<json::object>& metas, const page_params& p,
                        const char* when = "started_at") {
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
    // A WebSocket handshake is sent cross-site with the page's cookies: only the collector's
    // own page may open one (cross-site WebSocket hijacking). Any request to switch protocols
    // is checked so ("Upgrade: websocket, foo" is a WebSocket handshake to the server too).
    const bool upgrade = !req[http::field::upgrade].empty();
    if (changes || upgrade) {
        const auto origin = req[http::field::origin];
        const std::string scheme = app.http_tls ? "https://" : "http://";
        if (!origin.empty() && origin != scheme + std::string(host))
            return make_error(req, http::status::forbidden, "bad_origin",
                              upgrade ? "a live stream must be opened by the collector's own page"
                                      : "requests that change state must come from the "
                                        "collector's own page");
    }
    const std::string_view target(req.target().data(), req.target().size());
    // The UI's own files, and the agent executables (public builds, checked by their sha256,
    // fetched from the device itself), need no token.
    const bool get = method == http::verb::get || method == http::verb::head;
    const bool ui_file = get && ((target.rfind("/api/", 0) != 0 && target != "/api") ||
                                 target.rfind("/api/agent-binaries", 0) == 0);
    // (Signing in presents the token in the body; a state change, so the Origin was checked.)
    const bool sign_in = method == http::verb::post && target == "/api/sign-in";
    if (!app.api_token.empty() && !ui_file && !sign_in &&
        !presents_token(req[http::field::authorization], req[http::field::cookie], app.api_token)) {
        auto res = make_json(
            req, http::status::unauthorized,
            json::object{
                {"error", json::object{{"code", "unauthorized"},
                                       {"message", "this collector asks for its access token: "
                                                   "open the sign-in link it printed (UI and "
                                                   "API on http://…/?code=…), or send "
                                                   "Authorization: Bearer with the token kept in " +
                                                       app.api_token_file},
                                       {"token_file", app.api_token_file}}}});
        res.set(http::field::www_authenticate, "Bearer realm=\"perfwire\"");
        return res;
    }
    return std::nullopt;
}

namespace {

// A request on its way to a handler: the path's :parameters in order.
struct request_context {
    app_context& app;
    const http_request& req;
    const target_url& url;
    std::vector<std::string> params;
};

using handler = asio::awaitable<http_response> (*)(request_context&);

// What the listeners hold and may hold (connections.hpp).
json::object connections_json(const connection_budget& b) {
    using k = connection_budget::kind;
    const auto& caps = b.limits();
    return {
        {"http", {{"open", b.open(k::http)}, {"max", caps.http}, {"refused", b.refused(k::http)}}},
        {"agents",
         {{"open", b.open(k::agent)},
          {"max", caps.agents},
          {"unproven", b.unproven()},
          {"max_unproven", caps.unproven_agents},
          {"refused", b.refused(k::agent)},
          {"evicted", b.evicted()}}}};
}

// What the sessions hold against the memory budget, and the process's resident memory.
json::object memory_json(const memory_use& m) {
    std::size_t rss = 0;
    if (std::FILE* f = std::fopen("/proc/self/statm", "r")) {
        unsigned long size = 0, resident = 0;
        if (std::fscanf(f, "%lu %lu", &size, &resident) == 2)
            rss = resident * static_cast<std::size_t>(::sysconf(_SC_PAGE_SIZE));
        std::fclose(f);
    }
    return {{"budget", m.budget},
            {"sessions", m.live + m.saved + m.kernel + m.symbols},
            {"live", m.live},
            {"saved", m.saved},
            {"kernel_symbols", m.kernel},
            {"symbol_tables", m.symbols},
            {"live_sessions", m.live_sessions},
            {"saved_loaded", m.saved_loaded},
            {"allowance", m.allowance},
            {"folded_samples", m.folded},
            {"rss", rss}};
}

// The fleet store's state and its backlog; null without one.
json::value fleet_status(const app_context& app) {
    if (!app.fleet)
        return nullptr;
    auto o = app.fleet->status();
    if (app.backlog)
        o["backlog"] = app.backlog->status();
    return o;
}

// What the sessions folder holds against its disk limits (0: no bound; `used` is counted only
// with a budget).
json::object disk_json(const session_store& store) {
    const auto& l = store.limits();
    return {{"used", store.disk_used()},
            {"budget", l.budget},
            {"floor", l.floor},
            {"per_session", l.per_session}};
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
    auto& app = c.app;
    const auto uptime =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - app.started).count();
    co_return make_json(
        c.req, http::status::ok,
        json::object{{"version", PERFWIRE_VERSION},
                     {"uptime_sec", uptime},
                     {"agent_listener", app.agent_listen_address},
                     {"targets", introduced_agents(app).size()},
                     {"sessions", app.store.count()},
                     {"token_file", app.api_token_file},
                     {"enrollment", !app.enrollment.empty()},
                     {"enrollment_file", app.enrollment_file},
                     // The agent link's key (agents pin it), null: plain only.
                     {"tls_pin", app.agent_tls ? json::value(app.tls_pin) : json::value(nullptr)},
                     {"agent_tls_required", app.agent_tls_required},
                     {"update_pubkey", app.update_key ? json::value(app.update_key->public_key)
                                                      : json::value(nullptr)},
                     {"connections", connections_json(app.connections)},
                     {"memory", memory_json(app.sessions.memory())},
                     {"disk", disk_json(app.store)},
                     {"fleet", fleet_status(app)}});
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

asio::awaitable<http_response> list_targets(request_context& c) {
    // As sessions are listed: ?q= (id, host, agent, peer), ?offset=, ?limit=, X-Total-Count;
    // newest connection first.
    const auto page = parse_page(c.url);
    if (!page)
        co_return make_error(c.req, page.error());
    std::vector<json::object> targets;
    for (const auto& link : introduced_agents(c.app))
        targets.push_back(link->describe());
    const auto total = select_page(targets, *page, "connected_at");
    json::array out;
    for (auto& t : targets)
        out.push_back(std::move(t));
    auto res = make_json(c.req, http::status::ok, out);
    res.set("X-Total-Count", std::to_string(total));
    co_return res;
}

asio::awaitable<http_response> connect_target(request_context& c) {
    const auto body = json_body(c.req);
    const auto* host = body ? body->if_contains("host") : nullptr;
    const auto* port = body ? body->if_contains("port") : nullptr;
    if (!host || !host->is_string() || !port || !(port->is_int64() || port->is_string()))
        co_return make_error(c.req, http::status::bad_request, "bad_request",
                             "body must be {\"host\": string, \"port\": number, "
                             "\"token\"?: string, \"pin\"?: \"sha256:…\"}");
    std::optional<std::string> token, pin;
    if (const auto* t = body->if_contains("token"); t && t->is_string())
        token = std::string(t->as_string());
    if (const auto* p = body->if_contains("pin"); p && p->is_string() && !p->as_string().empty()) {
        pin = protocol::tls::parse_pin(p->as_string());
        if (!pin)
            co_return make_error(c.req, http::status::bad_request, "bad_pin",
                                 "the agent's key is sha256: and 64 hex digits, as the agent "
                                 "printed it with its pairing code");
    }
    const std::string port_text =
        port->is_int64() ? std::to_string(port->as_int64()) : std::string(port->as_string());
    std::string host_name(host->as_string()); // (a local: GCC 12 and temporaries in co_await)
    auto dialled = co_await dial_agent(c.app, std::move(host_name), port_text, token, pin);
    if (dialled.first.empty())
        co_return make_error(c.req, http::status::bad_gateway, "connect_failed", dialled.second);
    json::object out;
    out["id"] = dialled.first;
    if (const auto it = c.app.targets.find(dialled.first); it != c.app.targets.end())
        if (auto link = it->second.lock())
            out = link->describe();
    co_return make_json(c.req, http::status::ok, out);
}

std::shared_ptr<agent_link> target_of(request_context& c) {
    const auto it = c.app.targets.find(c.params[0]);
    return it == c.app.targets.end() ? nullptr : it->second.lock();
}

http_response no_target(request_context& c) {
    return make_error(c.req, http::status::not_found, "no_target",
                      "no connected agent " + c.params[0]);
}

asio::awaitable<http_response> disconnect_target(request_context& c) {
    auto link = target_of(c);
    if (!link)
        co_return no_target(c);
    std::string stop(protocol::cmd::stop); // (locals: GCC 12 and temporaries in co_await)
    json::object no_args;
    (void)co_await link->command(std::move(stop), std::move(no_args), std::chrono::seconds(5));
    link->close();
    co_return no_content(c.req);
}

asio::awaitable<http_response> command_target(request_context& c) {
    auto link = target_of(c);
    if (!link)
        co_return no_target(c);
    const auto body = json_body(c.req);
    const auto* cmd = body ? body->if_contains("cmd") : nullptr;
    if (!cmd || !cmd->is_string() || cmd->as_string().empty())
        co_return make_error(c.req, http::status::bad_request, "bad_request",
                             "body must be {\"cmd\": string, \"args\"?: object}");
    if (cmd->as_string() == protocol::cmd::auth)
        co_return make_error(c.req, http::status::bad_request, "forbidden_command",
                             "auth is not relayed; connect with a token instead");
    if (cmd->as_string().starts_with("update"))
        co_return make_error(c.req, http::status::bad_request, "forbidden_command",
                             "updates are not relayed: POST /api/targets/:id/update sends this "
                             "collector's own build");
    json::object args;
    if (const auto* a = body->if_contains("args"); a && a->is_object())
        args = a->as_object();
    std::string name(cmd->as_string());
    // A user's run takes the place of continuous profiling, which resumes when it ends: the
    // agent ends the continuous run first (it answers once it has), and the start follows.
    // The continuous run is not drained (perf script naming what is left of a whole system's
    // samples can take tens of seconds on a busy device): its last moments are dropped, the
    // user's run starts at once. All of it answers within agent_link::takeover_deadline().
    const auto until = std::chrono::steady_clock::now() + agent_link::takeover_deadline();
    const auto left = [until](std::string_view command) {
        const auto now = std::chrono::steady_clock::now();
        return std::chrono::milliseconds(std::clamp<std::chrono::milliseconds::rep>(
            std::chrono::duration_cast<std::chrono::milliseconds>(until - now).count(), 1,
            agent_link::deadline_for(command).count()));
    };
    const auto stop_continuous = [left](std::shared_ptr<agent_link> l) -> asio::awaitable<void> {
        std::string stop(protocol::cmd::stop); // (locals: GCC 12 and temporaries in co_await)
        json::object undrained{{"drain", false}};
        const auto deadline = left(stop);
        (void)co_await l->command(std::move(stop), std::move(undrained), deadline);
    };
    const bool start = name == protocol::cmd::start;
    if (start && link->in_continuous_run()) {
        auto stopping = stop_continuous(link);
        co_await std::move(stopping);
    }
    json::object kept_args = args;
    std::string asked = name;
    const auto deadline = start ? std::optional(left(name)) : std::nullopt;
    auto r = co_await link->command(std::move(name), std::move(args), deadline);
    if (!r.ok && start && r.error == "already profiling" && link->in_continuous_run() &&
        std::chrono::steady_clock::now() < until) { // a continuous start was answered first
        auto stopping = stop_continuous(link);
        co_await std::move(stopping);
        const auto again = left(asked);
        r = co_await link->command(std::move(asked), std::move(kept_args), again);
    }
    json::object out = r.fields;
    out["ok"] = r.ok;
    if (!r.ok)
        out["error"] = r.error;
    else if (r.fields.contains("state")) // the run it is in now (or just ended), for the UI
        out["session_id"] =
            link->session_id().empty() ? json::value(nullptr) : json::value(link->session_id());
    co_return make_json(c.req, r.ok ? http::status::ok : http::status::conflict, out);
}

// Pushes this collector's agent build for the target's architecture (dist/, with its .sha256
// and .version) when it is later than the agent's. The agent checks it, replaces itself and
// restarts; an agent that dials in comes back by itself, a dialled one is dialled again.
asio::awaitable<http_response> update_target(request_context& c) {
    auto link = target_of(c);
    if (!link)
        co_return no_target(c);
    const auto* offer = link->offered_update();
    if (!offer)
        co_return make_error(c.req, http::status::conflict, "no_update",
                             "this collector has no later agent build for this target's "
                             "architecture (builds come from the agents folder, each with its "
                             ".sha256 and .version)");
    if (const auto why = link->update_blocked(); !why.empty())
        co_return make_error(c.req, http::status::conflict, "update_refused",
                             "cannot update " + link->id() + ": " + why);
    agent_binary b = *offer;
    auto build =
        co_await asio::co_spawn(c.app.pool, read_and_hash(b.path.string()), asio::use_awaitable);
    if (!build)
        co_return make_error(c.req, http::status::internal_server_error, "io",
                             "cannot read " + b.file);
    const auto now = link->describe();
    const std::string from =
        now.at("agent_version").is_string() ? std::string(now.at("agent_version").as_string()) : "";
    auto r = co_await link->push_update(b, std::move(build->first), std::move(build->second));
    json::object out;
    out["ok"] = r.ok;
    out["from"] = from;
    out["version"] = b.version;
    if (!r.ok) {
        out["error"] = r.error;
        co_return make_json(c.req, http::status::conflict, out);
    }
    out["id"] = link->id();
    if (!link->dial_host().empty()) {
        // The agent listens again once restarted: wait for this link to end, then dial.
        const std::string host = link->dial_host(), port = link->dial_port();
        const auto token = link->token();
        const auto pin = link->dial_pin();
        asio::steady_timer t(co_await asio::this_coro::executor);
        for (int i = 0; i < 100 && !link->closed() && !c.app.stops.stopping(); ++i) {
            t.expires_after(std::chrono::milliseconds(100));
            co_await t.async_wait(asio::as_tuple(asio::use_awaitable));
        }
        std::pair<std::string, std::string> again;
        for (int attempt = 0; attempt < 30 && !c.app.stops.stopping(); ++attempt) {
            again = co_await dial_agent(c.app, host, port, token, pin);
            if (!again.first.empty() || c.app.stops.stopping())
                break;
            t.expires_after(std::chrono::seconds(1));
            co_await t.async_wait(asio::as_tuple(asio::use_awaitable));
        }
        if (again.first.empty())
            out["error"] = "updated, but dialling the agent again failed: " + again.second;
        else
            out["id"] = again.first;
    }
    co_return make_json(c.req, http::status::ok, out);
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
    const auto total = select_page(metas, *page);
    json::array list;
    for (auto& m : metas)
        list.emplace_back(std::move(m));
    auto res = make_json(c.req, http::status::ok, list);
    res.set("X-Total-Count", std::to_string(total));
    co_return res;
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

// The Fleet view's questions, answered by ClickHouse (fleet/queries.hpp) on the collector's
// fleet query threads: the I/O thread and the sessions' pool never wait for it.
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

asio::awaitable<http_response> get_fleet_devices(request_context& c) {
    auto q = fleet_question_of(c);
    if (!q)
        co_return make_error(c.req, q.error());
    fleet_work work = [f = q->now](const clickhouse_client& ch) -> result<json::object> {
        auto answer = ch.ask(fleet_devices_sql(ch.config().database, f));
        if (!answer)
            return answer.error();
        return fleet_devices_json(*answer);
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
    fleet_work work = [q = std::move(*q),
                       shape](const clickhouse_client& ch) -> result<json::object> {
        constexpr std::size_t max_stacks = 200'000; // the busiest; the rest are counted
        const auto& db = ch.config().database;
        const auto answers = [&](const fleet_filter& f) -> result<fleet_answers> {
            auto stacks = ch.ask(fleet_stacks_sql(db, f, max_stacks));
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

struct route {
    http::verb method;
    std::string_view pattern; // segments; ":name" matches any one
    handler handle;
};

// A path's routes are listed together, literal patterns before those with parameters.
constexpr route routes[] = {
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

asio::awaitable<http_response> handle_request(app_context& app, http_request req) {
    if (auto refused = check_access(app, req))
        co_return std::move(*refused);
    const auto url = split_target(req.target());
    // The first pattern that matches names the resource ("/api/sessions/import" before
    // "/api/sessions/:id"); only its routes are candidates for the method.
    std::string_view resource;
    for (const auto& r : routes) {
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
