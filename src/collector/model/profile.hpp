// The profile model every view is derived from.
//
//   strings   interned symbol, module, comm and event names
//   frames    (symbol, module) pairs: one per function
//   trie      (parent node, frame) -> node; node 0 is the root; a node's id is larger than
//             its parent's, so a reverse sweep over ids visits children before parents
//   sites     a trie beside the stack trie, of where in each frame's function the stack was:
//             (caller's site, frame, offset) -> site, site 0 the root. The offset is into the
//             frame's symbol — for the leaf the sampled instruction, for a caller the return
//             address of its call (`sym+0x…` as perf printed it; `no_offset` when it printed
//             none; for a frame nobody named, its address in its module). Each site knows its
//             node: two calls of one function from two lines are two sites of one node. A
//             sample is at its leaf's site; the symbolizer turns sites into source lines,
//             call-site lines and addresses. Sites keep no counters: the views that need
//             them (source, pprof) scan the samples.
//   samples   columns: time (ns), site, tid, event, period — 21 bytes a sample; a sample's
//             node is its site's
//   compacted the oldest samples, folded when memory runs short (compact): one row per
//             (interval, site, tid, event) with its count and summed period — 29 bytes a row
//             standing for every sample of that thread at that site in that interval. Views
//             read compacted rows and samples alike (rows), so a time window is exact to the
//             interval; counts and the per-node aggregates never change
//   self      per event, per node: samples and period whose leaf is that node, kept up to
//             date as samples arrive, so unfiltered views cost O(nodes), not O(samples)
#pragma once

#include "collector/model/column.hpp"
#include "collector/model/dense_index.hpp"
#include "collector/model/strings.hpp"
#include "protocol/off_cpu.hpp"

#include <cstdint>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace collector {

// A sample, or a compacted row standing for `count` samples (time: its interval's start).
struct sample_row {
    std::size_t index;  // in rows(): compacted rows first, then the samples kept whole
    std::uint64_t time; // ns
    std::uint32_t site, tid;
    std::uint8_t event;
    std::uint32_t count;
    std::uint64_t period; // summed
    std::uint64_t weight(bool by_period) const noexcept { return by_period ? period : count; }
};

struct thread_info {
    std::uint32_t pid = 0;
    std::uint32_t comm = 0; // string id
    std::uint64_t samples = 0;
};

// The event of the waits (protocol/off_cpu.hpp): a thread's time off the CPU, in ns.
using protocol::off_cpu_event_name;

class profile {
public:
    static constexpr std::uint32_t root = 0;
    static constexpr std::uint32_t no_frame = 0xFFFFFFFFU;
    static constexpr std::uint32_t no_offset = 0xFFFFFFFFU;

    profile();

    std::uint32_t intern_frame(std::string_view symbol, std::string_view module);
    std::uint8_t intern_event(std::string_view name);
    std::uint32_t child(std::uint32_t parent, std::uint32_t frame);
    // The site of `frame` at `offset`, called from `parent_site` (0: the root); its node is
    // the child of the parent site's node for that frame.
    std::uint32_t child_site(std::uint32_t parent_site, std::uint32_t frame, std::uint32_t offset);
    // A sample at `site` (its leaf's).
    void add_sample_at(std::uint64_t time_ns, std::uint32_t site, std::uint32_t pid,
                       std::uint32_t tid, std::string_view comm, std::uint8_t event,
                       std::uint64_t period);
    // The recording went on until `time_ns` (a wait added at its start ends there).
    void extend_to(std::uint64_t time_ns) noexcept {
        if (time_ns > last_time_)
            last_time_ = time_ns;
    }
    // A sample at `node`, only its leaf's offset known (`leaf_offset`, into the leaf
    // function's symbol): its callers' sites have no offset.
    void add_sample(std::uint64_t time_ns, std::uint32_t node, std::uint32_t pid, std::uint32_t tid,
                    std::string_view comm, std::uint8_t event, std::uint64_t period,
                    std::uint32_t leaf_offset = no_offset);

