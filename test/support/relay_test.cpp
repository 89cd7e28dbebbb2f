// The flaky link the resume tests put between an agent and a collector: frames pass both ways
// until a reset ends every connection, refused connections end at once, then it relays again.
#include "support/framing_peer.hpp"
#include "support/relay.hpp"

#include <catch2/catch.hpp>

#include <memory>

using namespace std::chrono_literals;
using test_support::framing_peer;
using test_support::listener;
using test_support::relay;

TEST_CASE("the test relay passes frames both ways, resets every connection, and refuses for a "
          "while",
          "[relay]") {
    listener server;
    relay link(server.port());
    auto agent = framing_peer::connect(link.port());
    REQUIRE(agent);
    const int fd = server.accept(5s);
    REQUIRE(fd >= 0);
    framing_peer collector(fd);
    agent->send(protocol::frame_flag::text, "up");
    auto f = collector.next(5s);
    REQUIRE(f);
    CHECK(f->payload == "up");
    collector.send(protocol::frame_flag::command, "down");
    f = agent->next(5s);
    REQUIRE(f);
    CHECK(f->payload == "down");
    CHECK(link.relayed() == 1);
    CHECK(link.bytes_up() == protocol::header_size + 2);
    CHECK(link.bytes_down() == protocol::header_size + 4);

    // The link breaks: both sides see their connection end.
    link.reset();
    CHECK_FALSE(agent->next(5s));
    CHECK(agent->closed());
    CHECK_FALSE(collector.next(5s));
    CHECK(collector.closed());

    // Refused for a while: a new connection ends at once, the collector sees none.
    link.refuse_for(1500ms);
    auto turned_away = framing_peer::connect(link.port());
    REQUIRE(turned_away);
    CHECK_FALSE(turned_away->next(5s));
    CHECK(turned_away->closed());
    CHECK(server.accept(200ms) < 0);
    CHECK(link.refused() == 1);

    // Then it relays again.
    std::unique_ptr<framing_peer> again;
    const auto until = std::chrono::steady_clock::now() + 10s;
    int back = -1;
    while (back < 0 && std::chrono::steady_clock::now() < until) {
        auto attempt = framing_peer::connect(link.port());
        REQUIRE(attempt);
        again = std::make_unique<framing_peer>(std::move(*attempt));
        back = server.accept(500ms);
    }
    REQUIRE(back >= 0);
    framing_peer collector_again(back);
    again->send(protocol::frame_flag::text, "back");
    f = collector_again.next(5s);
    REQUIRE(f);
    CHECK(f->payload == "back");
    CHECK(link.relayed() == 2);
}
