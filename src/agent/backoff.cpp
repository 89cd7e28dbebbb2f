#include "agent/backoff.hpp"

#include <algorithm>

namespace agent {

backoff::backoff(duration initial, duration cap, std::uint64_t seed)
    : initial_(initial)
    , cap_(cap)
    , rng_(seed) {}

backoff::duration backoff::next() {
    duration base = initial_;
    for (int i = 0; i < attempt_ && base < cap_; ++i)
        base *= 2;
    base = std::min(base, cap_);
    ++attempt_;
    std::uniform_real_distribution<double> jitter(0.8, 1.0);
    return duration(static_cast<duration::rep>(static_cast<double>(base.count()) * jitter(rng_)));
}

} // namespace agent
