#include "collector/model/profile.hpp"

#include <algorithm>
#include <limits>
#include <tuple>
#include <utility>

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

std::uint64_t site_hash(std::uint32_t parent, std::uint32_t frame, std::uint32_t offset) noexcept {
    return mix(pair_hash(parent, frame) ^ (std::uint64_t{offset} * 0x9E3779B97F4A7C15ULL));
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
    site_key_.push_back({0, no_frame, no_offset}); // nor is the root site
    site_node_.push_back(root);
}

std::uint32_t profile::intern_frame(std::string_view symbol, std::string_view module) {
    const std::uint64_t h = hash_bytes(symbol, hash_bytes(module));
    const auto found = frame_index_.find(h, [&](std::uint32_t f) {
        return frame_hash_[f] == h && strings_[frame_symbol_[f]] == symbol &&
               strings_[frame_module_[f]] == module;
    });
    if (found.id != dense_index::none)
        return found.id;
    if (shape_full())
        return site_frame(past_room_site());
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
    return static_cast<std::uint8_t>(events_.size() - 1);
}

std::uint32_t profile::child(std::uint32_t parent, std::uint32_t frame) {
    const auto found = node_index_.find(pair_hash(parent, frame), [&](std::uint32_t n) {
        return node_parent_[n] == parent && node_frame_[n] == frame;
    });
    if (found.id != dense_index::none)
        return found.id;
    if (shape_full())
        return site_node_[past_room_site()];
    const auto n = static_cast<std::uint32_t>(node_parent_.size());
    node_parent_.push_back(parent);
    node_frame_.push_back(frame);
    node_index_.insert(found.slot, n, [this](std::uint32_t i) {
        return pair_hash(node_parent_[i], node_frame_[i]);
    });
    return n;
}

std::uint32_t profile::child_site(std::uint32_t parent_site, std::uint32_t frame,
                                  std::uint32_t offset) {
    const auto found =
        site_index_.find(site_hash(parent_site, frame, offset), [&](std::uint32_t s) {
            const auto& k = site_key_[s];
            return k.parent == parent_site && k.offset == offset && k.frame == frame;
        });
    if (found.id != dense_index::none)
        return found.id;
    if (shape_full())
        return past_room_site();
    const auto node = child(site_node_[parent_site], frame);
    const auto s = static_cast<std::uint32_t>(site_node_.size());
    nameless_sites_ += offset != no_offset && strings_[frame_symbol_[frame]] == "[unknown]";
    site_key_.push_back({parent_site, frame, offset});
    site_node_.push_back(node);
    site_index_.insert(found.slot, s, [this](std::uint32_t i) {
        const auto& k = site_key_[i];
        return site_hash(k.parent, k.frame, k.offset);
    });
    return s;
}

std::uint32_t profile::past_room_site() {
    if (past_site_ != 0)
        return past_site_;
    const auto room = std::exchange(shape_room_, SIZE_MAX); // (the one frame, node and site)
    past_site_ = child_site(0, intern_frame(past_room_symbol, "[perfwire]"), no_offset);
    shape_room_ = room;
    past_node_ = site_node_[past_site_];
    return past_site_;
}

void profile::add_sample(std::uint64_t time_ns, std::uint32_t node, std::uint32_t pid,
                         std::uint32_t tid, std::string_view comm, std::uint8_t event,
                         std::uint64_t period, std::uint32_t leaf_offset) {
    if (node != last_node_ || leaf_offset != last_offset_) {
        path_.clear();
        for (auto n = node; n != root; n = node_parent_[n])
            path_.push_back(node_frame_[n]);
        std::uint32_t site = 0;
        for (std::size_t i = path_.size(); i-- > 0;)
            site = child_site(site, path_[i], i == 0 ? leaf_offset : no_offset);
        last_node_ = node;
        last_offset_ = leaf_offset;
        last_site_ = site;
    }
    add_sample_at(time_ns, last_site_, pid, tid, comm, event, period);
}

void profile::add_sample_at(std::uint64_t time_ns, std::uint32_t site, std::uint32_t pid,
                            std::uint32_t tid, std::string_view comm, std::uint8_t event,
                            std::uint64_t period) {
    if (time_.empty() || time_ns < first_time_)
        first_time_ = time_ns;
    if (time_ns > last_time_)
        last_time_ = time_ns;
    const std::size_t index = time_.size();
    const std::uint32_t node = site_node_[site];
    past_room_samples_ += node == past_node_;
    if (tid != last_tid_ || !last_thread_) {
        auto it = threads_.find(tid);
        if (it == threads_.end()) {
            const auto as = shape_full() ? past_room_tid : tid; // (a thread past the room)
            it = threads_.try_emplace(as).first;
            if (it->second.samples == 0)
                it->second.pid = pid;
        }
        last_thread_ = &it->second;
        last_tid_ = tid;
        last_tid_kept_ = it->first;
    }
    tid = last_tid_kept_;
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

    // The comm of a thread can change (exec, prctl); keep the latest (a new name only within
    // the room).
    if (last_tid_kept_ == past_room_tid) {
        if (last_thread_->samples == 0)
            last_thread_->comm = strings_.intern(past_room_symbol);
    } else if (last_thread_->samples == 0 ||
               (strings_[last_thread_->comm] != comm && !shape_full())) {
        last_thread_->comm = strings_.intern(comm);
    }
    ++last_thread_->samples;
}

