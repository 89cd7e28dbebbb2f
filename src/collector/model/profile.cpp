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

std::uint64_t pair_hash(std::uint32_t a, std::uint32_t b) noexcept {
    return mix((std::uint64_t{a} << 32) | b);
}

// One more sample of `period` at row `i` of a pair of per-row counters, grown to `rows` (the
// table's size now, so they grow with it rather than one row at a time).
void count(std::vector<std::uint64_t>& samples, std::vector<std::uint64_t>& periods,
           std::uint32_t i, std::size_t rows, std::uint64_t period) {
    if (samples.size() <= i) {
        const std::size_t size = std::max<std::size_t>(i + 1, rows);
        samples.resize(size, 0);
        periods.resize(size, 0);
    }
    ++samples[i];
    periods[i] += period;
}

} // namespace

profile::profile() {
    node_parent_.push_back(0);
    node_frame_.push_back(no_frame); // the root is never looked up, so it is not indexed
}

std::uint32_t profile::intern_frame(std::string_view symbol, std::string_view module) {
    const std::uint64_t h = hash_bytes(symbol, hash_bytes(module));
    const auto found = frame_index_.find(h, [&](std::uint32_t f) {
        return frame_hash_[f] == h && strings_[frame_symbol_[f]] == symbol &&
               strings_[frame_module_[f]] == module;
    });
    if (found.id != dense_index::none)
        return found.id;
    const auto f = static_cast<std::uint32_t>(frame_symbol_.size());
    frame_symbol_.push_back(strings_.intern(symbol));
    frame_module_.push_back(strings_.intern(module));
    frame_hash_.push_back(h);
    frame_index_.insert(found.slot, f, [this](std::uint32_t i) { return frame_hash_[i]; });
    return f;
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
    site_samples_.emplace_back();
    site_period_.emplace_back();
    return static_cast<std::uint8_t>(events_.size() - 1);
}

std::uint32_t profile::child(std::uint32_t parent, std::uint32_t frame) {
    const auto found = node_index_.find(pair_hash(parent, frame), [&](std::uint32_t n) {
        return node_parent_[n] == parent && node_frame_[n] == frame;
    });
    if (found.id != dense_index::none)
        return found.id;
    const auto n = static_cast<std::uint32_t>(node_parent_.size());
    node_parent_.push_back(parent);
    node_frame_.push_back(frame);
    node_index_.insert(found.slot, n, [this](std::uint32_t i) {
        return pair_hash(node_parent_[i], node_frame_[i]);
    });
    return n;
}

std::uint32_t profile::intern_site(std::uint32_t node, std::uint32_t offset) {
    if (last_site_ != no_frame && site_node_[last_site_] == node &&
        site_offset_[last_site_] == offset)
        return last_site_;
    const auto found = site_index_.find(pair_hash(node, offset), [&](std::uint32_t s) {
        return site_node_[s] == node && site_offset_[s] == offset;
    });
    if (found.id != dense_index::none)
        return last_site_ = found.id;
    const auto s = static_cast<std::uint32_t>(site_node_.size());
    site_node_.push_back(node);
    site_offset_.push_back(offset);
    site_index_.insert(found.slot, s, [this](std::uint32_t i) {
        return pair_hash(site_node_[i], site_offset_[i]);
    });
    return last_site_ = s;
}

void profile::add_sample(std::uint64_t time_ns, std::uint32_t node, std::uint32_t pid,
                         std::uint32_t tid, std::string_view comm, std::uint8_t event,
                         std::uint64_t period, std::uint32_t leaf_offset) {
    if (time_.empty() || time_ns < first_time_)
        first_time_ = time_ns;
    if (time_ns > last_time_)
        last_time_ = time_ns;
    const std::size_t index = time_.size();
    const std::uint32_t site = intern_site(node, leaf_offset);
    time_.push_back(time_ns);
    site_.push_back(site);
    tid_.push_back(tid);
    event_.push_back(event);
    if (period >= std::numeric_limits<std::uint32_t>::max()) {
        period_.push_back(std::numeric_limits<std::uint32_t>::max());
        big_periods_[index] = period;
    } else {
        period_.push_back(static_cast<std::uint32_t>(period));
    }

    count(self_samples_[event], self_period_[event], node, node_parent_.size(), period);
    count(site_samples_[event], site_period_[event], site, site_node_.size(), period);

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
    return time_.memory_bytes() + site_.memory_bytes() + tid_.memory_bytes() +
           event_.memory_bytes() + period_.memory_bytes() + big_periods_.size() * 32;
}

std::size_t profile::memory_bytes() const noexcept {
    std::size_t self = 0;
    for (const auto& v : self_samples_)
        self += v.capacity() * 8;
    for (const auto& v : self_period_)
        self += v.capacity() * 8;
    for (const auto& v : site_samples_)
        self += v.capacity() * 16; // and as much for site_period_

    return sample_bytes() + strings_.memory_bytes() + self +
           (frame_symbol_.capacity() + frame_module_.capacity()) * 4 + frame_index_.memory_bytes() +
           frame_hash_.capacity() * 8 + (node_parent_.capacity() + node_frame_.capacity()) * 4 +
           node_index_.memory_bytes() + (site_node_.capacity() + site_offset_.capacity()) * 4 +
           site_index_.memory_bytes() + threads_.size() * 48;
}

} // namespace collector
