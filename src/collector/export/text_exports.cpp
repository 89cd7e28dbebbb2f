#include "collector/export/exports.hpp"

#include <boost/json/serialize.hpp>

#include <algorithm>
#include <map>
#include <unordered_map>

namespace collector {
namespace json = boost::json;

std::string collapsed_text(const profile& p, const view_filter& f, bool by_thread) {
    auto line = [&](std::string& out, std::string_view root, std::uint32_t node, std::uint64_t w) {
        std::vector<std::uint32_t> frames;
        for (auto n = node; n != profile::root; n = p.node_parent(n))
            frames.push_back(p.node_frame(n));
        if (!root.empty())
            out.append(root);
        for (auto it = frames.rbegin(); it != frames.rend(); ++it) {
            if (it != frames.rbegin() || !root.empty())
                out.push_back(';');
            out.append(p.symbol(*it));
        }
        out.push_back(' ');
        out.append(std::to_string(w));
        out.push_back('\n');
    };
    std::string out;
    if (!by_thread) {
        const auto self = node_self_weights(p, f);
        for_each_stack(p, self, [&](std::uint32_t n, const std::vector<std::uint32_t>&) {
            line(out, {}, n, self[n]);
        });
        return out;
    }
    // A root frame per thread, "comm-tid", as flamegraph.pl's perf collapser writes with --tid.
    std::map<std::pair<std::uint32_t, std::uint32_t>, std::uint64_t> weights; // (tid, node)
    for_each_sample(p, f, [&](std::size_t i) {
        weights[{p.sample_tid(i), p.sample_node(i)}] += f.by_period ? p.sample_period(i) : 1;
    });
    for (const auto& [key, w] : weights) {
        std::string root;
        if (const auto t = p.threads().find(key.first); t != p.threads().end())
            root = std::string(p.strings()[t->second.comm]);
        root += "-" + std::to_string(key.first);
        line(out, root, key.second, w);
    }
    return out;
}

std::string speedscope_json(const profile& p, const view_filter& f, const std::string& name) {
    json::array frames;
    frames.reserve(p.frame_count());
    for (std::uint32_t i = 0; i < p.frame_count(); ++i)
        frames.push_back({{"name", p.symbol(i)}, {"file", p.module(i)}});
    // One profile per thread, its samples in the order they were taken, each weighing its
    // period (or 1): speedscope's Time Order view then shows what the thread did when.
    struct lane {
        std::uint32_t tid;
        json::array samples, weights;
        std::uint64_t total = 0;
    };
    std::vector<lane> lanes;
    std::unordered_map<std::uint32_t, std::size_t> lane_of;
    std::vector<std::uint32_t> stack;
    for_each_sample(p, f, [&](std::size_t i) {
        const auto tid = p.sample_tid(i);
        auto [it, fresh] = lane_of.try_emplace(tid, lanes.size());
        if (fresh)
            lanes.push_back({tid, {}, {}, 0});
        lane& l = lanes[it->second];
        stack.clear();
        for (auto n = p.sample_node(i); n != profile::root; n = p.node_parent(n))
            stack.push_back(p.node_frame(n));
        json::array s;
        s.reserve(stack.size());
        for (auto fr = stack.rbegin(); fr != stack.rend(); ++fr)
            s.push_back(*fr);
        const std::uint64_t w = f.by_period ? p.sample_period(i) : 1;
        l.samples.push_back(std::move(s));
        l.weights.push_back(w);
        l.total += w;
    });
    std::stable_sort(lanes.begin(), lanes.end(),
                     [](const lane& a, const lane& b) { return a.total > b.total; });
    const auto base = event_base_name(p.event_name(f.event));
    const bool clock = base == "cpu-clock" || base == "task-clock";
    json::array profiles;
    for (auto& l : lanes) {
        std::string comm;
        if (const auto t = p.threads().find(l.tid); t != p.threads().end())
            comm = std::string(p.strings()[t->second.comm]);
        profiles.push_back(json::object{{"type", "sampled"},
                                        {"name", comm + " " + std::to_string(l.tid) + " (" +
                                                     std::string(p.event_name(f.event)) + ")"},
                                        {"unit", f.by_period && clock ? "nanoseconds" : "none"},
                                        {"startValue", 0},
                                        {"endValue", l.total},
                                        {"samples", std::move(l.samples)},
                                        {"weights", std::move(l.weights)}});
    }
    return json::serialize(
        json::object{{"$schema", "https://www.speedscope.app/file-format-schema.json"},
                     {"shared", {{"frames", std::move(frames)}}},
                     {"profiles", std::move(profiles)},
                     {"name", name},
                     {"activeProfileIndex", 0},
                     {"exporter", "perfwire " PERFWIRE_VERSION}});
}

} // namespace collector
