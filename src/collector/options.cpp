#include "collector/options.hpp"

#include "collector/fleet/clickhouse.hpp"
#include "collector/http/access.hpp"

#include <boost/program_options.hpp>

#include <algorithm>
#include <cctype>
#include <fstream>
#include <sstream>
#include <vector>

namespace collector {
namespace po = boost::program_options;

namespace {

po::options_description describe_options() {
    po::options_description d("perfwire-collector: receive profiles from perfwire agents and "
                              "serve them to the browser\n\nOptions");
    // clang-format off
    d.add_options()
        ("agent-bind", po::value<std::string>()->default_value("0.0.0.0"), "agent listener address")
        ("agent-port", po::value<int>()->default_value(9999), "agent listener port")
        ("http-bind", po::value<std::string>()->default_value("127.0.0.1"), "HTTP/UI address")
        ("http-port", po::value<int>()->default_value(8080), "HTTP/UI port")
        ("sessions-dir", po::value<std::string>(), "where sessions are kept "
                                                   "(default ~/.local/share/perfwire/sessions)")
        ("token", po::value<std::string>(), "pairing code agents must present (or env "
                                            "PERFWIRE_TOKEN)")
        ("agent-auth", po::value<std::string>()->default_value("auto"),
         "token: agents that dial in present an enrollment token before anything is stored; "
         "none: any agent may; auto: token unless --agent-bind is a loopback address")
        ("agent-token", po::value<std::vector<std::string>>()->composing(),
         "an enrollment token agents may present (repeatable, to rotate; best in a --config "
         "file), as TOKEN or TOKEN:LABEL (the fleet store names the devices it admits "
         "LABEL/hostname); default: a random one kept in SESSIONS-DIR/.agent-token")
        ("agent-tokens", po::value<std::string>(),
         "a file of enrollment tokens (TOKEN or TOKEN:LABEL), one per line")
        ("http-auth", po::value<std::string>()->default_value("token"),
         "token: every API request presents the collector's access token (the link printed at "
         "start signs a browser in); none: no token, for a trusted single-user machine")
        ("http-token", po::value<std::string>(), "the access token (16-256 characters; best in a "
                                                 "--config file); default: a random one kept in "
                                                 "SESSIONS-DIR/.http-token")
        ("import", po::value<std::string>(), "import a perf.data or perf script text file")
        ("ui-dir", po::value<std::string>(), "serve the UI from this folder instead of the "
                                             "embedded copy")
        ("binary", po::value<std::vector<std::string>>()->composing(),
         "a local copy of a profiled binary or library, matched by build-id, else by file "
         "name (repeatable)")
        ("resymbolize", po::value<std::vector<std::string>>()->composing(),
         "a device module (its path there) whose every frame is named at the collector, not "
         "only those perf could not name: for a device whose symbols are poor (repeatable)")
        ("debug-dir", po::value<std::vector<std::string>>()->composing(),
         "a folder of debug files by build-id, DIR/.build-id/ab/cdef….debug, as gdb and perf "
         "use (repeatable; default /usr/lib/debug)")
        ("source-dir", po::value<std::vector<std::string>>()->composing(),
         "where to look for source files (repeatable)")
        ("path-map", po::value<std::vector<std::string>>()->composing(),
         "FROM=TO: rewrite a source path prefix from the debug info (repeatable)")
        ("toolchain-prefix", po::value<std::string>(), "prefix of addr2line and readelf for "
                                                       "cross targets (e.g. aarch64-linux-gnu-)")
        ("sysroot", po::value<std::string>(), "prepended to the device's binary paths (like "
                                              "perf --symfs; / when the agents run on this "
                                              "machine: an agent's paths are looked up nowhere "
                                              "else)")
        ("inline", "report the line of inlined code a sample is in (the default)")
        ("no-inline", "report the line of the function a sample is in, not of the inlined "
                      "code (default: inlined code)")
        ("agents-dir", po::value<std::string>(), "agent executables to offer for download "
                                                  "(default: a dist/ beside the collector)")
        ("agent-update-key", po::value<std::string>(), "sign agent updates (Ed25519) with the "
                                                       "private key in this file, made there when "
                                                       "missing; agents take its public key with "
                                                       "--update-pubkey")
        ("tls", "encrypt the agent link (TLS 1.2 or later) with a key and self-signed "
                "certificate made in SESSIONS-DIR/.tls on the first start; agents pin its "
                "printed sha256")
        ("tls-cert", po::value<std::string>(), "the certificate (PEM) for TLS instead of the "
                                               "one made (implies --tls)")
        ("tls-key", po::value<std::string>(), "the private key (PEM) of --tls-cert")
        ("agent-tls", po::value<std::string>()->default_value("auto"),
         "required: only TLS agents; optional: plain agents too, on the same port; auto: "
         "required with --tls when --agent-bind is not a loopback address")
        ("http-tls", "serve the UI and API over HTTPS with the TLS key (implies --tls)")
        ("browse-root", po::value<std::string>(), "the file browser's root folder (default: "
                                                  "HOME)")
        ("cache-mb", po::value<int>()->default_value(2048), "memory for opened saved sessions; the "
                                                            "least recently used are unloaded")
        ("live-mb", po::value<int>()->default_value(1024), "memory for one live session's "
                                                           "profile; past it its oldest samples "
                                                           "are folded into per-interval rows")
        ("memory-budget", po::value<int>(), "memory in MB for every session's profile, live and "
                                            "saved, together (default: a quarter of RAM); past "
                                            "it saved ones are unloaded and live ones folded")
        ("disk-budget", po::value<int>(), "disk in MB the sessions folder may hold in all "
                                          "(default: no bound); past it, and past the free space "
                                          "kept, chunks stay in memory and the session says why")
        ("disk-floor-mb", po::value<int>(), "free space in MB kept on the sessions folder's disk "
                                            "(default: the smaller of 1024 and 5 % of it)")
        ("session-disk-mb", po::value<int>(), "disk in MB one session's chunks may take "
                                              "(default: no bound)")
        ("max-http-connections", po::value<int>(), "HTTP connections held at once (default: a "
                                                   "quarter of the open-file limit)")
        ("max-agent-connections", po::value<int>(), "agent connections held at once (default: "
                                                    "half the open-file limit); an eighth of "
                                                    "them may be unproven (no valid hello yet)")
        ("clickhouse", po::value<std::string>(), "also write every sample to ClickHouse at this "
                                                 "URL (its HTTP interface, http://HOST:8123): "
                                                 "the fleet store (docs/fleet.md)")
        ("clickhouse-database", po::value<std::string>()->default_value("perfwire"),
         "the fleet store's database, made when missing")
        ("clickhouse-user", po::value<std::string>()->default_value("default"),
         "the ClickHouse user")
        ("clickhouse-password", po::value<std::string>(), "the ClickHouse user's password (best "
                                                          "in a --config file)")
        ("clickhouse-buffer-mb", po::value<int>()->default_value(256),
         "memory for samples waiting for ClickHouse; past it they wait in the session folders "
         "and are written from there when their sessions end")
        ("clickhouse-retention-days", po::value<int>()->default_value(0),
         "drop the fleet store's samples of days older than this (0: keep them all)")
        ("clickhouse-query-seconds", po::value<int>()->default_value(10),
         "how long one Fleet question may run on ClickHouse before it stops it")
        ("clickhouse-query-mb", po::value<int>()->default_value(1024),
         "how much of ClickHouse's memory one Fleet question may use")
        ("collector-name", po::value<std::string>(), "this collector's name in the fleet store "
                                                     "(default: the host name)")
        ("continuous", po::value<int>()->implicit_value(19),
         "profile every connected agent (its whole system) all the time at HZ samples a second "
         "(default 19), without anyone pressing start; a run a user starts takes its place "
         "until it ends")
        ("continuous-session", po::value<int>()->default_value(600),
         "seconds of continuous profiling one session holds before the next one opens")
        ("config", po::value<std::string>(), "read options from this file (key = value)")
        ("version", "print the version and exit")
        ("help", "print this help and exit");
    // clang-format on
    return d;
}

// 0: any free port (the collector logs the one it got).
bool valid_port(int p) {
    return p >= 0 && p < 65536;
}

// An enrollment token's label: a device name's prefix in the fleet store.
bool valid_label(std::string_view label) {
    return !label.empty() && label.size() <= 64 &&
           std::all_of(label.begin(), label.end(), [](char c) {
               return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '.' ||
                      c == '_' || c == '~';
           });
}

} // namespace

std::variant<config, exit_now> parse_command_line(int argc, const char* const argv[],
                                                  const char* env_token, const char* env_home) {
    const auto desc = describe_options();
    auto usage = [&](const std::string& why) {
        std::ostringstream out;
        out << "perfwire-collector: " << why << "\n\n" << desc << "\n";
        return exit_now{2, out.str()};
    };

    po::variables_map vm;
    try {
        po::store(po::parse_command_line(argc, argv, desc), vm);
        if (vm.count("config")) {
            const auto path = vm["config"].as<std::string>();
            std::ifstream file(path);
            if (!file)
                return usage("cannot read --config " + path);
            // Command-line values stored first take precedence over the file's.
            po::store(po::parse_config_file(file, desc), vm);
        }
        po::notify(vm);
    } catch (const po::error& e) {
        return usage(e.what());
    }
    if (vm.count("help")) {
        std::ostringstream out;
        out << desc << "\n";
        return exit_now{0, out.str()};
    }
    if (vm.count("version"))
        return exit_now{0, "perfwire-collector " PERFWIRE_VERSION "\n"};

    config c;
    c.agent_bind = vm["agent-bind"].as<std::string>();
    c.http_bind = vm["http-bind"].as<std::string>();
    const int agent_port = vm["agent-port"].as<int>();
    const int http_port = vm["http-port"].as<int>();
    if (!valid_port(agent_port) || !valid_port(http_port))
        return usage("ports must be 0-65535 (0: any free port)");
    c.agent_port = static_cast<std::uint16_t>(agent_port);
    c.http_port = static_cast<std::uint16_t>(http_port);
    if (vm.count("sessions-dir"))
        c.sessions_dir = vm["sessions-dir"].as<std::string>();
    else
        c.sessions_dir =
            std::string(env_home && *env_home ? env_home : ".") + "/.local/share/perfwire/sessions";
    if (vm.count("token"))
        c.token = vm["token"].as<std::string>();
    else if (env_token && *env_token)
        c.token = env_token;
    c.agent_auth = vm["agent-auth"].as<std::string>();
    if (c.agent_auth != "auto" && c.agent_auth != "token" && c.agent_auth != "none")
        return usage("--agent-auth takes auto, token or none, not " + c.agent_auth);
    // TOKEN or TOKEN:LABEL (split at the last ':'): the label names, in the fleet store, the
    // devices that token admits.
    std::vector<std::string> tokens;
    if (vm.count("agent-token"))
        tokens = vm["agent-token"].as<std::vector<std::string>>();
    if (vm.count("agent-tokens")) {
        const auto path = vm["agent-tokens"].as<std::string>();
        std::ifstream file(path);
        if (!file)
            return usage("cannot read --agent-tokens " + path);
        for (std::string line; std::getline(file, line);) {
            const auto from = line.find_first_not_of(" \t\r");
            if (from == std::string::npos || line[from] == '#')
                continue;
            tokens.push_back(line.substr(from, line.find_last_not_of(" \t\r") + 1 - from));
        }
    }
    for (const auto& t : tokens) {
        const auto colon = t.rfind(':');
        std::string token = t.substr(0, colon),
                    label = colon == std::string::npos ? "" : t.substr(colon + 1);
        if (!valid_token(token))
            return usage("an enrollment token must be 16 to 256 letters, digits or -._~ "
                         "characters (then :LABEL if it has one)");
        if (colon != std::string::npos && !valid_label(label))
            return usage("an enrollment token's label (after ':') must be 1 to 64 letters, "
                         "digits or -._~ characters, not \"" +
                         label + "\"");
        c.agent_tokens.emplace_back(std::move(token), std::move(label));
    }
    const auto auth = vm["http-auth"].as<std::string>();
    if (auth != "token" && auth != "none")
        return usage("--http-auth takes token or none, not " + auth);
    c.http_auth = auth == "token";
    if (vm.count("http-token")) {
        c.http_token = vm["http-token"].as<std::string>();
        if (!valid_token(*c.http_token))
            return usage("--http-token must be 16 to 256 letters, digits or -._~ characters");
    }
    if (vm.count("import"))
        c.import_file = vm["import"].as<std::string>();
    if (vm.count("ui-dir"))
        c.ui_dir = vm["ui-dir"].as<std::string>();
    auto list = [&](const char* name) {
        return vm.count(name) ? vm[name].as<std::vector<std::string>>()
                              : std::vector<std::string>{};
    };
    c.symbols.binaries = list("binary");
    c.symbols.source_dirs = list("source-dir");
    c.symbols.resymbolize = list("resymbolize");
    if (vm.count("debug-dir"))
        c.symbols.debug_dirs = list("debug-dir");
    for (const auto& m : list("path-map")) {
        const auto eq = m.find('=');
        if (eq == std::string::npos || eq == 0)
            return usage("--path-map takes FROM=TO, not " + m);
        c.symbols.path_map.emplace_back(m.substr(0, eq), m.substr(eq + 1));
    }
    if (vm.count("toolchain-prefix"))
        c.symbols.toolchain_prefix = vm["toolchain-prefix"].as<std::string>();
    if (vm.count("sysroot"))
        c.symbols.sysroot = vm["sysroot"].as<std::string>();
    c.symbols.peer_data_dirs = {c.sessions_dir};
    c.symbols.inline_frames = !vm.count("no-inline");
    if (vm["cache-mb"].as<int>() < 1)
        return usage("--cache-mb must be at least 1");
    c.saved_cache_mb = static_cast<std::size_t>(vm["cache-mb"].as<int>());
    if (vm["live-mb"].as<int>() < 1)
        return usage("--live-mb must be at least 1");
    c.live_mb = static_cast<std::size_t>(vm["live-mb"].as<int>());
    if (vm.count("memory-budget")) {
        if (vm["memory-budget"].as<int>() < 16)
            return usage("--memory-budget must be at least 16 (MB)");
        c.memory_budget_mb = static_cast<std::size_t>(vm["memory-budget"].as<int>());
    }
    for (const auto& [name, field] :
         {std::pair{"disk-budget", &c.disk.budget}, std::pair{"disk-floor-mb", &c.disk.floor},
          std::pair{"session-disk-mb", &c.disk.per_session}})
        if (vm.count(name)) {
            if (vm[name].as<int>() < 0)
                return usage(std::string("--") + name + " takes a number of MB (0: none)");
            *field = static_cast<std::uint64_t>(vm[name].as<int>()) << 20;
        }
    for (const auto& [name, field] : {std::pair{"max-http-connections", &c.max_http_connections},
                                      std::pair{"max-agent-connections", &c.max_agent_connections}})
        if (vm.count(name)) {
            if (vm[name].as<int>() < 1)
                return usage(std::string("--") + name + " must be at least 1");
            *field = static_cast<std::size_t>(vm[name].as<int>());
        }
    if (vm.count("agents-dir"))
        c.agents_dir = vm["agents-dir"].as<std::string>();
    if (vm.count("agent-update-key"))
        c.update_key = vm["agent-update-key"].as<std::string>();
    c.http_tls = vm.count("http-tls") > 0;
    c.tls = vm.count("tls") > 0 || c.http_tls || vm.count("tls-cert") || vm.count("tls-key");
    if (vm.count("tls-cert") != vm.count("tls-key"))
        return usage("--tls-cert and --tls-key go together");
    if (vm.count("tls-cert")) {
        c.tls_cert = vm["tls-cert"].as<std::string>();
        c.tls_key = vm["tls-key"].as<std::string>();
    }
    c.agent_tls = vm["agent-tls"].as<std::string>();
    if (c.agent_tls != "auto" && c.agent_tls != "optional" && c.agent_tls != "required")
        return usage("--agent-tls takes auto, optional or required, not " + c.agent_tls);
    if (c.agent_tls == "required" && !c.tls)
        return usage("--agent-tls required needs TLS: add --tls (or --tls-cert and --tls-key)");
    if (vm.count("clickhouse")) {
        c.clickhouse.url = vm["clickhouse"].as<std::string>();
        c.clickhouse.database = vm["clickhouse-database"].as<std::string>();
        c.clickhouse.user = vm["clickhouse-user"].as<std::string>();
        if (vm.count("clickhouse-password"))
            c.clickhouse.password = vm["clickhouse-password"].as<std::string>();
        if (auto checked = clickhouse_client::make(c.clickhouse); !checked)
            return usage(checked.error().message);
        const int buffer = vm["clickhouse-buffer-mb"].as<int>();
        if (buffer < 0 || buffer > 65536)
            return usage("--clickhouse-buffer-mb takes 0 to 65536");
        c.clickhouse_buffer_mb = static_cast<std::size_t>(buffer);
        const int days = vm["clickhouse-retention-days"].as<int>();
        if (days < 0 || days > 36500)
            return usage("--clickhouse-retention-days takes 0 (keep all) to 36500");
        c.clickhouse_retention_days = static_cast<unsigned>(days);
        const int seconds = vm["clickhouse-query-seconds"].as<int>();
        if (seconds < 1 || seconds > 3600)
            return usage("--clickhouse-query-seconds takes 1 to 3600");
        c.clickhouse.query_seconds = static_cast<unsigned>(seconds);
        // (The collector waits for ClickHouse's own answer that the question ran too long.)
        c.clickhouse.timeout = std::max<std::chrono::milliseconds>(
            c.clickhouse.timeout, std::chrono::seconds(seconds + 20));
        const int mb = vm["clickhouse-query-mb"].as<int>();
        if (mb < 16 || mb > 1048576)
            return usage("--clickhouse-query-mb takes 16 to 1048576");
        c.clickhouse.query_bytes = static_cast<std::uint64_t>(mb) << 20;
    }
    if (vm.count("collector-name"))
        c.collector_name = vm["collector-name"].as<std::string>();
    if (vm.count("continuous")) {
        const int hz = vm["continuous"].as<int>();
        if (hz < 1 || hz > 1000)
            return usage("--continuous takes 1 to 1000 samples a second, not " +
                         std::to_string(hz));
        c.continuous_hz = static_cast<unsigned>(hz);
    }
    const int session_s = vm["continuous-session"].as<int>();
    if (session_s < 2 || session_s > 86400)
        return usage("--continuous-session takes 2 to 86400 seconds, not " +
                     std::to_string(session_s));
    c.continuous_session_s = static_cast<unsigned>(session_s);
    c.browse_root = vm.count("browse-root") ? vm["browse-root"].as<std::string>()
                                            : std::string(env_home && *env_home ? env_home : "/");
    return c;
}

} // namespace collector
