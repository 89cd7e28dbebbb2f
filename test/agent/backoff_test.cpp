#include "agent/backoff.hpp"

#include <catch2/catch.hpp>

using namespace std::chrono_literals;

TEST_CASE("backoff doubles from 1 s to a 30 s cap, with at most 20 % jitter", "[agent][backoff]") {
    agent::backoff b(1s, 30s, 42);
    const long bases[] = {1000, 2000, 4000, 8000, 16000, 30000, 30000, 30000};
    for (long base : bases) {
        const auto d = b.next().count();
        CHECK(d <= base);
        CHECK(d >= base * 8 / 10);
    }
    CHECK(b.attempts() == 8);
    b.reset();
    CHECK(b.next().count() <= 1000);
}

TEST_CASE("backoff jitter differs between agents", "[agent][backoff]") {
    agent::backoff a(1s, 30s, 1), b(1s, 30s, 2);
    bool differ = false;
    for (int i = 0; i < 5; ++i)
        differ |= a.next() != b.next();
    CHECK(differ);
}
