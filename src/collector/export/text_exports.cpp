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
    for_each_sample(p, f, [&](const sample_row& s) {
        weights[{s.tid, p.row_node(s)}] += s.weight(f.by_period);
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
    // Written as text as it goes: a JSON value per sample would be tens of bytes of memory
    // for each of millions of samples.
    auto quoted = [](std::string_view v) { return json::serialize(json::string(v)); };
    // One profile per thread, its samples in the order they were taken, each weighing its
    // period (or 1): speedscope's Time Order view then shows what the thread did when.
    struct lane {
        std::uint32_t tid;
        std::vector<std::uint32_t> samples; // row indices, in time order
        std::uint64_t total = 0;
    };
    std::vector<lane> lanes;
    std::unordered_map<std::uint32_t, std::size_t> lane_of;
    for_each_sample(p, f, [&](const sample_row& s) {
        auto [it, fresh] = lane_of.try_emplace(s.tid, lanes.size());
        if (fresh)
            lanes.push_back({s.tid, {}, 0});
        lane& l = lanes[it->second];
        l.samples.push_back(static_cast<std::uint32_t>(s.index));
        l.total += s.weight(f.by_period);
    });
    std::stable_sort(lanes.begin(), lanes.end(),
                     [](const lane& a, const lane& b) { return a.total > b.total; });
    const std::string event(view_event_name(p, f));
    const bool clock = is_time_event(event);

    std::string out =
        R"({"$schema":"https://www.speedscope.app/file-format-schema.json","shared":{"frames":[)";
    for (std::uint32_t i = 0; i < p.frame_count(); ++i) {
        if (i)
            out += ',';
        out += R"({"name":)" + quoted(p.symbol(i)) + R"(,"file":)" + quoted(p.module(i)) + '}';
    }
    out += R"(]},"profiles":[)";
    std::vector<std::uint32_t> stack;
    for (std::size_t li = 0; li < lanes.size(); ++li) {
        const lane& l = lanes[li];
        std::string comm;
        if (const auto t = p.threads().find(l.tid); t != p.threads().end())
            comm = std::string(p.strings()[t->second.comm]);
        if (li)
            out += ',';
        out += R"({"type":"sampled","name":)" +
               quoted(comm + " " + std::to_string(l.tid) + " (" + event + ")") + R"(,"unit":)" +
               (f.by_period && clock ? R"("nanoseconds")" : R"("none")") +
               R"(,"startValue":0,"endValue":)" + std::to_string(l.total) + R"(,"samples":[)";
        for (std::size_t k = 0; k < l.samples.size(); ++k) {
            stack.clear();
            for (auto n = p.row_node(p.row(l.samples[k])); n != profile::root; n = p.node_parent(n))
                stack.push_back(p.node_frame(n));
            out += k ? ",[" : "[";
            for (auto fr = stack.rbegin(); fr != stack.rend(); ++fr) {
                if (fr != stack.rbegin())
                    out += ',';
                out += std::to_string(*fr);
            }
            out += ']';
        }
        out += R"(],"weights":[)";
        for (std::size_t k = 0; k < l.samples.size(); ++k) {
            if (k)
                out += ',';
            out += std::to_string(p.row(l.samples[k]).weight(f.by_period));
        }
        out += "]}";
    }
    out += R"(],"name":)" + quoted(name) + R"(,"activeProfileIndex":0,"exporter":"perfwire )" +
           PERFWIRE_VERSION + "\"}";
    return out;
}

} // namespace collector
