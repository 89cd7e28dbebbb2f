#include "collector/export/exports.hpp"

#include <boost/json/serialize.hpp>

namespace collector {
namespace json = boost::json;

std::string collapsed_text(const profile& p, const view_filter& f) {
    const auto self = node_self_weights(p, f);
    std::string out;
    for_each_stack(p, self, [&](std::uint32_t n, const std::vector<std::uint32_t>& frames) {
        for (auto it = frames.rbegin(); it != frames.rend(); ++it) {
            if (it != frames.rbegin())
                out.push_back(';');
            out.append(p.symbol(*it));
        }
        out.push_back(' ');
        out.append(std::to_string(self[n]));
        out.push_back('\n');
    });
    return out;
}

std::string speedscope_json(const profile& p, const view_filter& f, const std::string& name) {
    json::array frames;
    frames.reserve(p.frame_count());
    for (std::uint32_t i = 0; i < p.frame_count(); ++i)
        frames.push_back({{"name", p.symbol(i)}, {"file", p.module(i)}});
    const auto self = node_self_weights(p, f);
    json::array samples, weights;
    std::uint64_t total = 0;
    for_each_stack(p, self, [&](std::uint32_t n, const std::vector<std::uint32_t>& stack) {
        json::array s;
        for (auto it = stack.rbegin(); it != stack.rend(); ++it)
            s.push_back(*it);
        samples.push_back(std::move(s));
        weights.push_back(self[n]);
        total += self[n];
    });
    const auto base = event_base_name(p.event_name(f.event));
    const bool clock = base == "cpu-clock" || base == "task-clock";
    json::object prof{{"type", "sampled"},
                      {"name", name + " (" + std::string(p.event_name(f.event)) + ")"},
                      {"unit", f.by_period && clock ? "nanoseconds" : "none"},
                      {"startValue", 0},
                      {"endValue", total},
                      {"samples", std::move(samples)},
                      {"weights", std::move(weights)}};
    return json::serialize(
        json::object{{"$schema", "https://www.speedscope.app/file-format-schema.json"},
                     {"shared", {{"frames", std::move(frames)}}},
                     {"profiles", json::array{std::move(prof)}},
                     {"name", name},
                     {"activeProfileIndex", 0},
                     {"exporter", "perfwire " PERFWIRE_VERSION}});
}

} // namespace collector
