// The targets: the agents connected now (docs/api.md, "Targets"). Each handler parses the
// request, calls agents/, and answers.
#include "collector/agents/agent_link.hpp"
#include "collector/agents/agent_update.hpp"
#include "collector/agents/continuous.hpp"
#include "collector/agents/dial.hpp"
#include "collector/agents/registry.hpp"
#include "collector/agents/target_view.hpp"
#include "collector/http/handlers.hpp"
#include "protocol/tls.hpp"

namespace collector::routes {
namespace json = boost::json;

namespace {

std::shared_ptr<agent_link> target_of(request_context& c) {
    return c.app.agents.find(c.params[0]);
}

http_response no_target(request_context& c) {
    return make_error(c.req, http::status::not_found, "no_target",
                      "no connected agent " + c.params[0]);
}

// An agent's answer to a relayed command: its fields and "ok" (200), or "error" (409); with
// the session the target is in now when it says its state, for the UI.
http_response command_answer(request_context& c, const agent_link& link,
                             const protocol::command_response& r) {
    json::object out = r.fields;
    out["ok"] = r.ok;
    if (!r.ok)
        out["error"] = r.error;
    else if (r.fields.contains("state")) // the run it is in now (or just ended)
        out["session_id"] =
            link.session_id().empty() ? json::value(nullptr) : json::value(link.session_id());
    return make_json(c.req, r.ok ? http::status::ok : http::status::conflict, out);
}

} // namespace

asio::awaitable<http_response> list_targets(request_context& c) {
    // As sessions are listed: ?q= (id, host, agent, peer), ?offset=, ?limit=, X-Total-Count;
    // newest connection first.
    const auto page = parse_page(c.url);
    if (!page)
        co_return make_error(c.req, page.error());
    std::vector<json::object> targets;
    for (const auto& link : c.app.agents.introduced())
        targets.push_back(agents::target_json(*link, c.app));
    co_return page_answer(c.req, std::move(targets), *page, "connected_at");
}

asio::awaitable<http_response> connect_target(request_context& c) {
    const auto body = json_body(c.req);
    const auto* host = body ? body->if_contains("host") : nullptr;
    const auto* port = body ? body->if_contains("port") : nullptr;
    if (!host || !host->is_string() || !port || !(port->is_int64() || port->is_string()))
        co_return make_error(c.req, http::status::bad_request, "bad_request",
                             "body must be {\"host\": string, \"port\": number, "
                             "\"token\"?: string, \"pin\"?: \"sha256:…\"}");
    agents::dial_request to;
    to.host = host->as_string();
    to.port = port->is_int64() ? std::to_string(port->as_int64()) : std::string(port->as_string());
    if (const auto* t = body->if_contains("token"); t && t->is_string())
        to.token = std::string(t->as_string());
    if (const auto* p = body->if_contains("pin"); p && p->is_string() && !p->as_string().empty()) {
        to.pin = protocol::tls::parse_pin(p->as_string());
        if (!to.pin)
            co_return make_error(c.req, http::status::bad_request, "bad_pin",
                                 "the agent's key is sha256: and 64 hex digits, as the agent "
                                 "printed it with its pairing code");
    }
    auto dialled = co_await agents::dial(c.app, std::move(to));
    if (!dialled)
        co_return make_error(c.req, dialled.error());
    json::object out{{"id", *dialled}};
    if (const auto link = c.app.agents.find(*dialled))
        out = agents::target_json(*link, c.app);
    co_return make_json(c.req, http::status::ok, out);
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
    // What asks for a run (a CI job): kept in its session's metadata, listed and searched.
    // Every start says it anew (none: nothing asked), a stop forgets it, and a start that did
    // not answer yes puts back the one it replaced (a run already starting keeps its own):
    // never does one run's origin name another's session.
    json::object origin;
    if (const auto* o = body->if_contains("origin")) {
        auto checked = agents::origin_of(*o);
        if (!checked || name != protocol::cmd::start)
            co_return make_error(c.req, http::status::bad_request, "bad_origin",
                                 !checked ? checked.error().message
                                          : std::string("origin goes with a start"));
        origin = std::move(*checked);
    }
    const bool start = name == protocol::cmd::start, stop = name == protocol::cmd::stop;
    json::object replaced;
    if (start)
        replaced = link->note_origin(std::move(origin));
    auto answer = co_await agents::run_command(link, std::move(name), std::move(args));
    if (start && !answer.ok)
        link->note_origin(std::move(replaced));
    if (stop)
        link->note_origin({});
    co_return command_answer(c, *link, std::move(answer));
}

asio::awaitable<http_response> capture_target(request_context& c) {
    // A flight recorder's "capture now": what it holds goes out as a session of its own.
    auto link = target_of(c);
    if (!link)
        co_return no_target(c);
    co_return command_answer(
        c, *link, co_await agents::run_command(link, std::string(protocol::cmd::capture), {}));
}

asio::awaitable<http_response> update_target(request_context& c) {
    auto link = target_of(c);
    if (!link)
        co_return no_target(c);
    const auto r = co_await agents::update_agent(c.app, link);
    if (!r)
        co_return make_error(c.req, r.error());
    const bool ok = r->at("ok").as_bool();
    co_return make_json(c.req, ok ? http::status::ok : http::status::conflict, *r);
}

} // namespace collector::routes
