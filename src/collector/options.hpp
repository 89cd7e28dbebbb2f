// Command-line (and --config file) configuration of perfwire-collector.
#pragma once

#include "collector/fleet/clickhouse.hpp"
#include "collector/store/disk_limits.hpp"
#include "collector/symbols/symbolizer.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

namespace collector {

struct config {
    std::string agent_bind = "0.0.0.0";
    std::uint16_t agent_port = 9999;
    std::string http_bind = "127.0.0.1";
    std::uint16_t http_port = 8080;
    std::string sessions_dir; // default: ~/.local/share/perfwire/sessions
    std::optional<std::string> token;
    // Enrollment: tokens agents that dial in must present (--agent-token, --agent-tokens FILE).
    std::vector<std::pair<std::string, std::string>> agent_tokens; // token, label (may be "")
    std::string agent_auth = "auto"; // auto: enrollment unless the agent port is loopback-only
    bool http_auth = true;           // --http-auth token (default) | none
    std::optional<std::string> http_token; // --http-token; default: kept in the sessions dir
    std::optional<std::string> import_file;
    std::optional<std::string> ui_dir;
    symbol_config symbols;   // --binary, --source-dir, --path-map, --toolchain-prefix, ...
    std::string browse_root; // the file browser's root; default: HOME
    std::size_t saved_cache_mb = 2048; // saved sessions kept in memory, least recently used out
    std::size_t live_mb = 1024;        // one live session's model; past it the oldest are folded
    // Every session's model together (sessions.hpp, memory budget); 0: a quarter of RAM.
    std::size_t memory_budget_mb = 0;
    // What the sessions folder may take of its disk (store/session_store.hpp disk_limits): in
    // all (0: no bound), free space kept (UINT64_MAX: the smaller of 1 GiB and 5 %), one
    // session (0: no bound).
    disk_limits disk{0, UINT64_MAX, 0};
    // Connections held at once (connections.hpp); 0: a share of the open-file limit.
    std::size_t max_http_connections = 0;
    std::size_t max_agent_connections = 0;
    std::string agents_dir; // agent executables to hand out; default: default_agents_dir()
    // --agent-update-key FILE: the Ed25519 key updates pushed to agents are signed with (made
    // there when missing); agents started with --update-pubkey take only builds it signed.
    std::optional<std::string> update_key;
    // TLS on the agent port (--tls; --tls-cert/--tls-key: the owner's own, else a key made in
    // SESSIONS-DIR/.tls). agent_tls: "auto" (required once TLS is on and the agent port is
    // not loopback-only, else optional), "optional" (plain agents too), "required".
    bool tls = false;
    std::optional<std::string> tls_cert, tls_key;
    std::string agent_tls = "auto";
    bool http_tls = false; // --http-tls: the UI and API over HTTPS, with the same key
    // The fleet store (--clickhouse URL, -database, -user, -password): url empty when off.
    clickhouse_config clickhouse;
    std::string collector_name; // in the fleet store; default: the host name
    // Batches waiting for ClickHouse in memory (--clickhouse-buffer-mb); past it samples wait
    // in the session folders only (0: always there).
    std::size_t clickhouse_buffer_mb = 256;
    unsigned clickhouse_retention_days = 0; // 0: the samples of every day are kept
    // --continuous [HZ]: every agent profiled (the whole system) without anyone pressing start,
    // at this rate; 0: off. Its runs are cut into sessions of continuous_session_s seconds.
    unsigned continuous_hz = 0;
    unsigned continuous_session_s = 600;
};

struct exit_now {
    int code;
    std::string output;
};

// Parses argv (and the file named by --config); `env` supplies PERFWIRE_TOKEN and HOME.
std::variant<config, exit_now> parse_command_line(int argc, const char* const argv[],
                                                  const char* env_token, const char* env_home);

// What a request may set. Whoever reaches the API is not the collector's owner: the programs it
// runs are the ones the owner chose (found on PATH at start, or --toolchain-prefix), and the
// files and folders it names are under the file browser's root.
struct config_limits {
    std::string browse_root;
    std::vector<std::string> toolchains; // prefixes of addr2line + readelf; "" is the native one
    std::string debuginfod_urls = {};    // DEBUGINFOD_URLS as the collector started
};

} // namespace collector
