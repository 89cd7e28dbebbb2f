// The session's views over time and threads: the quality checks, the timeline, the threads
// table, perf stat's counters and the device's metrics (docs/api.md). Pure functions of the
// model, like the other shapes in view_json.cpp.
#include "collector/model/stack_shaper.hpp"

#include <boost/json/parse.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <map>

namespace collector {

namespace {

std::string fixed(double v, int decimals) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
    return buf;
}

} // namespace

json::value quality_json(const session_model& m, const view_filter& f,
                         const json::storage_ptr& sp) {
    const profile& p = m.prof;
    const auto q = quality(p, f);
    json::array checks(sp);
    auto check = [&](std::string_view id, std::string_view title, std::string_view status,
                     std::string value, std::optional<double> share, std::string fix,
                     const std::vector<std::pair<std::string, std::uint64_t>>& detail = {}) {
        json::object c({{"id", id}, {"title", title}, {"status", status}, {"value", value}}, sp);
        if (share)
            c["pct"] = *share;
        c["fix"] = fix;
        json::array d(sp);
        for (const auto& [what, weight] : detail)
            d.push_back(json::object({{"name", what}, {"pct", pct(weight, q.total)}}, sp));
        c["detail"] = std::move(d);
        checks.push_back(std::move(c));
    };
    auto grade = [](double v, double warn, double bad) {
        return v >= bad ? "bad" : v >= warn ? "warn" : "ok";
    };

    // How far a share can be trusted: the 95 % interval of a function at 5 % of the samples.
    const std::uint64_t n = view_samples(p, f);
    const double spread = n ? 196.0 * std::sqrt(0.05 * 0.95 / static_cast<double>(n)) : 100.0;
    check("samples", "samples",
          n < 200    ? "bad"
          : n < 2000 ? "warn"
                     : "ok",
          std::to_string(n) + " samples: a function at 5 % is known to ±" + fixed(spread, 1) +
              " points",
          std::nullopt,
          n < 2000 ? "profile longer, or at a higher frequency, before trusting differences "
                     "smaller than that"
                   : "");

    const double unknown = pct(q.unknown_leaf, q.total);
    check("unknown", "samples in code with no name", grade(unknown, 5, 25),
          fixed(unknown, 1) + " % of the weight", unknown,
          unknown >= 5
              ? "name them at the collector: give it the unstripped builds (--binary, "
                "--sysroot), their debug files (--debug-dir, or the -dbgsym packages "
                "in /usr/lib/debug) or a debuginfod server (DEBUGINFOD_URLS); the "
                "Source tab says, per module, where it looked" +
                    std::string(m.parser.stats().unnamed_kernel && !m.kernel
                                    ? "; kernel frames: start the agent with "
                                      "--allow-kallsyms" +
                                          (m.kernel_note.empty() ? std::string()
                                                                 : " (" + m.kernel_note + ")")
                                    : "")
              : "",
          q.unknown_modules);

    // Graded by the stacks cut inside the program's own frames: one that stops only below
    // them (a nameless frame in the C library where the thread began) loses nothing of it,
    // and DWARF's cost would buy nothing.
    const double inside = pct(q.truncated_inside, q.total);
    const double below = pct(q.truncated - q.truncated_inside, q.total);
    check("truncated", "stacks cut short inside the program", grade(inside, 10, 40),
          fixed(inside, 1) + " % of the weight" +
              (q.truncated > q.truncated_inside
                   ? "; " + fixed(below, 1) +
                         " % stop only below the program's frames (in the C library, the C++ "
                         "runtime or the kernel: every frame of the program is there)"
                   : std::string()),
          inside,
          inside >= 10 ? "the unwinder lost its way where frame pointers are missing (below): "
                         "record with --call-graph dwarf, or build that code with "
                         "-fno-omit-frame-pointer"
                       : "",
          q.stops);
    checks.back().as_object()["below_pct"] = below;

    const auto lost = m.parser.stats().lost_events;
    const double lost_share =
        lost ? 100.0 * static_cast<double>(lost) / static_cast<double>(lost + n) : 0.0;
    check("lost", "samples perf lost", grade(lost_share, 0.1, 2),
          std::to_string(lost) + " lost (" + fixed(lost_share, 2) + " %)", lost_share,
          lost_share >= 0.1 ? "perf could not keep up: lower the frequency, or give it a larger "
                              "buffer (perf record -m)"
                            : "");

    if (m.last_stat) {
        std::vector<std::pair<std::string, std::uint64_t>> scaled;
        double least = 100;
        for (const auto& c : m.last_stat->counters)
            if (c.running_pct && *c.running_pct < 99.5) {
                least = std::min(least, *c.running_pct);
                scaled.emplace_back(c.event + " counted " + fixed(*c.running_pct, 0) +
                                        " % of "
                                        "the time",
                                    0);
            }
        check("multiplexing", "counters shared between events", scaled.empty() ? "ok" : "warn",
              scaled.empty() ? std::string("every counter ran all the time")
                             : std::to_string(scaled.size()) + " scaled, the least counted " +
                                   fixed(least, 0) + " % of the time",
              std::nullopt,
              scaled.empty() ? ""
                             : "perf stat counted more events than the hardware has "
                               "counters: count fewer events at once for exact figures",
              scaled);
    }
    json::object o = view_header(p, f, q.total, sp);
    o["checks"] = std::move(checks);
    return o;
}

