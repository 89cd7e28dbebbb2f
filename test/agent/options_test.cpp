#include "agent/options.hpp"

#include <catch2/catch.hpp>

#include <string>
#include <vector>

namespace {

std::variant<agent::config, agent::exit_now> parse(std::vector<const char*> args,
                                                   const char* env_token = nullptr) {
    args.insert(args.begin(), "perfwire-agent");
    return agent::parse_command_line(static_cast<int>(args.size()), args.data(), env_token);
}

int exit_code(const std::variant<agent::config, agent::exit_now>& r) {
    return std::holds_alternative<agent::exit_now>(r) ? std::get<agent::exit_now>(r).code : -1;
}

} // namespace

TEST_CASE("agent flags: modes and defaults", "[agent][options]") {
    auto r = parse({"--server", "collector.lan:7000", "--pid", "42"});
    REQUIRE(std::holds_alternative<agent::config>(r));
    const auto& c = std::get<agent::config>(r);
    CHECK(c.run_mode == agent::mode::server);
    CHECK(c.server_host == "collector.lan");
    CHECK(c.server_port == 7000);
    CHECK(c.frequency == 99);
    CHECK(c.duration_sec == 8);
    CHECK(c.pid == 42);

    auto l = std::get<agent::config>(
        parse({"--listen", "--events", "cpu-clock,,page-faults"}, "cafe-babe-dead-beef-f00d"));
    CHECK(l.run_mode == agent::mode::listen);
    CHECK(l.listen_port == 9999);
    CHECK(l.events == std::vector<std::string>{"cpu-clock", "page-faults"});
    CHECK(l.token == "cafe-babe-dead-beef-f00d");
    // A code a guesser finds quickly is refused, with advice.
    CHECK(exit_code(parse({"--listen"}, "cafe")) == 2);
    CHECK(exit_code(parse({"--listen", "--token", "12345678"})) == 2);

    CHECK(std::get<agent::config>(parse({"--server", "h"})).server_port == 9999);

    // The enrollment token: the flag, else PERFWIRE_ENROLL_TOKEN.
    std::vector<const char*> args{"perfwire-agent", "--server", "h"};
    auto env = agent::parse_command_line(3, args.data(), nullptr, "from-env-0123456789");
    CHECK(std::get<agent::config>(env).enroll == "from-env-0123456789");
    args.insert(args.end(), {"--enroll", "from-flag-0123456789"});
    auto flag = agent::parse_command_line(5, args.data(), nullptr, "from-env-0123456789");
    CHECK(std::get<agent::config>(flag).enroll == "from-flag-0123456789");
    CHECK_FALSE(std::get<agent::config>(parse({"--server", "h"})).enroll);
}

TEST_CASE("agent flags: errors exit 2, help and version exit 0", "[agent][options]") {
    CHECK(exit_code(parse({})) == 2);
    CHECK(exit_code(parse({"--listen", "--server", "h"})) == 2);
    CHECK(exit_code(parse({"--output", "-"})) == 2); // needs --pid
    CHECK(exit_code(parse({"--server", "h:0"})) == 2);
    CHECK(exit_code(parse({"--server", "h:99999"})) == 2);
    CHECK(exit_code(parse({"--listen", "--frequency", "0"})) == 2);
    CHECK(exit_code(parse({"--listen", "--bogus"})) == 2);
    CHECK(exit_code(parse({"--help"})) == 0);
    auto v = parse({"--version"});
    REQUIRE(exit_code(v) == 0);
    CHECK(std::get<agent::exit_now>(v).output == "perfwire-agent " PERFWIRE_VERSION "\n");
}

