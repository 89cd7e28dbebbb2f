// Attacks on an agent before it is paired, as a hostile client on the device's network would
// make them; each runs against both agent flavours.
#include "support/agents.hpp"
#include "support/framing_peer.hpp"
#include "support/spawn.hpp"

#include <catch2/catch.hpp>

#include <thread>

using namespace std::chrono_literals;
using protocol::frame_flag;
using test_support::each_agent;
using test_support::error_of;
using test_support::framing_peer;
using test_support::ok;
using test_support::read_hello;
using test_support::start_agent;

TEST_CASE("agent --listen before pairing: one connection at a time, few answers, failures back "
          "off across connections, weak codes refused",
          "[agent][integration][attack]") {
    const auto flavour = each_agent();
    INFO(flavour);
    auto weak = start_agent(flavour, {"--listen", "--port", "0", "--token", "1234"});
    CHECK(weak->wait(10s) == 2);
    CHECK_THAT(weak->stderr_text(), Catch::Contains("too easy to guess"));

    const std::string code = "correct-horse-battery-staple";
    auto agent =
        start_agent(flavour, {"--listen", "--bind", "127.0.0.1", "--port", "0", "--token", code});
    const auto port_text = agent->wait_for_stderr("listening on 127.0.0.1:", 5s);
    REQUIRE(port_text);
    const auto port = static_cast<std::uint16_t>(std::stoi(*port_text));

    // A client that sends commands without the code and never reads: a few answers, then the
    // connection is closed, before the answers could pile up.
    auto flood = framing_peer::connect(port);
    REQUIRE(flood);
    read_hello(*flood);
    // While it is connected, a second connection waits: no hello yet.
    auto waiting = framing_peer::connect(port);
    REQUIRE(waiting);
    CHECK_FALSE(waiting->next(1500ms));
    CHECK_FALSE(waiting->closed());
    std::string burst;
    for (int i = 0; i < 1000; ++i)
        burst += protocol::encode_frame(frame_flag::command,
                                        R"({"id":")" + std::to_string(i) + R"(","cmd":"status"})");
    flood->send_raw(burst);
    int answers = 0;
    while (auto f = flood->next(3s))
        answers += f->flag == frame_flag::response;
    CHECK(flood->closed());
    CHECK(answers <= 3);
    // Its turn came: the waiting connection gets its hello now.
    CHECK(read_hello(*waiting).auth == "token");

    // Three wrong codes close that connection; on a new connection the attempts go on where
    // they left off (each failure doubles the wait for the next), and the log counts them all.
    CHECK(error_of(waiting->command("auth", R"({"token":"wrong-code-number-one"})")) ==
          "auth failed");
    CHECK(error_of(waiting->command("auth", R"({"token":"wrong-code-number-two"})")) ==
          "auth failed");
    CHECK(error_of(waiting->command("auth", R"({"token":"wrong-code-number-three"})")) ==
          "auth failed");
    CHECK_FALSE(waiting->next(3s));
    CHECK(waiting->closed());
    auto next = framing_peer::connect(port);
    REQUIRE(next);
    read_hello(*next);
    CHECK(error_of(next->command("auth", R"({"token":"wrong-code-number-four"})")) ==
          "auth failed");
    // The fourth failure in a row set the next turn 0.8 s away.
    const auto asked = std::chrono::steady_clock::now();
    CHECK(error_of(next->command("auth", R"({"token":"wrong-code-number-five"})")) ==
          "auth failed");
    CHECK(std::chrono::steady_clock::now() - asked >= 600ms);
    CHECK_THAT(agent->stderr_text(), Catch::Contains("5 in a row"));
    CHECK(ok(next->command("auth", R"({"token":")" + code + R"("})", 15s)));

    // Commands are checked strictly once paired.
    CHECK(error_of(next->command("verify_pid", R"({"pid":"1; rm -rf /"})")) ==
          "pid must be an integer from 1 to 4194304");
    CHECK(error_of(next->command("verify_pid", R"({"pid":1099511627776})")) ==
          "pid must be an integer from 1 to 4194304");
    CHECK(error_of(next->command("verify_pid", R"({"pid":12.5})")) ==
          "pid must be an integer from 1 to 4194304");
    CHECK(error_of(next->command("configure", R"({"frequency":"99"})")) ==
          "frequency must be an integer from 1 to 100000");
    CHECK(error_of(next->command("configure_metrics", R"({"interval":-1})")) ==
          "interval must be an integer from 1 to 60000");
    CHECK(error_of(next->command("start", R"({"pid":"1"})")) ==
          "pid must be an integer from 1 to 4194304");
    CHECK(error_of(next->command("start", R"({"pid":1,"events":"cpu-clock"})")) ==
          "events must be an array of event names");
    CHECK_THAT(error_of(next->command("start", R"({"pid":1,"events":["no-such-event"]})", 20s)),
               Catch::StartsWith("unknown event: no-such-event (this device samples "));
    CHECK(next->command("status")->fields.at("state").as_string() == "idle");
}
