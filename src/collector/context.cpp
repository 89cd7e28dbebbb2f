#include "collector/context.hpp"

#include "collector/fleet/backlog.hpp"
#include "collector/fleet/store.hpp"
#include "collector/http/events.hpp"
#include "collector/http/settings.hpp"

#include <algorithm>
#include <cstdlib>
#include <unistd.h>

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

// --memory-budget, else a quarter of the machine's memory (at least 256 MB).
std::size_t memory_budget(const config& c) {
    if (c.memory_budget_mb)
        return c.memory_budget_mb << 20;
    const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGE_SIZE);
    const std::size_t ram = pages > 0 && page > 0
                                ? static_cast<std::size_t>(pages) * static_cast<std::size_t>(page)
                                : std::size_t{4} << 30;
    return std::max(ram / 4, std::size_t{256} << 20);
}

} // namespace

app_context::app_context(asio::io_context& io_context, config c)
    : io(io_context)
    , cfg(std::move(c))
    , store(cfg.sessions_dir)
    , sessions(store, pool, cfg.saved_cache_mb << 20, &symbols)
    , connections(connection_caps(cfg))
    , agent_binaries([&] {
        if (!cfg.agents_dir.empty())
            return find_agent_binaries(cfg.agents_dir);
        auto found = find_agent_binaries(default_agents_dir());
        return found.empty() ? build_tree_agents() : found;
    }())
    , limits{cfg.browse_root,
             find_toolchains(std::getenv("PATH") ? std::getenv("PATH") : "",
                             cfg.symbols.toolchain_prefix),
             std::getenv("DEBUGINFOD_URLS") ? std::getenv("DEBUGINFOD_URLS") : ""}
    , browsers(std::make_unique<events::feed>(*this)) {
    sessions.set_memory_budget(memory_budget(cfg), cfg.live_mb << 20);
    store.set_disk_limits(cfg.disk);
    collector_name = cfg.collector_name;
    if (collector_name.empty()) {
        char host[256] = {};
        ::gethostname(host, sizeof host - 1);
        collector_name = host;
    }
    if (!cfg.clickhouse.url.empty())
        if (auto client = clickhouse_client::make(cfg.clickhouse)) {
            fleet = std::make_unique<fleet_store>(
                std::move(*client), cfg.clickhouse_buffer_mb << 20, cfg.clickhouse_retention_days);
            backlog = std::make_unique<fleet_backlog>(store, *fleet, &symbols, collector_name,
                                                      cfg.live_mb << 20);
            fleet_queries = std::make_unique<asio::thread_pool>(2);
        }
}

app_context::~app_context() = default;

} // namespace collector