json::value timeline_json(const profile& p, const view_filter& f, std::size_t width,
                          std::optional<std::uint32_t> chart_tid, const json::storage_ptr& sp,
                          const tree_shape& shape) {
    width = std::clamp<std::size_t>(width, 10, 4000);
    const std::uint64_t t0 = f.start_ns.value_or(p.first_time());
    const std::uint64_t t1 = std::max(f.end_ns.value_or(p.last_time()), t0 + 1);
    const double per_bucket = static_cast<double>(t1 - t0) / static_cast<double>(width);
    auto bucket = [&](std::uint64_t t) {
        const auto b =
            static_cast<std::size_t>(static_cast<double>(t - std::min(t, t0)) / per_bucket);
        return std::min(b, width - 1);
    };
    struct lane {
        std::uint64_t weight = 0;
        std::vector<std::uint64_t> activity; // only for the lanes shown
        std::size_t slot = 0;                // their place among them
    };
    std::unordered_map<std::uint32_t, lane> lanes;
    // The lanes show every thread; the chart, the chosen one.
    view_filter all_threads;
    all_threads.event = f.event;
    all_threads.also = f.also;
    all_threads.by_period = f.by_period;
    all_threads.start_ns = f.start_ns;
    all_threads.end_ns = f.end_ns;
    // Two passes: every thread's weight, then activity for the busiest (memory stays
    // lanes_shown × width, however many threads the session saw).
    constexpr std::size_t lanes_shown = 64;
    std::uint64_t total = 0;
    for_each_sample(p, all_threads, [&](const sample_row& s) {
        const std::uint64_t w = s.weight(f.by_period);
        lanes[s.tid].weight += w;
        total += w;
    });
    // A thread that only waited has a lane too (below the busy ones): when it waited shows.
    const auto off = event_named(p, off_cpu_event_name);
    view_filter of_waits = all_threads;
    if (off) {
        of_waits.event = *off;
        of_waits.also = view_filter::no_event;
        for_each_sample(p, of_waits, [&](const sample_row& s) { lanes.try_emplace(s.tid); });
    }
    std::vector<std::pair<std::uint32_t, lane*>> order;
    for (auto& [tid, l] : lanes)
        order.emplace_back(tid, &l);
    std::sort(order.begin(), order.end(), [](const auto& a, const auto& b) {
        return a.second->weight != b.second->weight ? a.second->weight > b.second->weight
                                                    : a.first < b.first;
    });
    const std::size_t hidden = order.size() > lanes_shown ? order.size() - lanes_shown : 0;
    order.resize(order.size() - hidden);
    for (std::size_t slot = 0; slot < order.size(); ++slot) {
        order[slot].second->activity.assign(width, 0);
        order[slot].second->slot = slot;
    }
    // The pointer on a lane shows the commonest stack of that thread in the bucket under it:
    // weights per (lane, bucket, stack), bounded (past the bound a new stack is not counted:
    // the hover is a hint, the activity stays exact).
    constexpr std::size_t max_cells = std::size_t{1} << 18;
    std::unordered_map<std::uint64_t, std::uint64_t> cell_stacks;
    // A wait is weighed over the time it lasted, not at its start.
    // (The part of a wait past the window is not in it.)
    const auto spread = [&](std::vector<std::uint64_t>& into, std::uint64_t from,
                            std::uint64_t ns) {
        const std::uint64_t to = std::min(from + ns, t1);
        from = std::max(from, t0);
        for (auto b = bucket(from); from < to; ++b) {
            const bool last = b + 1 >= width;
            const auto edge =
                last ? to
                     : std::clamp<std::uint64_t>(
                           t0 + static_cast<std::uint64_t>(per_bucket * static_cast<double>(b + 1)),
                           from, to);
            into[b] += edge - from;
            from = edge;
            if (last)
                break;
        }
    };
    for_each_sample(p, all_threads, [&](const sample_row& s) {
        auto& l = lanes[s.tid];
        if (l.activity.empty())
            return;
        const auto b = bucket(s.time);
        const std::uint64_t w = s.weight(f.by_period);
        // A wait is weighed over the time after its start; in a wall view a lane's activity
        // is when it ran, each clock sample over the period before it (ns, as waits are), and
        // its waits are the spans below (their stacks still the hover's).
        const bool wait = off && s.event == *off, wall = off && f.also == *off;
        const bool over_time = f.by_period && s.count <= 1; // (one sample: it has a period)
        if (over_time && wait != wall)
            spread(l.activity, wait ? s.time : s.time - std::min(s.time, w), w);
        else if (!(wait && wall))
            l.activity[b] += w;
        const std::uint64_t key =
            (static_cast<std::uint64_t>(l.slot * width + b) << 32) | p.row_node(s);
        if (const auto it = cell_stacks.find(key); it != cell_stacks.end())
            it->second += w;
        else if (cell_stacks.size() < max_cells)
            cell_stacks.emplace(key, w);
    });
    // When each thread waited and why: its waits as spans of buckets by kind (the frame atop a
    // wait's stack), neighbours of one kind merged, at most 4 a bucket per lane.
    std::vector<std::vector<std::array<std::uint64_t, 3>>> waits(order.size());
    if (off) {
        std::unordered_map<std::uint32_t, std::uint64_t> kind_of_frame;
        const auto kind_of = [&](std::uint32_t frame) {
            const auto [it, fresh] = kind_of_frame.try_emplace(frame, 3);
            if (fresh) {
                const auto name = p.symbol(frame);
                it->second = name == "[sleeping]"               ? 0
                             : name == "[uninterruptible: I/O]" ? 1
                             : name == "[preempted]"            ? 2
                                                                : 3;
            }
            return it->second;
        };
        for_each_sample(p, of_waits, [&](const sample_row& s) {
            const auto it = lanes.find(s.tid);
            if (it == lanes.end() || it->second.activity.empty())
                return;
            auto& spans = waits[it->second.slot];
            const std::uint64_t b0 = bucket(s.time), b1 = bucket(std::min(s.time + s.period, t1));
            const auto node = p.row_node(s);
            const auto kind = node == profile::root ? 3 : kind_of(p.node_frame(node));
            if (!spans.empty() && spans.back()[1] + 1 >= b0 &&
                (spans.back()[2] == kind || spans.size() >= 4 * width)) {
                spans.back()[1] = std::max(spans.back()[1], b1);
            } else {
                spans.push_back({b0, b1, kind});
            }
        });
    }
    struct commonest {
        std::uint32_t node = 0;
        std::uint64_t weight = 0;
    };
    std::vector<commonest> top(order.size() * width);
    for (const auto& [key, w] : cell_stacks) {
        auto& c = top[key >> 32];
        const auto node = static_cast<std::uint32_t>(key);
        if (w > c.weight || (w == c.weight && node < c.node))
            c = {node, w};
    }
    cell_stacks = {};
    // Each stack once (root first, as the view's transforms show it), frames by index.
    const stack_shaper shaper(p, shape);
    std::unordered_map<std::uint32_t, std::int64_t> stack_index; // node -> in `stacks`
    std::unordered_map<std::uint32_t, std::uint32_t> stack_frame_index;
    json::array stacks(sp), stack_frames(sp);
    std::vector<std::uint32_t> walked;
    // Bounded whatever the recording: at most max_tip_stacks stacks (past them a bucket shows
    // none), each its innermost max_tip_frames frames (the tip shows fewer).
    constexpr std::size_t max_tip_stacks = 10000, max_tip_frames = 32;
    auto stack_of = [&](std::uint32_t node) -> std::int64_t {
        if (stack_index.size() >= max_tip_stacks && !stack_index.count(node))
            return -1;
        auto [it, fresh] = stack_index.try_emplace(node, -1);
        if (!fresh)
            return it->second;
        walked.resize(shaper.walk(node, walked));
        if (walked.empty())
            return -1; // outside a focus
        if (walked.size() > max_tip_frames)
            walked.resize(max_tip_frames); // (leaf first: the outermost go)
        json::array frames(sp);
        for (auto fr = walked.rbegin(); fr != walked.rend(); ++fr) {
            auto [fi, new_frame] = stack_frame_index.try_emplace(*fr, stack_frames.size());
            if (new_frame)
                stack_frames.push_back(
                    json::object({{"name", shaper.name(*fr)}, {"module", shaper.module(*fr)}}, sp));
            frames.push_back(fi->second);
        }
        it->second = static_cast<std::int64_t>(stacks.size());
        stacks.push_back(std::move(frames));
        return it->second;
    };
    json::array threads(sp);
    for (const auto& [tid, l] : order) {
        json::array activity(sp), commonest_stack(sp), commonest_weight(sp);
        activity.reserve(width);
        commonest_stack.reserve(width);
        commonest_weight.reserve(width);
        for (std::size_t b = 0; b < width; ++b) {
            activity.push_back(l->activity[b]);
            const auto& c = top[l->slot * width + b];
            commonest_stack.push_back(c.weight ? stack_of(c.node) : -1);
            commonest_weight.push_back(c.weight);
        }
        const auto t = p.threads().find(tid);
        json::object row(
            {{"tid", tid},
             {"comm", t == p.threads().end() ? std::string_view() : p.strings()[t->second.comm]},
             {"weight", l->weight}},
            sp);
        row["activity"] = std::move(activity);
        row["top_stack"] = std::move(commonest_stack);
        row["top_weight"] = std::move(commonest_weight);
        if (off) {
            json::array spans(sp);
            for (const auto& w : waits[l->slot])
                spans.push_back(json::array({w[0], w[1], w[2]}, sp));
            row["waits"] = std::move(spans);
        }
        threads.push_back(std::move(row));
    }
    json::object o = view_header(p, f, total, sp);
    o["start_s"] = static_cast<double>(t0 - p.first_time()) / 1e9;
    o["end_s"] = static_cast<double>(t1 - p.first_time()) / 1e9;
    o["duration_s"] = static_cast<double>(p.last_time() - p.first_time()) / 1e9; // the whole
    o["buckets"] = width;
    o["threads"] = std::move(threads);
    o["threads_not_shown"] = hidden;
    if (off)
        o["wait_kinds"] = json::array({"sleeping", "I/O", "preempted", "other"}, sp);
    o["stacks"] = std::move(stacks);
    o["stack_frames"] = std::move(stack_frames);
    if (!chart_tid)
        return o;

    // The chosen thread's samples in time order; a frame at a depth is one box for as long as
    // consecutive samples keep it there.
    struct open_box {
        std::uint32_t frame;
        std::size_t first, last;
    };
    std::vector<open_box> open;
    std::vector<std::uint32_t> stack;
    std::unordered_map<std::uint32_t, std::uint32_t> frame_index;
    json::array frames(sp), boxes(sp);
    // A box narrower than a bucket next to one of the same frame is drawn as one; past the
    // cap the chart says it stops early.
    constexpr std::size_t max_boxes = 200000;
    bool cut = false;
    auto close_from = [&](std::size_t depth) {
        while (open.size() > depth) {
            const auto& b = open.back();
            if (boxes.size() >= max_boxes) {
                cut = true;
                open.pop_back();
                continue;
            }
            auto [it, fresh] = frame_index.try_emplace(b.frame, frames.size());
            if (fresh)
                frames.push_back(json::object(
                    {{"name", shaper.name(b.frame)}, {"module", shaper.module(b.frame)}}, sp));
            boxes.push_back(json::array({open.size() - 1, b.first, b.last, it->second}, sp));
            open.pop_back();
        }
    };
    view_filter one = f;
    one.tid = *chart_tid;
    for_each_sample(p, one, [&](const sample_row& s) {
        stack.resize(shaper.walk(p.row_node(s), stack)); // outside a focus: nothing
        std::reverse(stack.begin(), stack.end());        // root first
        const auto b = bucket(s.time);
        std::size_t same = 0;
        while (same < open.size() && same < stack.size() && open[same].frame == stack[same])
            ++same;
        close_from(same);
        for (std::size_t d = 0; d < same; ++d)
            open[d].last = b;
        for (std::size_t d = same; d < stack.size(); ++d)
            open.push_back({stack[d], b, b});
    });
    close_from(0);
    json::object chart({{"tid", *chart_tid}, {"truncated", cut}}, sp);
    chart["frames"] = std::move(frames);
    chart["boxes"] = std::move(boxes);
    o["chart"] = std::move(chart);
    say_shape(o, shape);
    return o;
}

