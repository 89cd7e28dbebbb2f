#include "collector/model/profile.hpp"

#include <limits>

namespace collector {
namespace {

std::uint64_t mix(std::uint64_t x) noexcept {
    x ^= x >> 33;
    x *= 0xFF51AFD7ED558CCDULL;
    x ^= x >> 33;
    return x;
}

} // namespace

profile::profile()
    : frame_slots_(1024, 0)
    , node_slots_(4096, 0) {
    node_parent_.push_back(0);
    node_frame_.push_back(no_frame); // the root is never looked up, so it has no slot
}

std::uint32_t profile::intern_frame(std::string_view symbol, std::string_view module) {
    const std::uint64_t h = hash_bytes(symbol, hash_bytes(module));
    std::size_t mask = frame_slots_.size() - 1;
    std::size_t i = h & mask;
    while (const std::uint32_t slot = frame_slots_[i]) {
        const std::uint32_t f = slot - 1;
        if (frame_hash_[f] == h && strings_[frame_symbol_[f]] == symbol &&
            strings_[frame_module_[f]] == module)
            return f;
        i = (i + 1) & mask;
    }
    const auto f = static_cast<std::uint32_t>(frame_symbol_.size());
    frame_symbol_.push_back(strings_.intern(symbol));
    frame_module_.push_back(strings_.intern(module));
    frame_hash_.push_back(h);
    frame_slots_[i] = f + 1;
    if (frame_symbol_.size() * 2 > frame_slots_.size())
        grow_frames();
    return f;
}

void profile::grow_frames() {
    std::vector<std::uint32_t> bigger(frame_slots_.size() * 2, 0);
    const std::size_t mask = bigger.size() - 1;
    for (std::uint32_t f = 0; f < frame_hash_.size(); ++f) {
        std::size_t i = frame_hash_[f] & mask;
        while (bigger[i])
            i = (i + 1) & mask;
        bigger[i] = f + 1;
    }
    frame_slots_.swap(bigger);
}

std::uint8_t profile::intern_event(std::string_view name) {
    for (std::size_t e = 0; e < events_.size(); ++e)
        if (strings_[events_[e]] == name)
            return static_cast<std::uint8_t>(e);
    if (events_.size() == 255)
        return 254; // a pathological capture: fold the rest into the last event
    events_.push_back(strings_.intern(name));
    self_samples_.emplace_back();
    self_period_.emplace_back();
    return static_cast<std::uint8_t>(events_.size() - 1);
}

std::uint32_t profile::child(std::uint32_t parent, std::uint32_t frame) {
    const std::uint64_t h = mix((std::uint64_t{parent} << 32) | frame);
    const std::size_t mask = node_slots_.size() - 1;
    std::size_t i = h & mask;
    while (const std::uint32_t slot = node_slots_[i]) {
        const std::uint32_t n = slot - 1;
        if (node_parent_[n] == parent && node_frame_[n] == frame)
            return n;
        i = (i + 1) & mask;
    }
    const auto n = static_cast<std::uint32_t>(node_parent_.size());
    node_parent_.push_back(parent);
    node_frame_.push_back(frame);
    node_slots_[i] = n + 1;
    if (node_parent_.size() * 2 > node_slots_.size())
        grow_nodes();
    return n;
}

void profile::grow_nodes() {
    std::vector<std::uint32_t> bigger(node_slots_.size() * 2, 0);
    const std::size_t mask = bigger.size() - 1;
    for (std::uint32_t n = 1; n < node_parent_.size(); ++n) {
        std::size_t i = mix((std::uint64_t{node_parent_[n]} << 32) | node_frame_[n]) & mask;
        while (bigger[i])
            i = (i + 1) & mask;
        bigger[i] = n + 1;
    }
    node_slots_.swap(bigger);
}

void profile::add_sample(std::uint64_t time_ns, std::uint32_t node, std::uint32_t pid,
                         std::uint32_t tid, std::string_view comm, std::uint8_t event,
                         std::uint64_t period) {
    if (time_.empty() || time_ns < first_time_)
        first_time_ = time_ns;
    if (time_ns > last_time_)
        last_time_ = time_ns;
    const std::size_t index = time_.size();
    time_.push_back(time_ns);
    node_.push_back(node);
    tid_.push_back(tid);
    event_.push_back(event);
    if (period >= std::numeric_limits<std::uint32_t>::max()) {
        period_.push_back(std::numeric_limits<std::uint32_t>::max());
        big_periods_[index] = period;
    } else {
        period_.push_back(static_cast<std::uint32_t>(period));
    }

    auto& self_n = self_samples_[event];
    auto& self_p = self_period_[event];
    if (self_n.size() <= node) {
        const std::size_t size = std::max<std::size_t>(node + 1, node_parent_.size());
        self_n.resize(size, 0);
        self_p.resize(size, 0);
    }
    ++self_n[node];
    self_p[node] += period;

    if (tid != last_tid_ || !last_thread_) {
        auto [it, fresh] = threads_.try_emplace(tid);
        if (fresh)
            it->second.pid = pid;
        last_thread_ = &it->second;
        last_tid_ = tid;
    }
    // The comm of a thread can change (exec, prctl); keep the latest.
    if (last_thread_->samples == 0 || strings_[last_thread_->comm] != comm)
        last_thread_->comm = strings_.intern(comm);
    ++last_thread_->samples;
}

std::uint64_t profile::sample_period(std::size_t i) const noexcept {
    const std::uint32_t p = period_[i];
    if (p != std::numeric_limits<std::uint32_t>::max())
        return p;
    return big_periods_.at(i);
}

std::size_t profile::sample_bytes() const noexcept {
    return time_.memory_bytes() + node_.memory_bytes() + tid_.memory_bytes() +
           event_.memory_bytes() + period_.memory_bytes() + big_periods_.size() * 32;
}

std::size_t profile::memory_bytes() const noexcept {
    std::size_t self = 0;
    for (const auto& v : self_samples_)
        self += v.capacity() * 8;
    for (const auto& v : self_period_)
        self += v.capacity() * 8;
    return sample_bytes() + strings_.memory_bytes() + self +
           (frame_symbol_.capacity() + frame_module_.capacity() + frame_slots_.capacity()) * 4 +
           frame_hash_.capacity() * 8 +
           (node_parent_.capacity() + node_frame_.capacity() + node_slots_.capacity()) * 4 +
           threads_.size() * 48;
}

} // namespace collector
