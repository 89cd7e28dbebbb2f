#include "collector/http/status.hpp"

#include "collector/agents/registry.hpp"
#include "collector/fleet/backlog.hpp"
#include "collector/fleet/store.hpp"
#include "protocol/tls.hpp"

#include <cstdio>
#include <unistd.h>

namespace collector {
namespace json = boost::json;

namespace {

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

} // namespace

json::object status_json(const app_context& app) {
    const auto uptime =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - app.started).count();
    return json::object{
        {"version", PERFWIRE_VERSION},
        {"uptime_sec", uptime},
        {"agent_listener", app.agent_listen_address},
        {"targets", app.agents.introduced().size()},
        {"sessions", app.store.count()},
        {"token_file", app.api_token_file},
        {"enrollment", !app.enrollment.empty()},
        {"enrollment_file", app.enrollment_file},
        // The agent link's key (agents pin it), null: plain only.
        {"tls_pin", app.agent_tls ? json::value(app.tls_pin) : json::value(nullptr)},
        {"agent_tls_required", app.agent_tls_required},
        {"update_pubkey",
         app.update_key ? json::value(app.update_key->public_key) : json::value(nullptr)},
        {"connections", connections_json(app.connections)},
        {"memory", memory_json(app.sessions.memory())},
        {"disk", disk_json(app.store)},
        {"fleet", fleet_status(app)}};
}

} // namespace collector
