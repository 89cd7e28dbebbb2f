#include "collector/context.hpp"

#include "collector/http/events.hpp"

#include <cstdlib>

namespace collector {

app_context::app_context(asio::io_context& io_context, config c)
    : io(io_context)
    , cfg(std::move(c))
    , store(cfg.sessions_dir)
    , sessions(store, pool, cfg.saved_cache_mb << 20, &symbols)
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
