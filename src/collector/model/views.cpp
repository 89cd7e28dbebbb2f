#include "collector/model/views.hpp"

#include <algorithm>
#include <unordered_map>
#include <unordered_set>

namespace collector {

std::string_view event_base_name(std::string_view e) noexcept {
    if (const auto slash = e.find('/'); slash != std::string_view::npos) {
        const auto end = e.find('/', slash + 1);
        e = e.substr(slash + 1, end == std::string_view::npos ? e.npos : end - slash - 1);
    }
    return e.substr(0, e.find(':'));
}

event_resolution resolve_event(const profile& p, std::string_view name) {
    event_resolution r;
    if (p.event_count() == 0)
        return r;
    if (name.empty()) {
        // (The waits are many where a program waits: what it does on the CPU comes first.)
        std::vector<std::uint64_t> counts(p.event_count(), 0);
        for (std::uint8_t e = 0; e < p.event_count(); ++e)
            for (auto n : p.self_samples(e))
                counts[e] += n;
        if (const auto off = event_named(p, off_cpu_event_name); off && p.event_count() > 1)
            counts[*off] = 0;
        r.event = static_cast<std::uint8_t>(std::max_element(counts.begin(), counts.end()) -
                                            counts.begin());
        return r;
    }
    if (name == wall_event) {
        const auto off = event_named(p, off_cpu_event_name);
        std::optional<std::uint8_t> clock;
        for (std::uint8_t e = 0; e < p.event_count() && !clock; ++e)
            if (const auto base = event_base_name(p.event_name(e));
                base == "cpu-clock" || base == "task-clock")
                clock = e;
        if (clock && off) {
            r.event = clock;
            r.also = off;
            return r;
        }
        for (std::uint8_t e = 0; e < p.event_count(); ++e)
            r.candidates.emplace_back(p.event_name(e));
        return r;
    }
    std::vector<std::uint8_t> by_base;
    for (std::uint8_t e = 0; e < p.event_count(); ++e) {
        if (p.event_name(e) == name) {
            r.event = e;
            return r;
        }
        if (event_base_name(p.event_name(e)) == name)
            by_base.push_back(e);
    }
    if (by_base.size() == 1) {
        r.event = by_base.front();
        return r;
    }
    const auto& pool = by_base;
    for (std::uint8_t e = 0; e < p.event_count(); ++e)
        if (pool.empty() || std::find(pool.begin(), pool.end(), e) != pool.end())
            r.candidates.emplace_back(p.event_name(e));
    return r;
}

namespace {

// Self weight per row of a table (nodes or sites) under the filter: its running per-event
// counters when nothing narrows the view, else a scan of the samples that fall in it.
template <class Aggregate, class RowOf>
std::vector<std::uint64_t> self_weights(const profile& p, const view_filter& f, std::size_t rows,
                                        Aggregate aggregate, RowOf row_of) {
    std::vector<std::uint64_t> self(rows, 0);
    if (f.event >= p.event_count())
        return self;
    if (!f.tid && !f.start_ns && !f.end_ns && f.also == view_filter::no_event) {
        const auto& agg = aggregate(f.by_period);
        std::copy(agg.begin(), agg.end(), self.begin());
        return self;
    }
    for_each_sample(p, f, [&](const sample_row& s) { self[row_of(s)] += s.weight(f.by_period); });
    return self;
}

} // namespace

std::optional<std::uint8_t> event_named(const profile& p, std::string_view name) {
    for (std::uint8_t e = 0; e < p.event_count(); ++e)
        if (p.event_name(e) == name)
            return e;
    return std::nullopt;
}

bool has_wall(const profile& p) {
    return resolve_event(p, wall_event).also.has_value();
}

std::vector<std::uint64_t> node_self_weights(const profile& p, const view_filter& f) {
    return self_weights(
        p, f, p.node_count(),
        [&](bool period) -> const auto& {
            return period ? p.self_period(f.event) : p.self_samples(f.event);
        },
        [&](const sample_row& s) { return p.row_node(s); });
}

std::vector<std::uint64_t> site_self_weights(const profile& p, const view_filter& f) {
    // Sites keep no running counters (they would cost 16 bytes a site and event, for views
    // asked for now and then: source lines, pprof): the samples are scanned.
    std::vector<std::uint64_t> self(p.site_count(), 0);
    if (f.event < p.event_count())
        for_each_sample(p, f, [&](const sample_row& s) { self[s.site] += s.weight(f.by_period); });
    return self;
}

call_place call_offset(const profile& p, std::uint32_t caller, std::uint32_t callee) {
    const auto back = p.site_offset(caller);
    // The kernel and its modules ("[kernel.kallsyms]", "[ext4]", "[bpf_prog]"), not the
    // bracketed mappings of a process ("[vdso]", "[heap]", "[anon:…]", "[unknown]"…).
    const auto kernel = [&](std::uint32_t s) {
        const auto m = p.module(p.site_frame(s));
        if (m.size() < 3 || m.front() != '[' || m.back() != ']')
            return false;
        for (const std::string_view user : {"[vdso]", "[vsyscall]", "[vectors]", "[sigpage]",
                                            "[uprobes]", "[heap]", "[stack]", "[unknown]"})
            if (m == user)
                return false;
        return !m.starts_with("[anon") && !m.starts_with("[stack:");
    };
    const bool into_kernel = kernel(callee) && !kernel(caller);
    if (back == profile::no_offset || back == 0 || into_kernel)
        return {back, into_kernel};
    return {back - 1, false};
}

std::vector<std::uint64_t> site_inclusive_weights(const profile& p, std::vector<std::uint64_t> w) {
    w.resize(p.site_count(), 0);
    for (std::size_t s = w.size(); s-- > 1;) // a site's id is larger than its caller's
        w[p.site_parent(static_cast<std::uint32_t>(s))] += w[s];
    return w;
}

std::vector<std::uint64_t> inclusive_weights(const profile& p, std::vector<std::uint64_t> w) {
    // Children have larger ids than their parents: one reverse sweep sums subtrees.
    for (std::size_t n = w.size(); n-- > 1;)
        w[p.node_parent(static_cast<std::uint32_t>(n))] += w[n];
    return w;
}

node_children children_of(const profile& p) {
    node_children c;
    const std::size_t n = p.node_count();
    c.offset.assign(n + 1, 0);
    for (std::uint32_t i = 1; i < n; ++i)
        ++c.offset[p.node_parent(i) + 1];
    for (std::size_t i = 0; i < n; ++i)
        c.offset[i + 1] += c.offset[i];
    c.child.resize(n ? n - 1 : 0);
    std::vector<std::uint32_t> fill(c.offset.begin(), c.offset.end() - 1);
    for (std::uint32_t i = 1; i < n; ++i)
        c.child[fill[p.node_parent(i)]++] = i;
    return c;
}

namespace {

// Self and total per frame from per-node self weights, `frame_of(n)` being node n's frame
// (below `frames`). Total adds a node's subtree to its function only when no ancestor is the
// same function, so recursion counts once per stack.
template <class FrameOf>
std::vector<function_row>
per_function(std::size_t frames, FrameOf&& frame_of, const std::vector<std::uint64_t>& self,
             const std::vector<std::uint64_t>& inclusive, const node_children& kids) {
    std::vector<function_row> rows(frames);
    for (std::uint32_t f = 0; f < rows.size(); ++f)
        rows[f].frame = f;
    std::vector<std::uint32_t> on_path(frames, 0);
    // Iterative DFS: a node is pushed once to enter and once (negated marker) to leave.
    std::vector<std::int64_t> stack;
    for (std::uint32_t i = kids.offset[0]; i < kids.offset[1]; ++i)
        stack.push_back(kids.child[i]);
    while (!stack.empty()) {
        const std::int64_t top = stack.back();
        stack.pop_back();
        if (top < 0) {
            --on_path[frame_of(static_cast<std::uint32_t>(-top - 1))];
            continue;
        }
        const auto n = static_cast<std::uint32_t>(top);
        if (inclusive[n] == 0)
            continue; // nothing below contributes
        const std::uint32_t f = frame_of(n);
        rows[f].self += self[n];
        if (on_path[f]++ == 0)
            rows[f].total += inclusive[n];
        stack.push_back(-static_cast<std::int64_t>(n) - 1);
        for (std::uint32_t i = kids.offset[n]; i < kids.offset[n + 1]; ++i)
            stack.push_back(kids.child[i]);
    }
    rows.erase(std::remove_if(rows.begin(), rows.end(),
                              [](const function_row& r) { return r.total == 0; }),
               rows.end());
    std::sort(rows.begin(), rows.end(), [](const function_row& a, const function_row& b) {
        return a.self != b.self ? a.self > b.self : a.total > b.total;
    });
    return rows;
}

std::vector<function_row> per_function(const profile& p, const std::vector<std::uint64_t>& self,
                                       const std::vector<std::uint64_t>& inclusive,
                                       const node_children& kids) {
    return per_function(
        p.frame_count(), [&](std::uint32_t n) { return p.node_frame(n); }, self, inclusive, kids);
}

} // namespace

std::vector<function_row> tree_functions(std::size_t frames,
                                         const std::vector<std::uint32_t>& node_frame,
                                         const std::vector<std::uint64_t>& self,
                                         const std::vector<std::uint64_t>& inclusive,
                                         const node_children& kids) {
    return per_function(
        frames, [&](std::uint32_t n) { return node_frame[n]; }, self, inclusive, kids);
}

function_table functions(const profile& p, const view_filter& f) {
    const auto self = node_self_weights(p, f);
    const auto inclusive = inclusive_weights(p, self);
    function_table t;
    t.total_weight = inclusive.empty() ? 0 : inclusive[0];
    t.rows = per_function(p, self, inclusive, children_of(p));
    return t;
}

std::vector<thread_row> threads(const profile& p, const view_filter& f) {
    std::unordered_map<std::uint32_t, thread_row> by_tid;
    for_each_sample(p, f, [&](const sample_row& s) {
        auto& row = by_tid[s.tid];
        row.samples += s.count;
        row.weight += s.weight(f.by_period);
    });
    std::vector<thread_row> out;
    const auto kids = children_of(p);
    for (auto& [tid, row] : by_tid) {
        row.tid = tid;
        if (const auto it = p.threads().find(tid); it != p.threads().end()) {
            row.pid = it->second.pid;
            row.comm = p.strings()[it->second.comm];
        }
        view_filter one = f;
        one.tid = tid;
        const auto self = node_self_weights(p, one);
        auto rows = per_function(p, self, inclusive_weights(p, self), kids);
        if (rows.size() > 5)
            rows.resize(5);
        row.top_functions = std::move(rows);
        out.push_back(std::move(row));
    }
    std::sort(out.begin(), out.end(),
              [](const thread_row& a, const thread_row& b) { return a.weight > b.weight; });
    return out;
}

std::string_view process_name(const profile& p, std::optional<std::uint32_t> pid) {
    if (!pid) { // the process of the busiest thread
        const thread_info* busiest = nullptr;
        for (const auto& [tid, t] : p.threads())
            if (!busiest || t.samples > busiest->samples)
                busiest = &t;
        if (!busiest)
            return {};
        pid = busiest->pid;
    }
    const thread_info* best = nullptr;
    for (const auto& [tid, t] : p.threads()) {
        if (t.pid != *pid)
            continue;
        if (tid == *pid)
            return p.strings()[t.comm];
        if (!best || t.samples > best->samples)
            best = &t;
    }
    return best ? p.strings()[best->comm] : std::string_view();
}

sandwich_table sandwich(const profile& p, const view_filter& f,
                        const std::vector<std::uint32_t>& frames) {
    const auto self = node_self_weights(p, f);
    sandwich_table t;
    for (const auto w : self)
        t.total_weight += w;
    const std::unordered_set<std::uint32_t> targets(frames.begin(), frames.end());
    auto is_target = [&](std::uint32_t frame) { return targets.count(frame) != 0; };
    std::unordered_map<std::uint32_t, function_row> callers, callees;
    std::vector<std::uint32_t> seen_callers, seen_callees;
    for_each_stack(p, self, [&](std::uint32_t n, const std::vector<std::uint32_t>& stack) {
        const std::uint64_t w = self[n];
        seen_callers.clear();
        seen_callees.clear();
        bool holds = false;
        for (std::size_t i = 0; i < stack.size(); ++i) {
            if (!is_target(stack[i]))
                continue;
            holds = true;
            if (i + 1 < stack.size() && !is_target(stack[i + 1]) &&
                std::find(seen_callers.begin(), seen_callers.end(), stack[i + 1]) ==
                    seen_callers.end())
                seen_callers.push_back(stack[i + 1]);
            if (i > 0 && !is_target(stack[i - 1]) &&
                std::find(seen_callees.begin(), seen_callees.end(), stack[i - 1]) ==
                    seen_callees.end())
                seen_callees.push_back(stack[i - 1]);
        }
        if (!holds)
            return;
        t.total += w;
        if (is_target(stack.front()))
            t.self += w;
        for (const auto c : seen_callers) {
            auto& row = callers[c];
            row.frame = c;
            row.total += w;
        }
        for (const auto c : seen_callees) {
            auto& row = callees[c];
            row.frame = c;
            row.total += w;
            if (stack.size() >= 2 && stack.front() == c && is_target(stack[1]))
                row.self += w;
        }
    });
    auto sorted = [](std::unordered_map<std::uint32_t, function_row>& m) {
        std::vector<function_row> v;
        v.reserve(m.size());
        for (auto& [frame, row] : m)
            v.push_back(row);
        std::sort(v.begin(), v.end(), [](const function_row& a, const function_row& b) {
            return a.total != b.total ? a.total > b.total : a.frame < b.frame;
        });
        return v;
    };
    t.callers = sorted(callers);
    t.callees = sorted(callees);
    return t;
}

bool is_thread_start(std::string_view symbol) noexcept {
    // Where glibc, musl, bionic and the kernel begin a thread or a process.
    constexpr std::string_view starts[] = {"_start",
                                           "__libc_start_main",
                                           "__libc_start_call_main",
                                           "start_thread",
                                           "clone",
                                           "clone3",
                                           "__clone",
                                           "__clone3",
                                           "thread_start",
                                           "__thread_start",
                                           "__start_thread",
                                           "__pthread_start",
                                           "ret_from_fork",
                                           "kthread",
                                           "ret_from_fork_asm",
                                           "secondary_startup_64",
                                           "start_kernel",
                                           "cpu_startup_entry",
                                           "__libc_start_main_impl",
                                           "runtime.goexit",
                                           "runtime.rt0_go",
                                           "runtime.mstart",
                                           "common_startup_64",
                                           "__secondary_switched",
                                           "_rt0_amd64_linux",
                                           "_rt0_arm64_linux",
                                           "_rt0_arm_linux",
                                           "_dl_start_user"};
    const auto base = symbol.substr(0, symbol.find('+'));
    for (const auto s : starts)
        if (base == s ||
            (base.size() > s.size() && base.substr(base.size() - s.size()) == s &&
             (base[base.size() - s.size() - 1] == '_' || base[base.size() - s.size() - 1] == '.')))
            return true;
    return false;
}

bool is_runtime_module(std::string_view module) noexcept {
    // The C library, the dynamic loader, the C++ runtime and the kernel: built without frame
    // pointers on most systems, and below every frame of the program.
    if (module.empty() || module.front() == '[')
        return module.rfind("[kernel", 0) == 0 || module == "[vdso]";
    const auto slash = module.rfind('/');
    const auto base = slash == std::string_view::npos ? module : module.substr(slash + 1);
    constexpr std::string_view runtimes[] = {
        "libc.",       "libc-",       "libm.",      "libm-",   "libdl.",     "librt.",
        "libpthread.", "libpthread-", "libstdc++.", "libc++.", "libc++abi.", "libgcc_s.",
        "libunwind.",  "ld-linux",    "ld-musl",    "ld.so",   "ld-2.",      "libc.musl"};
    for (const auto r : runtimes)
        if (base.rfind(r, 0) == 0)
            return true;
    return false;
}

quality_facts quality(const profile& p, const view_filter& f) {
    const auto self = node_self_weights(p, f);
    quality_facts q;
    std::unordered_map<std::string_view, std::uint64_t> unknown_by_module, stops;
    std::vector<std::uint32_t> path; // a node's frames, leaf first
    for (std::uint32_t n = 1; n < self.size(); ++n) {
        if (!self[n])
            continue;
        q.total += self[n];
        const auto leaf = p.node_frame(n);
        if (p.symbol(leaf) == "[unknown]") {
            q.unknown_leaf += self[n];
            unknown_by_module[p.module(leaf)] += self[n];
        }
        // From the outermost frame in: return addresses that lead into no module are where
        // the unwinder read garbage; the first frame past them says whose code it lost its
        // way in.
        path.clear();
        for (std::uint32_t x = n; x != profile::root; x = p.node_parent(x))
            path.push_back(x);
        const auto start = p.symbol(p.node_frame(path.back()));
        if (is_thread_start(start))
            continue;
        q.truncated += self[n];
        auto first = path.rbegin();
        while (first != path.rend() && p.module(p.node_frame(*first)) == "[unknown]")
            ++first;
        if (first != path.rend()) {
            const auto frame = p.node_frame(*first);
            if (p.symbol(frame) == "main" || is_runtime_module(p.module(frame)))
                continue;
        }
        q.truncated_inside += self[n];
        const auto outer = p.node_frame(path.back());
        stops[start == "[unknown]" ? p.module(outer) : start] += self[n];
    }
    auto top = [](std::unordered_map<std::string_view, std::uint64_t>& m) {
        std::vector<std::pair<std::string, std::uint64_t>> v;
        for (const auto& [k, w] : m)
            v.emplace_back(std::string(k), w);
        std::sort(v.begin(), v.end(), [](const auto& a, const auto& b) {
            return a.second != b.second ? a.second > b.second : a.first < b.first;
        });
        if (v.size() > 5)
            v.resize(5);
        return v;
    };
    q.unknown_modules = top(unknown_by_module);
    q.stops = top(stops);
    return q;
}

} // namespace collector
