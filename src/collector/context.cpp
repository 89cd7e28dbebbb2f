#include "collector/context.hpp"

#include "collector/http/events.hpp"

#include <algorithm>
#include <cstdlib>

namespace collector {

namespace {

connection_budget::caps connection_caps(const config& c) {
    auto caps = connection_budget::for_descriptors(connection_budget::raise_descriptor_limit());
    if (c.max_http_connections)
        caps.http = c.max_http_connections;
    if (c.max_agent_connections) {
        caps.agents = c.max_agent_connections;
        caps.unproven_agents = std::max<std::size_t>(1, caps.agents / 8);
    }
    return caps;
}

} // namespace

app_context::app_context(asio::io_context& io_context, config c)
    : io(io_context)
    , cfg(std::move(c))
    , store(cfg.sessions_dir)
    , sessions(store, pool, cfg.saved_cache_mb << 20, &symbols)
    , connections(connection_caps(cfg))
    , agent_binaries(find_agent_binaries(
          cfg.agents_dir.empty() ? default_agents_dir() : std::filesystem::path(cfg.agents_dir)))
    , limits{cfg.browse_root,
             find_toolchains(std::getenv("PATH") ? std::getenv("PATH") : "",
                             cfg.symbols.toolchain_prefix),
             std::getenv("DEBUGINFOD_URLS") ? std::getenv("DEBUGINFOD_URLS") : ""}
    , data_notices(std::make_unique<events::data_notices>(*this)) {}

app_context::~app_context() = default;

void app_context::changed(change what, const std::string& session_id) {
    if (what == change::data)
        data_notices->changed(session_id);
    else
        events::publish(*this, what, session_id);
}

} // namespace collector
