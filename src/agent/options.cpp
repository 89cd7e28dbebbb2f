#include "agent/options.hpp"

#include "agent/flight.hpp"
#include "agent/probe_cache.hpp"

#include "agent/version.hpp"
#include "protocol/pairing.hpp"
#include "protocol/tls.hpp"

#include <boost/program_options.hpp>

#include <algorithm>
#include <charconv>
#include <fstream>
#include <sstream>

namespace agent {
namespace po = boost::program_options;

namespace {

std::optional<std::uint16_t> parse_port(std::string_view text, bool allow_any = false) {
    unsigned value = 0;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (ec != std::errc() || end != text.data() + text.size() || (value == 0 && !allow_any) ||
        value > 65535)
        return std::nullopt;
    return static_cast<std::uint16_t>(value);
}

po::options_description describe_options() {
    po::options_description d("perfwire-agent: profile a process with perf and stream it to a "
                              "perfwire collector\n\nModes (exactly one)");
    // clang-format off
    d.add_options()
        ("server", po::value<std::string>(), "dial the collector at HOST[:PORT] (port 9999)")
        ("listen", "wait for the collector to connect (pairing code required)")
        ("output", po::value<std::string>(), "profile --pid headless, write text to FILE or -")
        ("bind", po::value<std::string>()->default_value("0.0.0.0"), "--listen address")
        ("port", po::value<int>()->default_value(9999), "--listen port (0: any free port)")
        ("rounds", po::value<int>()->default_value(1), "--output: rounds to collect")
        ("pid", po::value<int>(), "process to profile (default: whole system)")
        ("frequency", po::value<int>()->default_value(99), "sampling frequency, Hz")
        ("duration", po::value<int>()->default_value(8), "seconds per chunk or round")
        ("events", po::value<std::string>(), "comma-separated perf events")
        ("off-cpu", po::bool_switch(), "also record where the target's threads wait off the CPU "
                                       "(the off-cpu event: scheduler switches, in ns)")
        ("off-cpu-min-us", po::value<int>()->default_value(0),
         "--off-cpu: waits shorter than this many microseconds are not sent")
        ("flight-recorder", po::value<int>()->default_value(0),
         "profile on but send nothing: keep the last this many seconds (1-3600) and send them when "
         "a trigger fires (a --trigger-* below, SIGUSR1, the collector's capture), then --after more")
        ("after", po::value<int>()->default_value(10),
         "--flight-recorder: seconds sent after a trigger (0-3600); one firing meanwhile extends it")
        ("flight-memory-mb", po::value<int>()->default_value(16),
         "--flight-recorder: the most memory its window holds (1-1024)")
        ("trigger-cpu", po::value<std::string>(),
         "--flight-recorder: fire when the --pid process uses PCT % of a core for SECONDS "
         "(PCT[:SECONDS], 1 s by default)")
        ("trigger-memory", po::value<std::string>(),
         "--flight-recorder: fire when the device's memory in use is PCT % for SECONDS")
        ("trigger-load", po::value<std::string>(),
         "--flight-recorder: fire when the 1-minute load average is LOAD for SECONDS "
         "(LOAD[:SECONDS])")
        ("trigger-log", po::value<std::string>(),
         "--flight-recorder: fire when a line added to the log FILE matches REGEX (FILE:REGEX, "
         "grep -E syntax; a rotated log is followed)")
        ("trigger-process", po::value<std::string>(),
         "--flight-recorder: fire when a process of this name (as ps shows it) starts or exits")
        ("trigger-file", po::value<std::string>(),
         "--flight-recorder: fire when this file appears or is touched (for scripts)")
        ("max-overhead", po::value<double>(),
         "keep what profiling costs (perf and this agent) within PCT % of one core: the sampling "
         "rate goes down (DWARF stacks give way to frame pointers first), each change said")
        ("offline-max", po::value<int>()->default_value(6 * 3600),
         "seconds a run goes on without a link to the collector (its chunks kept for it)")
        ("buffer-mb", po::value<int>()->default_value(16),
         "memory for the chunks the collector has not stored yet (the oldest go first past it)")
        ("spool-dir", po::value<std::string>(),
         "keep the chunks past --buffer-mb in this directory (fsynced; read back after a restart)")
        ("spool-mb", po::value<int>()->default_value(64),
         "the most --spool-dir holds (the oldest go first past it; a tenth of its disk stays free)")
        ("state-dir", po::value<std::string>(),
         "keep what the perf probe found here for the next start (\"\": nowhere; default "
         "/var/lib/perfwire-agent for root, else ~/.local/state/perfwire-agent)")
        ("name", po::value<std::string>(), "this device's name at the collector (default: the "
                                           "host name)")
        ("token", po::value<std::string>(), "pairing code (or env PERFWIRE_TOKEN)")
        ("enroll", po::value<std::string>(), "--server: the collector's enrollment token (or env "
                                             "PERFWIRE_ENROLL_TOKEN)")
        ("perf", po::value<std::string>()->default_value("perf"), "perf executable")
        ("allow-kallsyms", "send this device's kernel symbols (/proc/kallsyms) when the "
                           "collector asks, to name kernel frames perf could not")
        ("tls-pin", po::value<std::string>(), "--server: encrypt the link (TLS) and take only "
                                              "the collector whose key is this sha256:… (it "
                                              "prints it at start; the UI's commands carry it)")
        ("tls-ca", po::value<std::string>(), "--server: encrypt the link and take a collector "
                                             "whose certificate chains to this CA file (PEM) "
                                             "and names the host dialled")
        ("tls", "--listen: encrypt the link with this device's key; its sha256 is printed with "
                "the pairing code, for the collector to pin")
        ("tls-key", po::value<std::string>(), "--listen --tls: where this device's key and "
                                              "certificate are kept (made on the first start; "
                                              "default /var/lib/perfwire-agent/tls.pem)")
        ("update-pubkey", po::value<std::string>(), "take updates over the link only when "
                                                    "signed by this key: ed25519:… as the "
                                                    "collector prints it, or a file holding it")
        ("update-key", po::value<std::string>(), "the same as --update-pubkey (older name)")
        ("no-update", "refuse updates over the link")
        ("launcher", po::value<std::string>(), "run new agent builds through this program (an "
                                               "emulator or loader) to check and restart them")
        ("version", "print the version and exit")
        ("help", "print this help and exit");
    // clang-format on
    return d;
}

std::vector<std::string> split_events(const std::string& list) {
    std::vector<std::string> out;
    std::string item;
    std::istringstream in(list);
    while (std::getline(in, item, ','))
        if (!item.empty())
            out.push_back(item);
    return out;
}

} // namespace

std::variant<config, exit_now> parse_command_line(int argc, const char* const argv[],
                                                  const char* env_token, const char* env_enroll) {
    const auto desc = describe_options();
    auto usage = [&](const std::string& why) {
        std::ostringstream out;
        out << "perfwire-agent: " << why << "\n\n" << desc << "\n";
        return exit_now{2, out.str()};
    };

    po::variables_map vm;
    try {
        po::store(po::parse_command_line(argc, argv, desc), vm);
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
        return exit_now{0, "perfwire-agent " + std::string(version()) + "\n"};

    config c;
    const int modes = int(vm.count("server")) + int(vm.count("listen")) + int(vm.count("output"));
    if (modes != 1)
        return usage("choose exactly one of --server, --listen, --output");

    if (vm.count("server")) {
        c.run_mode = mode::server;
        const auto target = vm["server"].as<std::string>();
        const auto colon = target.rfind(':');
        c.server_host = target.substr(0, colon);
        if (colon != std::string::npos) {
            const auto port = parse_port(std::string_view(target).substr(colon + 1));
            if (!port)
                return usage("bad port in --server " + target);
            c.server_port = *port;
        }
        if (c.server_host.empty())
            return usage("--server needs a host");
    } else if (vm.count("listen")) {
        c.run_mode = mode::listen;
    } else {
        c.run_mode = mode::output;
        c.output_path = vm["output"].as<std::string>();
    }

    c.bind_address = vm["bind"].as<std::string>();
    const auto port = parse_port(std::to_string(vm["port"].as<int>()), true);
    if (!port)
        return usage("--port must be 0-65535 (0: any free port)");
    c.listen_port = *port;
    c.rounds = vm["rounds"].as<int>();
    c.frequency = vm["frequency"].as<int>();
    c.off_cpu = vm["off-cpu"].as<bool>();
    c.duration_sec = vm["duration"].as<int>();
    c.offline_max_sec = vm["offline-max"].as<int>();
    c.buffer_mb = vm["buffer-mb"].as<int>();
    if (vm.count("spool-dir"))
        c.spool_dir = vm["spool-dir"].as<std::string>();
    c.spool_mb = vm["spool-mb"].as<int>();
    c.state_dir = vm.count("state-dir") ? vm["state-dir"].as<std::string>() : default_state_dir();
    if (vm.count("pid"))
        c.pid = vm["pid"].as<int>();
    if (const auto us = vm["off-cpu-min-us"].as<int>(); us < 0 || us > 60'000'000)
        return usage("--off-cpu-min-us must be 0-60000000 (a minute)");
    else
        c.off_cpu_min_us = us;
    if (c.off_cpu && !c.pid)
        return usage("--off-cpu needs --pid: the whole system's scheduler switches are too many");
    c.flight_recorder_sec = vm["flight-recorder"].as<int>();
    c.after_sec = vm["after"].as<int>();
    c.flight_memory_mb = vm["flight-memory-mb"].as<int>();
    if (c.flight_recorder_sec < 0 || c.flight_recorder_sec > 3600)
        return usage("--flight-recorder must be 1-3600 seconds (0: none)");
    if (c.after_sec < 0 || c.after_sec > 3600)
        return usage("--after must be 0-3600 seconds");
    if (c.flight_memory_mb < 1 || c.flight_memory_mb > 1024)
        return usage("--flight-memory-mb must be 1-1024");
    if (vm.count("max-overhead")) {
        c.max_overhead_pct = vm["max-overhead"].as<double>();
        if (!(c.max_overhead_pct >= 0.1 && c.max_overhead_pct <= 100))
            return usage("--max-overhead must be 0.1-100 (% of one core)");
        if (c.run_mode == mode::output)
            return usage("--max-overhead adapts a run a collector sees (--server or --listen)");
    }
    bool any_trigger = false;
    for (auto [flag, field] : {std::pair{"trigger-cpu", &c.triggers.cpu},
                               {"trigger-memory", &c.triggers.memory},
                               {"trigger-load", &c.triggers.load},
                               {"trigger-log", &c.triggers.log},
                               {"trigger-process", &c.triggers.process},
                               {"trigger-file", &c.triggers.file}})
        if (vm.count(flag)) {
            *field = vm[flag].as<std::string>();
            any_trigger = true;
        }
    if (const auto why = check_triggers(c.triggers, c.pid.has_value()); !why.empty())
        return usage(why);
    if (!c.flight_recorder_sec &&
        (any_trigger || !vm["after"].defaulted() || !vm["flight-memory-mb"].defaulted()))
        return usage("the --trigger-* flags, --after and --flight-memory-mb go with "
                     "--flight-recorder");
    if (c.flight_recorder_sec && c.flight_memory_mb > c.buffer_mb && c.spool_dir.empty())
        return usage("--flight-memory-mb (" + std::to_string(c.flight_memory_mb) +
                     ") past --buffer-mb (" + std::to_string(c.buffer_mb) +
                     "): a capture's window would not fit where the link sends it from");
    if (c.flight_recorder_sec && c.run_mode == mode::output)
        return usage("--flight-recorder sends its captures to a collector (--server or --listen)");
    if (vm.count("events"))
        c.events = split_events(vm["events"].as<std::string>());
    if (vm.count("token"))
        c.token = vm["token"].as<std::string>();
    else if (env_token && *env_token)
        c.token = env_token;
    if (c.token && protocol::code_strength_bits(*c.token) < protocol::min_code_bits)
        return usage("the pairing code is too easy to guess (about " +
                     std::to_string(static_cast<int>(protocol::code_strength_bits(*c.token))) +
                     " bits): use at least 10 random letters and digits, or leave --token out "
                     "and the agent makes one");
    if (vm.count("enroll") && !vm["enroll"].as<std::string>().empty())
        c.enroll = vm["enroll"].as<std::string>();
    else if (!vm.count("enroll") && env_enroll && *env_enroll)
        c.enroll = env_enroll;
    c.perf_path = vm["perf"].as<std::string>();
    if (vm.count("name")) {
        c.device_name = vm["name"].as<std::string>();
        if (c.device_name.empty() || c.device_name.size() > 200 ||
            std::any_of(c.device_name.begin(), c.device_name.end(),
                        [](unsigned char ch) { return ch < 0x20 || ch == 0x7f; }))
            return usage("--name takes 1 to 200 bytes, no control characters");
    }
    c.allow_kallsyms = vm.count("allow-kallsyms") != 0;
    c.allow_update = vm.count("no-update") == 0;
    for (const char* name : {"update-pubkey", "update-key"}) {
        if (!vm.count(name) || c.update_pubkey)
            continue;
        std::string text = vm[name].as<std::string>();
        if (!text.starts_with("ed25519:")) {
            std::ifstream in(text, std::ios::binary);
            if (!in)
                return usage("cannot read --" + std::string(name) + " " + text);
            text.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
        }
        if (protocol::tls::weak_public_key(text))
            return usage("--" + std::string(name) +
                         " is a weak key (a point of small order): any signature would verify "
                         "under it. Give the collector's update key as it prints it");
        c.update_pubkey = protocol::tls::parse_public_key(text);
        if (!c.update_pubkey)
            return usage("--" + std::string(name) +
                         " takes the collector's update key as it prints it (ed25519: and 44 "
                         "characters of base64), or a file holding it");
    }
    if (vm.count("tls-pin")) {
        c.tls_pin = protocol::tls::parse_pin(vm["tls-pin"].as<std::string>());
        if (!c.tls_pin)
            return usage("--tls-pin takes sha256: and 64 hex digits, as the collector prints "
                         "it");
    }
    if (vm.count("tls-ca"))
        c.tls_ca = vm["tls-ca"].as<std::string>();
    if ((c.tls_pin || c.tls_ca) && !vm.count("server"))
        return usage("--tls-pin and --tls-ca are for --server (a --listen agent uses --tls)");
    if (c.tls_pin && c.tls_ca)
        return usage("give --tls-pin or --tls-ca, not both");
    c.listen_tls = vm.count("tls") > 0;
    if (c.listen_tls && !vm.count("listen"))
        return usage("--tls is for --listen (a --server agent uses --tls-pin or --tls-ca)");
    if (vm.count("tls-key"))
        c.tls_key_file = vm["tls-key"].as<std::string>();
    if (vm.count("launcher"))
        c.launcher = vm["launcher"].as<std::string>();
    c.argv.assign(argv, argv + argc);

    if (c.frequency < 1 || c.frequency > 100000)
        return usage("--frequency must be 1-100000");
    if (c.duration_sec < 1 || c.duration_sec > 3600)
        return usage("--duration must be 1-3600 seconds");
    if (c.offline_max_sec < 0 || c.offline_max_sec > 30 * 86400)
        return usage("--offline-max must be 0-2592000 seconds (0: a lost link ends the run)");
    if (c.buffer_mb < (c.spool_dir.empty() ? 1 : 0) || c.buffer_mb > 4096)
        return usage("--buffer-mb must be 1-4096 (0 with --spool-dir: every chunk goes to disk)");
    if (c.spool_mb < 1 || c.spool_mb > 1 << 20)
        return usage("--spool-mb must be 1-1048576");
    if (c.rounds < 1)
        return usage("--rounds must be at least 1");
    if (c.pid && *c.pid <= 0)
        return usage("--pid must be positive");
    if (c.run_mode == mode::output && !c.pid)
        return usage("--output needs --pid");
    return c;
}

} // namespace agent