    // What the call tree's shape may hold: frames, nodes, sites, threads and their names, in
    // bytes (shape_bytes()). Past it nothing new is made: a sample that needs a new frame,
    // node or site is counted at the one node `past_room_symbol` under the root, one of a new
    // thread under `past_room_tid`, a new comm not kept — every count stays exact, and what
    // was not kept is said (past_room_samples()). SIZE_MAX (the default): no bound. A session
    // keeps it at its share of the memory budget (session_model::fit).
    static constexpr std::string_view past_room_symbol = "[past this session's memory share]";
    static constexpr std::uint32_t past_room_tid = 0xFFFFFFFEU;
    void set_shape_room(std::size_t bytes) noexcept { shape_room_ = bytes; }
    std::size_t shape_bytes() const noexcept;
    std::uint64_t past_room_samples() const noexcept { return past_room_samples_; }

    // Sizes. sample_count() counts every sample ever added, compacted or not.
    std::size_t sample_count() const noexcept { return time_.size(); }
    std::size_t node_count() const noexcept { return node_parent_.size(); }
    std::size_t frame_count() const noexcept { return frame_symbol_.size(); }
    std::size_t event_count() const noexcept { return events_.size(); }
    // Bytes held by the sample columns, and by everything.
    std::size_t sample_bytes() const noexcept;
    std::size_t memory_bytes() const noexcept;

    // Reading.
    const string_table& strings() const noexcept { return strings_; }
    std::string_view event_name(std::uint8_t e) const noexcept { return strings_[events_[e]]; }
    std::string_view symbol(std::uint32_t frame) const noexcept {
        return strings_[frame_symbol_[frame]];
    }
    std::string_view module(std::uint32_t frame) const noexcept {
        return strings_[frame_module_[frame]];
    }
    std::uint32_t node_parent(std::uint32_t n) const noexcept { return node_parent_[n]; }
    std::uint32_t node_frame(std::uint32_t n) const noexcept { return node_frame_[n]; }

    // The samples as rows, oldest first: compacted rows (in interval order), then each sample
    // kept whole (in arrival order).
    std::size_t row_count() const noexcept {
        return compacted_.size() + (time_.size() - raw_begin_);
    }
    sample_row row(std::size_t r) const noexcept;
    std::uint32_t row_node(const sample_row& s) const noexcept { return site_node_[s.site]; }

    // Names sites anew: `to(frame, offset)` is what a site of that frame and offset is now
    // (the same for one that keeps its name; asked once per site). The parser's rules hold
    // for the new names: a named caller recurring closer to the root keeps no offset. The
    // tries are made again (node and site ids change), samples and folded rows move to their
    // sites, per-node counts are counted again. Whether any site changed. `held`: sites kept
    // outside the samples (a wait not yet ended), kept and moved too.
    struct renamed {
        std::uint32_t frame, offset;
    };
    template <class To>
    bool rename(To&& to, std::vector<std::uint32_t>* held = nullptr) {
        std::vector<renamed> now(site_count());
        bool any = false;
        for (std::size_t s = 1; s < now.size(); ++s) {
            now[s] = to(site_frame(static_cast<std::uint32_t>(s)), site_key_[s].offset);
            any = any || now[s].frame != site_frame(static_cast<std::uint32_t>(s)) ||
                  now[s].offset != site_key_[s].offset;
        }
        if (any)
            move_sites(now, held);
        return any;
    }

    // Folds the samples kept whole, but for the newest `keep` (rounded up to a column block),
    // into compacted rows of `width_ns`-long intervals (at least the width already in use);
    // the samples folded. Their memory is given back.
    std::size_t compact(std::size_t keep, std::uint64_t width_ns);
    // Folds the compacted rows again into intervals of `width_ns` (wider than now).
    void coarsen(std::uint64_t width_ns);
    std::uint64_t compact_width() const noexcept { return compact_width_; }
    std::size_t compacted_rows() const noexcept { return compacted_.size(); }
    std::size_t raw_samples() const noexcept { return time_.size() - raw_begin_; }

    // A sample kept whole, by its index (raw_begin() and later).
    std::size_t raw_begin() const noexcept { return raw_begin_; }
    std::uint64_t sample_time(std::size_t i) const noexcept { return time_[i]; }
    std::uint32_t sample_site(std::size_t i) const noexcept { return site_[i]; }
    std::uint32_t sample_node(std::size_t i) const noexcept { return site_node_[site_[i]]; }
    std::uint32_t sample_tid(std::size_t i) const noexcept { return tid_[i]; }
    std::uint8_t sample_event(std::size_t i) const noexcept { return event_[i]; }
    std::uint64_t sample_period(std::size_t i) const noexcept;