void profile::move_sites(const std::vector<renamed>& now, std::vector<std::uint32_t>* held) {
    moving_ = true;
    struct done_moving {
        bool& flag;
        ~done_moving() { flag = false; }
    } done{moving_};
    const std::size_t sites = site_node_.size();
    // Which sites are a sample's (a leaf keeps its offset whatever the rules say) and which
    // are a caller's; a site may be both, and become two.
    std::vector<bool> leaf(sites, false), caller(sites, false);
    for (std::size_t r = 0; r < compacted_.size(); ++r)
        leaf[compacted_.site[r]] = true;
    for (std::size_t i = raw_begin_; i < time_.size(); ++i)
        leaf[site_[i]] = true;
    if (held)
        for (const auto s : *held)
            leaf[s] = true;
    for (std::size_t s = 1; s < sites; ++s)
        caller[site_key_[s].parent] = true;

    const auto old_keys = std::exchange(site_key_, {});
    site_node_ = {};
    node_parent_ = {};
    node_frame_ = {};
    site_index_ = dense_index{};
    node_index_ = dense_index{4096};
    nameless_sites_ = 0;
    node_parent_.push_back(0);
    node_frame_.push_back(no_frame);
    site_key_.push_back({0, no_frame, no_offset});
    site_node_.push_back(root);
    last_node_ = no_frame;
    last_offset_ = no_offset;
    last_site_ = 0;

    // Depth first over the old sites (children listed per site), a caller before its
    // callees; `on_path[frame]`: the callers on the path above with that new frame, for the
    // recursion rule in constant time.
    std::vector<std::uint32_t> first(sites + 1, 0), children(sites > 0 ? sites - 1 : 0);
    for (std::size_t s = 1; s < sites; ++s)
        ++first[old_keys[s].parent + 1];
    for (std::size_t s = 0; s < sites; ++s)
        first[s + 1] += first[s];
    {
        auto next = first;
        for (std::size_t s = 1; s < sites; ++s)
            children[next[old_keys[s].parent]++] = static_cast<std::uint32_t>(s);
    }
    std::vector<std::uint32_t> as_leaf(sites, 0), as_caller(sites, 0);
    std::vector<std::uint32_t> on_path(frame_symbol_.size(), 0);
    struct visit {
        std::uint32_t site, next_child;
    };
    std::vector<visit> stack{{0, first[0]}};
    while (!stack.empty()) {
        auto& top = stack.back();
        if (top.next_child == first[top.site + 1]) {
            if (top.site != 0)
                --on_path[now[top.site].frame];
            stack.pop_back();
            continue;
        }
        const auto s = children[top.next_child++];
        const auto [frame, offset] = now[s];
        const auto parent = as_caller[old_keys[s].parent];
        if (leaf[s])
            as_leaf[s] = child_site(parent, frame, offset);
        if (!caller[s])
            continue;
        // A named caller already on the path closer to the root keeps no offset: its
        // outermost call holds its lines (as the parser has it).
        const bool recurs = on_path[frame] > 0 && offset != no_offset &&
                            strings_[frame_symbol_[frame]] != "[unknown]";
        as_caller[s] = child_site(parent, frame, recurs ? no_offset : offset);
        ++on_path[frame];
        stack.push_back({s, first[s]});
    }

    for (std::size_t r = 0; r < compacted_.size(); ++r)
        compacted_.site.set(r, as_leaf[compacted_.site[r]]);
    for (std::size_t i = raw_begin_; i < time_.size(); ++i)
        site_.set(i, as_leaf[site_[i]]);
    if (held)
        for (auto& s : *held)
            s = as_leaf[s];
    for (std::size_t e = 0; e < events_.size(); ++e) {
        self_samples_[e].assign(node_parent_.size(), 0);
        self_period_[e].assign(node_parent_.size(), 0);
    }
    for (std::size_t r = 0, rows = row_count(); r < rows; ++r) {
        const auto s = row(r);
        const auto node = site_node_[s.site];
        self_samples_[s.event][node] += s.count;
        self_period_[s.event][node] += s.period;
    }
}

std::uint64_t profile::sample_period(std::size_t i) const noexcept {
    const std::uint32_t p = period_[i];
    if (p != std::numeric_limits<std::uint32_t>::max())
        return p;
    return big_periods_.at(i);
}

