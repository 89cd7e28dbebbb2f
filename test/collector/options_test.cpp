#include "collector/options.hpp"

#include <catch2/catch.hpp>

#include <cstdio>
#include <fstream>
#include <vector>

namespace {

std::variant<collector::config, collector::exit_now> parse(std::vector<const char*> args) {
    args.insert(args.begin(), "perfwire-collector");
    return collector::parse_command_line(static_cast<int>(args.size()), args.data(), nullptr,
                                         "/home/dev");
}

} // namespace

TEST_CASE("collector flags: safe defaults", "[collector][options]") {
    const auto c = std::get<collector::config>(parse({}));
    CHECK(c.http_bind == "127.0.0.1");
    CHECK(c.http_port == 8080);
    CHECK(c.agent_bind == "0.0.0.0");
    CHECK(c.agent_port == 9999);
    CHECK(c.sessions_dir == "/home/dev/.local/share/perfwire/sessions");
    CHECK_FALSE(c.token);
}

TEST_CASE("collector flags: --config file, command line wins", "[collector][options]") {
    const std::string path = "perfwire_collector_test.conf";
    {
        std::ofstream f(path);
        f << "http-port = 9090\nagent-port = 7000\nsessions-dir = /var/lib/perfwire\n";
    }
    const auto c =
        std::get<collector::config>(parse({"--config", path.c_str(), "--http-port", "8181"}));
    CHECK(c.http_port == 8181);
    CHECK(c.agent_port == 7000);
    CHECK(c.sessions_dir == "/var/lib/perfwire");
    std::remove(path.c_str());

    auto missing = parse({"--config", "/nonexistent/perfwire.conf"});
    REQUIRE(std::holds_alternative<collector::exit_now>(missing));
    CHECK(std::get<collector::exit_now>(missing).code == 2);
    auto bad = parse({"--http-port", "70000"});
    CHECK(std::get<collector::exit_now>(bad).code == 2);
}

TEST_CASE("collector flags: --continuous takes a rate or 19, and a session length",
          "[collector][options]") {
    CHECK(std::get<collector::config>(parse({})).continuous_hz == 0);
    const auto c = std::get<collector::config>(parse({"--continuous"}));
    CHECK(c.continuous_hz == 19);
    CHECK(c.continuous_session_s == 600);
    const auto d =
        std::get<collector::config>(parse({"--continuous", "49", "--continuous-session", "30"}));
    CHECK(d.continuous_hz == 49);
    CHECK(d.continuous_session_s == 30);
    for (const auto& bad : std::vector<std::vector<const char*>>{
             {"--continuous", "0"}, {"--continuous", "5000"}, {"--continuous-session", "1"}})
        CHECK(std::get<collector::exit_now>(parse(bad)).code == 2);
}

TEST_CASE("collector flags: --clickhouse-buffer-mb, 0 to keep nothing waiting in memory",
          "[collector][options]") {
    CHECK(std::get<collector::config>(parse({"--clickhouse", "http://127.0.0.1:8123"}))
              .clickhouse_buffer_mb == 256);
    CHECK(std::get<collector::config>(
              parse({"--clickhouse", "http://127.0.0.1:8123", "--clickhouse-buffer-mb", "0"}))
              .clickhouse_buffer_mb == 0);
    CHECK(std::get<collector::exit_now>(
              parse({"--clickhouse", "http://127.0.0.1:8123", "--clickhouse-buffer-mb", "-1"}))
              .code == 2);
}

TEST_CASE("collector flags: --agent-token TOKEN:LABEL, the label checked", "[collector][options]") {
    const auto c = std::get<collector::config>(
        parse({"--agent-token", "plain-token-0123456789", "--agent-token",
               "lab-token-0123456789abc:lab-a", "--agent-token", "odd:token-0123456789:board.7"}));
    using pair = std::pair<std::string, std::string>;
    CHECK(c.agent_tokens == std::vector<pair>{{"plain-token-0123456789", ""},
                                              {"lab-token-0123456789abc", "lab-a"},
                                              {"odd:token-0123456789", "board.7"}});
    for (const char* bad : {"lab-token-0123456789abc:", "lab-token-0123456789abc:a/b",
                            "lab-token-0123456789abc:<b>", "short:lab"})
        CHECK(std::get<collector::exit_now>(parse({"--agent-token", bad})).code == 2);
}