json::value threads_json(const profile& p, const view_filter& f, const json::storage_ptr& sp) {
    const auto rows = threads(p, f);
    std::uint64_t total = 0;
    for (const auto& r : rows)
        total += r.weight;
    json::array out(sp);
    for (const auto& r : rows) {
        json::array top(sp);
        for (const auto& fn : r.top_functions)
            top.push_back(json::object({{"name", p.symbol(fn.frame)},
                                        {"module", p.module(fn.frame)},
                                        {"self", fn.self},
                                        {"self_pct", pct(fn.self, r.weight)}},
                                       sp));
        json::object row({{"tid", r.tid},
                          {"pid", r.pid},
                          {"comm", r.comm},
                          {"samples", r.samples},
                          {"weight", r.weight},
                          {"pct", pct(r.weight, total)}},
                         sp);
        row["top_functions"] = std::move(top);
        out.push_back(std::move(row));
    }
    return out;
}

json::object stat_json(const session_model& m) {
    json::object o;
    if (!m.last_stat)
        return o;
    json::array counters;
    for (const auto& c : m.last_stat->counters) {
        json::object jc{{"event", c.event},
                        {"value", c.value ? json::value(*c.value) : json::value(nullptr)},
                        {"unit", c.unit},
                        {"supported", c.supported},
                        {"counted", c.counted},
                        {"note", c.note}};
        jc["running_pct"] = c.running_pct ? json::value(*c.running_pct) : json::value(nullptr);
        counters.push_back(std::move(jc));
    }
    o["counters"] = std::move(counters);
    auto opt = [](const std::optional<double>& v) {
        return v ? json::value(*v) : json::value(nullptr);
    };
    o["ipc"] = opt(m.last_stat->ipc);
    o["cache_miss_pct"] = opt(m.last_stat->cache_miss_pct);
    o["branch_miss_pct"] = opt(m.last_stat->branch_miss_pct);
    o["elapsed_seconds"] = opt(m.last_stat->elapsed_seconds);
    o["scaled"] = m.last_stat->scaled();
    // The whole session: what the reports counted together, over their seconds.
    json::array totals;
    for (const auto& [event, t] : m.stat_totals)
        totals.push_back(json::object{
            {"event", event}, {"value", t.value}, {"unit", t.unit}, {"intervals", t.intervals}});
    o["totals"] = std::move(totals);
    o["intervals"] = m.stat_intervals;
    o["total_seconds"] = m.stat_seconds;
    return o;
}

json::array metrics_history(const std::vector<std::string>& lines, double t0, std::string_view type,
                            std::optional<double> start_s, std::optional<double> end_s) {
    json::array out;
    for (const auto& line : lines) {
        boost::system::error_code ec;
        auto sample = json::parse(line, ec);
        if (ec || !sample.is_object())
            continue;
        const auto* t = sample.as_object().if_contains("type");
        const auto* ts = sample.as_object().if_contains("ts");
        if (!type.empty() && (!t || !t->is_string() || t->as_string() != type))
            continue;
        const double rel = ts && ts->is_number() ? ts->to_number<double>() - t0 : 0.0;
        if ((start_s && rel < *start_s) || (end_s && rel > *end_s))
            continue;
        out.push_back(std::move(sample));
    }
    return out;
}

} // namespace collector
