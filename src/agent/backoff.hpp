// Reconnect delays for --server mode: 1, 2, 4 ... capped at 30 s, each shortened by up to 20 %
// at random so a fleet of agents cut off together does not reconnect in lockstep.
#pragma once

#include <chrono>
#include <cstdint>
#include <random>

namespace agent {

class backoff {
public:
    using duration = std::chrono::milliseconds;

    explicit backoff(duration initial = std::chrono::seconds(1),
                     duration cap = std::chrono::seconds(30),
                     std::uint64_t seed = std::random_device{}());

    // The delay before the next attempt; each call doubles the base up to the cap.
    duration next();
    // After a session that authenticated: start again from the initial delay.
    void reset() noexcept { attempt_ = 0; }
    int attempts() const noexcept { return attempt_; }

private:
    duration initial_;
    duration cap_;
    int attempt_ = 0;
    std::mt19937_64 rng_;
};

} // namespace agent