sample_row profile::row(std::size_t r) const noexcept {
    if (r < compacted_.size())
        return {r,
                compacted_.time[r],
                compacted_.site[r],
                compacted_.tid[r],
                compacted_.event[r],
                compacted_.count[r],
                compacted_.period[r]};
    const std::size_t i = raw_begin_ + (r - compacted_.size());
    return {r, time_[i], site_[i], tid_[i], event_[i], 1, sample_period(i)};
}

namespace {

struct fold_key {
    std::uint64_t interval;
    std::uint32_t site, tid;
    std::uint8_t event;
    bool operator==(const fold_key&) const = default;
};

struct fold_hash {
    std::size_t operator()(const fold_key& k) const noexcept {
        return mix(k.interval * 0x9E3779B97F4A7C15ULL ^ pair_hash(k.site, k.tid) ^ k.event);
    }
};

struct fold_value {
    std::uint64_t count = 0, period = 0;
};

using folds = std::unordered_map<fold_key, fold_value, fold_hash>;

// The folds in interval order (then site, thread, event), appended to `to`.
template <class Rows>
void append_folds(const folds& f, std::uint64_t width, Rows& to) {
    std::vector<std::pair<fold_key, fold_value>> sorted(f.begin(), f.end());
    std::sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) {
        return std::tie(a.first.interval, a.first.site, a.first.tid, a.first.event) <
               std::tie(b.first.interval, b.first.site, b.first.tid, b.first.event);
    });
    for (const auto& [k, v] : sorted) {
        // A row counts at most 2^32 - 1 samples: more of one key take several rows.
        for (std::uint64_t left = v.count, period = v.period; left > 0;) {
            const auto n = std::min<std::uint64_t>(left, std::numeric_limits<std::uint32_t>::max());
            const auto part = n == left ? period : period / left * n;
            to.time.push_back(k.interval * width);
            to.site.push_back(k.site);
            to.tid.push_back(k.tid);
            to.event.push_back(k.event);
            to.count.push_back(static_cast<std::uint32_t>(n));
            to.period.push_back(part);
            left -= n;
            period -= part;
        }
    }
}

} // namespace

std::size_t profile::compact(std::size_t keep, std::uint64_t width_ns) {
    width_ns = std::max<std::uint64_t>({width_ns, compact_width_, 1});
    if (compact_width_ && width_ns != compact_width_)
        coarsen(width_ns);
    compact_width_ = width_ns;
    const std::size_t block = column<std::uint64_t>::block_size;
    const std::size_t end = time_.size() > keep ? (time_.size() - keep) / block * block : 0;
    if (end <= raw_begin_)
        return 0;
    folds f;
    for (std::size_t i = raw_begin_; i < end; ++i) {
        auto& v = f[{time_[i] / width_ns, site_[i], tid_[i], event_[i]}];
        ++v.count;
        v.period += sample_period(i);
    }
    append_folds(f, width_ns, compacted_);
    const std::size_t folded = end - raw_begin_;
    std::erase_if(big_periods_, [&](const auto& kv) { return kv.first < end; });
    raw_begin_ = end;
    time_.release_before(end);
    site_.release_before(end);
    tid_.release_before(end);
    event_.release_before(end);
    period_.release_before(end);
    return folded;
}

void profile::coarsen(std::uint64_t width_ns) {
    if (width_ns <= compact_width_)
        return;
    folds f;
    for (std::size_t r = 0; r < compacted_.size(); ++r) {
        auto& v = f[{compacted_.time[r] / width_ns, compacted_.site[r], compacted_.tid[r],
                     compacted_.event[r]}];
        v.count += compacted_.count[r];
        v.period += compacted_.period[r];
    }
    compacted_ = {};
    append_folds(f, width_ns, compacted_);
    compact_width_ = width_ns;
}

std::size_t profile::sample_bytes() const noexcept {
    return time_.memory_bytes() + site_.memory_bytes() + tid_.memory_bytes() +
           event_.memory_bytes() + period_.memory_bytes() + big_periods_.size() * 32 +
           compacted_.memory_bytes();
}

std::size_t profile::shape_bytes() const noexcept {
    return memory_bytes() - sample_bytes();
}

std::size_t profile::memory_bytes() const noexcept {
    std::size_t self = 0;
    for (const auto& v : self_samples_)
        self += v.capacity() * 8;
    for (const auto& v : self_period_)
        self += v.capacity() * 8;

    return sample_bytes() + strings_.memory_bytes() + self +
           (frame_symbol_.capacity() + frame_module_.capacity()) * 4 + frame_index_.memory_bytes() +
           frame_hash_.capacity() * 8 + (node_parent_.capacity() + node_frame_.capacity()) * 4 +
           node_index_.memory_bytes() + site_key_.capacity() * sizeof(site_key) +
           site_node_.capacity() * 4 + site_index_.memory_bytes() + threads_.size() * 48;
}

} // namespace collector