    // Per-node self counts for event `e` (indexed by node id; may be shorter than node_count()).
    const std::vector<std::uint64_t>& self_samples(std::uint8_t e) const {
        return self_samples_[e];
    }
    const std::vector<std::uint64_t>& self_period(std::uint8_t e) const { return self_period_[e]; }
    const std::unordered_map<std::uint32_t, thread_info>& threads() const noexcept {
        return threads_;
    }
    std::size_t site_count() const noexcept { return site_node_.size(); }
    // Whether callers may no longer add sites of their own: the site trie holds four sites a
    // node and 16 Ki more (a caller's offset then goes unrecorded; its node still counts).
    // Sites of frames nobody named, at their addresses, are not counted: each stands for the
    // node it becomes once named, and they have an allowance of their own, 1 Mi more (about
    // 30 MB), past which a nameless caller's address goes unrecorded too.
    bool caller_sites_full() const noexcept {
        return site_node_.size() - nameless_sites_ >= 4 * node_parent_.size() + 16384;
    }
    bool nameless_sites_full() const noexcept {
        return nameless_sites_ >= 4 * node_parent_.size() + (std::size_t{1} << 20);
    }
    std::uint32_t site_node(std::uint32_t s) const noexcept { return site_node_[s]; }
    std::uint32_t site_frame(std::uint32_t s) const noexcept { return node_frame_[site_node_[s]]; }
    std::uint32_t site_offset(std::uint32_t s) const noexcept { return site_key_[s].offset; }
    std::uint32_t site_parent(std::uint32_t s) const noexcept { return site_key_[s].parent; }
    std::uint64_t first_time() const noexcept { return first_time_; }
    std::uint64_t last_time() const noexcept { return last_time_; }

private:
    void move_sites(const std::vector<renamed>& now, std::vector<std::uint32_t>* held);
    bool shape_full() const noexcept {
        return shape_room_ != SIZE_MAX && !moving_ && shape_bytes() > shape_room_;
    }
    std::uint32_t past_room_site(); // made when first needed, whatever the room
    std::size_t shape_room_ = SIZE_MAX;
    std::uint32_t past_node_ = no_frame, past_site_ = 0;
    std::uint64_t past_room_samples_ = 0;
    bool moving_ = false; // (renaming moves what is there: never bounded)

    string_table strings_;
    std::vector<std::uint32_t> events_; // string ids

    std::vector<std::uint32_t> frame_symbol_, frame_module_;
    std::vector<std::uint64_t> frame_hash_;
    dense_index frame_index_;

    std::vector<std::uint32_t> node_parent_, node_frame_;
    dense_index node_index_{4096};

    struct site_key { // what a site is looked up by, together: one cache line a probe
        std::uint32_t parent, frame, offset;
    };
    std::vector<site_key> site_key_;
    std::vector<std::uint32_t> site_node_;
    dense_index site_index_;
    std::size_t nameless_sites_ = 0; // of "[unknown]" frames, with an offset (their address)
    // add_sample's last (node, leaf offset) and its site.
    std::uint32_t last_node_ = no_frame, last_offset_ = no_offset, last_site_ = 0;
    std::vector<std::uint32_t> path_; // add_sample's walk, leaf first

    column<std::uint64_t> time_;
    column<std::uint32_t> site_, tid_;
    column<std::uint8_t> event_;
    column<std::uint32_t> period_; // UINT32_MAX: look in big_periods_
    std::unordered_map<std::size_t, std::uint64_t> big_periods_;
    std::size_t raw_begin_ = 0; // samples before it are compacted (a column block boundary)

    struct compacted_rows_t {
        column<std::uint64_t> time, period;
        column<std::uint32_t> site, tid, count;
        column<std::uint8_t> event;
        std::size_t size() const noexcept { return time.size(); }
        std::size_t memory_bytes() const noexcept {
            return time.memory_bytes() + period.memory_bytes() + site.memory_bytes() +
                   tid.memory_bytes() + count.memory_bytes() + event.memory_bytes();
        }
    };
    compacted_rows_t compacted_;
    std::uint64_t compact_width_ = 0;

    std::vector<std::vector<std::uint64_t>> self_samples_, self_period_;
    std::unordered_map<std::uint32_t, thread_info> threads_;
    std::uint32_t last_tid_ = 0xFFFFFFFFU, last_tid_kept_ = 0; // (the tid it was kept as)
    thread_info* last_thread_ = nullptr;
    std::uint64_t first_time_ = 0, last_time_ = 0;
};

} // namespace collector
