// Command-line configuration of perfwire-agent.
#pragma once

#include "agent/triggers.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

namespace agent {

enum class mode { server, listen, output };

struct config {
    mode run_mode = mode::server;
    std::string server_host; // --server HOST[:PORT]
    std::uint16_t server_port = 9999;
    std::string bind_address = "0.0.0.0"; // --listen
    std::uint16_t listen_port = 9999;
    std::string output_path; // --output FILE|-
    int rounds = 1;
    std::optional<int> pid;
    int frequency = 99;
    int duration_sec = 8;
    // A run outlives its link this long (--offline-max), its chunks kept meanwhile in this much
    // memory (--buffer-mb; 0 with a spool: all but the chunk being sent on disk).
    int offline_max_sec = 6 * 3600;
    int buffer_mb = 16;
    // Past it, on disk (--spool-dir; "": none), up to --spool-mb.
    std::string spool_dir;
    int spool_mb = 64;
    // What the perf probe found is kept here for the next start with the same perf, kernel and
    // perf_event_paranoid (--state-dir; "": not kept). Default: /var/lib/perfwire-agent for
    // root, else $XDG_STATE_HOME (~/.local/state)/perfwire-agent.
    std::string state_dir;
    std::vector<std::string> events;
    bool off_cpu = false;   // --off-cpu: where threads wait too (the off-cpu event)
    int off_cpu_min_us = 0; // --off-cpu-min-us: shorter waits not sent
    // A flight recorder (--flight-recorder SECONDS; 0: none): profiles on, keeps the last
    // seconds on the device and sends them, then --after seconds more, when a trigger fires
    // (the --trigger-* flags, SIGUSR1, the collector's capture).
    int flight_recorder_sec = 0;
    int after_sec = 10;
    int flight_memory_mb = 16;
    trigger_settings triggers;
    // --max-overhead PCT: what profiling costs (perf and the agent) kept within PCT % of one
    // core by lowering the sampling rate (and giving up DWARF stacks); 0: no budget.
    double max_overhead_pct = 0;
    std::optional<std::string> token;  // --token or PERFWIRE_TOKEN
    std::optional<std::string> enroll; // --enroll or PERFWIRE_ENROLL_TOKEN (--server only)
    std::string perf_path = "perf";
    std::string device_name;     // --name: this device's name at the collector; "": the host name
    bool allow_kallsyms = false; // --allow-kallsyms: answer `kallsyms` (kernel addresses)
    // Updates over the link: refused with --no-update; with --update-pubkey only builds
    // signed (Ed25519) by the collector's --agent-update-key are taken; without it, only over
    // a TLS link to a collector whose key this agent pinned (--tls-pin).
    bool allow_update = true;
    std::optional<std::string> update_pubkey; // "ed25519:<base64>"
    // TLS. --server: --tls-pin sha256:… (the collector's certificate must be that one) or
    // --tls-ca FILE (it must chain to that CA and name the host). --listen: --tls, with this
    // device's key and certificate in --tls-key FILE (made there on the first start).
    std::optional<std::string> tls_pin, tls_ca;
    bool listen_tls = false;
    std::string tls_key_file = "/var/lib/perfwire-agent/tls.pem";
    // --launcher PROGRAM: new builds run through it (an emulator, a loader), for their
    // --version check and the restart.
    std::string launcher;
    // The command line as given, to start the same way after an update.
    std::vector<std::string> argv;
    std::string self_path; // this executable, resolved at start-up (main)
};

// What main() should do after parsing.
struct exit_now {
    int code;           // 0 for --help/--version, 2 for a usage error
    std::string output; // text for stdout (code 0) or stderr (code 2)
};

// Parses argv; `env_token` and `env_enroll` are the values of PERFWIRE_TOKEN and
// PERFWIRE_ENROLL_TOKEN, if set.
std::variant<config, exit_now> parse_command_line(int argc, const char* const argv[],
                                                  const char* env_token,
                                                  const char* env_enroll = nullptr);

} // namespace agent
