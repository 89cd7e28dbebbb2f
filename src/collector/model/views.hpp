// Views derived from a profile: functions, flame graph tree, threads. Each takes a filter
// (event, weight, thread, time window). Without a thread or time filter they read the
// per-node aggregates (O(nodes)); with one they scan the sample rows (O(rows): the samples
// kept whole and the compacted rows that stand for the older ones).
#pragma once

#include "collector/model/profile.hpp"

#include <optional>
#include <string>
#include <vector>

namespace collector {

// "cycles:u" and "cpu_core/cycles/" have the base name "cycles".
std::string_view event_base_name(std::string_view event) noexcept;

struct event_resolution {
    std::optional<std::uint8_t> event;
    std::optional<std::uint8_t> also;    // `wall`: the off-cpu event beside the clock's
    std::vector<std::string> candidates; // when the name is ambiguous or unknown
};

// The view of on-CPU samples and off-CPU waits together: each thread's wall-clock time.
inline constexpr std::string_view wall_event = "wall";

// Empty name: the event with the most samples (off-cpu only when there is no other). `wall`:
// the CPU clock (cpu-clock, task-clock: a period in ns) with off-cpu. Otherwise an exact name,
// or a base name that matches exactly one event.
event_resolution resolve_event(const profile& p, std::string_view name);
// The event of that exact name, if the profile has it.
std::optional<std::uint8_t> event_named(const profile& p, std::string_view name);
// Whether the profile has what `wall` needs (a CPU clock and off-cpu).
bool has_wall(const profile& p);

struct view_filter {
    static constexpr std::uint8_t no_event = 0xFF;
    std::uint8_t event = 0;
    std::uint8_t also = no_event; // a second event counted with `event` (wall: off-cpu)
    bool by_period = true;        // weight: period (perf report's Overhead) or sample count
    std::optional<std::uint32_t> tid;
    std::optional<std::uint64_t> start_ns, end_ns; // on the profile's clock, inclusive
};

// Calls fn(const sample_row&) for every row the filter keeps (event, thread, time window),
// oldest first: compacted rows (a time window takes those whose interval starts in it), then
// the samples kept whole in the order they arrived.
template <class Fn>
void for_each_sample(const profile& p, const view_filter& f, Fn fn) {
    const std::uint64_t lo = f.start_ns.value_or(0);
    const std::uint64_t hi = f.end_ns.value_or(~std::uint64_t{0});
    const std::size_t rows = p.row_count();
    for (std::size_t r = 0; r < rows; ++r) {
        const sample_row s = p.row(r);
        if ((s.event != f.event && s.event != f.also) || (f.tid && s.tid != *f.tid))
            continue;
        if (s.time >= lo && s.time <= hi)
            fn(s);
    }
}

// Whether an event's period is time in ns: the CPU clocks, the waits, the two together.
inline bool is_time_event(std::string_view event) noexcept {
    const auto base = event_base_name(event);
    return base == "cpu-clock" || base == "task-clock" || base == off_cpu_event_name ||
           base == wall_event;
}

// The name of what a view counts: its event's, or `wall`.
inline std::string_view view_event_name(const profile& p, const view_filter& f) {
    return f.also != view_filter::no_event ? wall_event : p.event_name(f.event);
}

// Self weight of every node under the filter.
std::vector<std::uint64_t> node_self_weights(const profile& p, const view_filter& f);
// Self weight of every site (call path + instruction offset) under the filter.
std::vector<std::uint64_t> site_self_weights(const profile& p, const view_filter& f);
// Inclusive weight of every node (self plus descendants).
std::vector<std::uint64_t> inclusive_weights(const profile& p, std::vector<std::uint64_t> self);
// Where a caller's site `caller` stood when it led to `callee` (its child site), as an offset
// into the caller's function: the call instruction, just before the return address perf
// printed; but where the caller is the program and the callee the kernel (an interrupt, a
// fault, a system call), the address perf printed itself — the instruction interrupted or
// trapping, or the one after the system call. `no_offset` when none is known. `into_kernel`
// says which.
struct call_place {
    std::uint32_t offset;
    bool into_kernel;
};
call_place call_offset(const profile& p, std::uint32_t caller, std::uint32_t callee);

// Inclusive weight of every site (its own samples and those of the sites it called).
std::vector<std::uint64_t> site_inclusive_weights(const profile& p,
                                                  std::vector<std::uint64_t> self);

struct function_row {
    std::uint32_t frame;
    std::uint64_t self = 0;
    std::uint64_t total = 0; // once per stack, even when the function recurses
};

struct function_table {
    std::uint64_t total_weight = 0;
    std::vector<function_row> rows; // by self, descending; functions with no weight left out
};

function_table functions(const profile& p, const view_filter& f);

struct thread_row {
    std::uint32_t tid = 0, pid = 0;
    std::string_view comm;
    std::uint64_t samples = 0, weight = 0;
    std::vector<function_row> top_functions; // by self, at most 5
};

std::vector<thread_row> threads(const profile& p, const view_filter& f);

// The profiled process's name: the comm of its main thread (tid == pid), else of its thread
// with most samples; without `pid`, the process of the busiest thread. Empty when no thread
// of it was sampled.
std::string_view process_name(const profile& p, std::optional<std::uint32_t> pid);

// Calls fn(node, frames) for every node with weight in `self`, `frames` being its call stack
// leaf first (frame ids). Exports write one record per such stack.
template <class Fn>
void for_each_stack(const profile& p, const std::vector<std::uint64_t>& self, Fn&& fn) {
    std::vector<std::uint32_t> frames;
    for (std::uint32_t n = 1; n < self.size(); ++n) {
        if (!self[n])
            continue;
        frames.clear();
        for (std::uint32_t m = n; m != profile::root; m = p.node_parent(m))
            frames.push_back(p.node_frame(m));
        fn(n, static_cast<const std::vector<std::uint32_t>&>(frames));
    }
}

// A function's callers and callees ("sandwich"), the function being every frame in `frames`
// (one name may be several frames: one per module). For each stack that holds it, the frame
// right above each occurrence is a caller and the frame right below a callee, each counted
// once per stack (total); a callee's self is the weight of stacks that end in it, right below
// the function. Recursion into the function itself is left out of both lists.
struct sandwich_table {
    std::uint64_t total_weight = 0; // of the whole view
    std::uint64_t self = 0, total = 0;
    std::vector<function_row> callers, callees; // by total, descending
};
sandwich_table sandwich(const profile& p, const view_filter& f,
                        const std::vector<std::uint32_t>& frames);

// What a profile says about its own quality, under a filter: how much weight ends in a frame
// no symbol names, and how much comes from stacks that stop before the thread's start (an
// unwinder that lost its way: frame pointers missing somewhere).
struct quality_facts {
    std::uint64_t total = 0;
    std::uint64_t unknown_leaf = 0; // the sampled frame itself has no name
    std::uint64_t truncated = 0;    // the outermost frame is not where a thread begins
    // Of those, the stacks the unwinder lost inside the program's own frames (what DWARF
    // unwinding would mend); the rest stop only below them — in the C library, the C++
    // runtime or the kernel, or at main — with every frame of the program there.
    std::uint64_t truncated_inside = 0;
    std::vector<std::pair<std::string, std::uint64_t>> unknown_modules; // by weight, at most 5
    std::vector<std::pair<std::string, std::uint64_t>> stops; // where those lost inside end
};
quality_facts quality(const profile& p, const view_filter& f);
// Whether a frame is where a thread's stack begins (_start, clone, start_thread, kthread …).
bool is_thread_start(std::string_view symbol) noexcept;
// Whether a module is the C library, the dynamic loader, the C++ runtime or the kernel.
bool is_runtime_module(std::string_view module) noexcept;

// Children of every node, as ranges into one array (nodes in id order).
struct node_children {
    std::vector<std::uint32_t> offset; // node n's children: child[offset[n] .. offset[n+1])
    std::vector<std::uint32_t> child;
};
node_children children_of(const profile& p);
// The function table of any call tree: node n's frame is node_frame[n] (below `frames`),
// its self and inclusive weight self[n] and inclusive[n], node 0 the root.
std::vector<function_row> tree_functions(std::size_t frames,
                                         const std::vector<std::uint32_t>& node_frame,
                                         const std::vector<std::uint64_t>& self,
                                         const std::vector<std::uint64_t>& inclusive,
                                         const node_children& kids);

} // namespace collector