TEST_CASE("agent flags: TLS and update keys are checked as given, never loosened",
          "[agent][options]") {
    const std::string pin = "SHA256:" + std::string(64, 'A');
    auto c = std::get<agent::config>(parse({"--server", "h", "--tls-pin", pin.c_str()}));
    CHECK(c.tls_pin == "sha256:" + std::string(64, 'a')); // normalised
    // With colons between bytes, as openssl prints a fingerprint.
    std::string colons = "sha256:";
    for (int i = 0; i < 32; ++i)
        colons += std::string(i ? ":" : "") + "0f";
    std::string expected = "sha256:";
    for (int i = 0; i < 32; ++i)
        expected += "0f";
    CHECK(std::get<agent::config>(parse({"--server", "h", "--tls-pin", colons.c_str()})).tls_pin ==
          expected);
    // A short or foreign pin, a pin in listen mode, --tls with --server, pin and CA together.
    CHECK(exit_code(parse({"--server", "h", "--tls-pin", "sha256:abcd"})) == 2);
    CHECK(exit_code(parse({"--server", "h", "--tls-pin", "md5:00"})) == 2);
    CHECK(exit_code(parse({"--listen", "--tls-pin", pin.c_str()}, "cafe-babe-dead-beef-f00d")) ==
          2);
    CHECK(exit_code(parse({"--server", "h", "--tls"})) == 2);
    CHECK(exit_code(parse({"--server", "h", "--tls-pin", pin.c_str(), "--tls-ca", "x"})) == 2);
    auto l = std::get<agent::config>(
        parse({"--listen", "--tls", "--tls-key", "/k.pem"}, "cafe-babe-dead-beef-f00d"));
    CHECK(l.listen_tls);
    CHECK(l.tls_key_file == "/k.pem");
    // An update key is an Ed25519 public key; an HMAC secret of old is refused, not taken,
    // and so is a weak key (all zeros: a point of order 4).
    const std::string pub = "ed25519:WGZmZmZmZmZmZmZmZmZmZmZmZmZmZmZmZmZmZmZmZmY="; // the base
    const std::string weak = "ed25519:" + std::string(43, 'A') + "=";
    CHECK(exit_code(parse({"--server", "h", "--update-pubkey", weak.c_str()})) == 2);
    CHECK(std::get<agent::config>(parse({"--server", "h", "--update-pubkey", pub.c_str()}))
              .update_pubkey == pub);
    CHECK(exit_code(parse({"--server", "h", "--update-pubkey", "ed25519:AAAA"})) == 2);
    CHECK(exit_code(parse({"--server", "h", "--update-key", "/nonexistent/key"})) == 2);
}

TEST_CASE("agent flags: --name names the device, within the hello's bounds", "[agent][options]") {
    CHECK(std::get<agent::config>(parse({"--server", "h"})).device_name.empty());
    CHECK(std::get<agent::config>(parse({"--server", "h", "--name", "board-7"})).device_name ==
          "board-7");
    const std::string long_name(201, 'x');
    CHECK(exit_code(parse({"--server", "h", "--name", long_name.c_str()})) == 2);
    CHECK(exit_code(parse({"--server", "h", "--name", "a\tb"})) == 2);
    CHECK(exit_code(parse({"--server", "h", "--name", ""})) == 2);
}

TEST_CASE("agent flags: a flight recorder's window, triggers and limits, refused with the reason",
          "[agent][options][flight]") {
    const auto c = std::get<agent::config>(
        parse({"--server", "h", "--pid", "7", "--flight-recorder", "20", "--after", "5",
               "--trigger-cpu", "80:2", "--flight-memory-mb", "8", "--trigger-load", "4",
               "--trigger-process", "watchdog", "--trigger-file", "/tmp/capture-now"}));
    CHECK(c.flight_recorder_sec == 20);
    CHECK(c.after_sec == 5);
    CHECK(c.triggers.cpu == "80:2");
    CHECK(c.triggers.load == "4");
    CHECK(c.triggers.process == "watchdog");
    CHECK(c.triggers.file == "/tmp/capture-now");
    CHECK(c.triggers.log.empty());
    CHECK(c.flight_memory_mb == 8);
    const auto said = [](std::vector<const char*> args) {
        const auto r = parse(std::move(args));
        REQUIRE(std::holds_alternative<agent::exit_now>(r));
        CHECK(std::get<agent::exit_now>(r).code == 2);
        return std::get<agent::exit_now>(r).output;
    };
    CHECK_THAT(said({"--server", "h", "--pid", "7", "--flight-recorder", "4000"}),
               Catch::Contains("--flight-recorder must be 1-3600 seconds"));
    CHECK_THAT(
        said({"--server", "h", "--pid", "7", "--flight-recorder", "20", "--trigger-cpu", "lots"}),
        Catch::Contains("--trigger-cpu: the level must be a number"));
    CHECK_THAT(said({"--server", "h", "--flight-recorder", "20", "--trigger-cpu", "50"}),
               Catch::Contains("--trigger-cpu needs --pid"));
    CHECK_THAT(said({"--server", "h", "--pid", "7", "--trigger-cpu", "50"}),
               Catch::Contains("go with --flight-recorder"));
    CHECK_THAT(said({"--server", "h", "--flight-recorder", "20", "--trigger-log", "/tmp/x.log:(a"}),
               Catch::Contains("--trigger-log: "));
    CHECK_THAT(said({"--server", "h", "--trigger-memory", "90"}),
               Catch::Contains("go with --flight-recorder"));
    CHECK_THAT(said({"--output", "-", "--pid", "7", "--flight-recorder", "20"}),
               Catch::Contains("sends its captures to a collector"));
}
