// profile.proto (github.com/google/pprof/proto/profile.proto), the fields written here:
//
//   Profile   1 sample_type: ValueType   2 sample: Sample   3 mapping: Mapping
//             4 location: Location       5 function: Function   6 string_table: string
//             9 time_nanos  10 duration_nanos  11 period_type: ValueType  12 period
//   ValueType 1 type (string index)  2 unit (string index)
//   Sample    1 location_id (packed, leaf first)  2 value (packed)
//   Mapping   1 id  5 filename (string index)
//   Location  1 id  2 mapping_id  4 line: Line{1 function_id}
//   Function  1 id  2 name  3 system_name  4 filename (string indices)
#include "collector/export/exports.hpp"

#include <string_view>
#include <unordered_map>

namespace collector {
namespace {

class proto {
public:
    void varint(std::uint64_t v) {
        while (v >= 0x80) {
            out_.push_back(static_cast<char>(v | 0x80));
            v >>= 7;
        }
        out_.push_back(static_cast<char>(v));
    }
    void tag(int field, int wire) { varint(static_cast<std::uint64_t>(field) << 3 | wire); }
    void uint(int field, std::uint64_t v) {
        tag(field, 0);
        varint(v);
    }
    void bytes(int field, std::string_view b) {
        tag(field, 2);
        varint(b.size());
        out_.append(b);
    }
    void packed(int field, const std::vector<std::uint64_t>& v) {
        proto inner;
        for (auto x : v)
            inner.varint(x);
        bytes(field, inner.out_);
    }
    std::string& str() { return out_; }

private:
    std::string out_;
};

class string_index {
public:
    string_index() { get(""); }
    std::uint64_t get(std::string_view s) {
        auto [it, fresh] = ids_.try_emplace(std::string(s), list_.size());
        if (fresh)
            list_.emplace_back(s);
        return it->second;
    }
    const std::vector<std::string>& list() const { return list_; }

private:
    std::unordered_map<std::string, std::uint64_t> ids_;
    std::vector<std::string> list_;
};

bool is_clock_event(std::string_view e) {
    const auto base = event_base_name(e);
    return base == "cpu-clock" || base == "task-clock";
}

} // namespace

std::string pprof_profile(const profile& p, const view_filter& f) {
    view_filter by_samples = f, by_period = f;
    by_samples.by_period = false;
    by_period.by_period = true;
    const auto samples = node_self_weights(p, by_samples);
    const auto periods = node_self_weights(p, by_period);

    string_index strings;
    proto out;
    const auto event = p.event_name(f.event);
    const auto unit = is_clock_event(event) ? "nanoseconds" : "count";
    auto value_type = [&](int field, std::string_view type, std::string_view u) {
        proto vt;
        vt.uint(1, strings.get(type));
        vt.uint(2, strings.get(u));
        out.bytes(field, vt.str());
    };
    value_type(1, "samples", "count");
    value_type(1, event, unit);

    // Frames in use get ids 1..n (pprof reserves 0), modules get mapping ids.
    std::vector<std::uint64_t> frame_id(p.frame_count(), 0);
    std::unordered_map<std::uint32_t, std::uint64_t> module_id; // module string id -> mapping
    std::vector<std::uint32_t> used_frames;
    std::vector<std::uint64_t> stack;
    for_each_stack(p, samples, [&](std::uint32_t n, const std::vector<std::uint32_t>& frames) {
        stack.clear();
        for (const auto fr : frames) { // leaf first, as pprof wants
            if (!frame_id[fr]) {
                frame_id[fr] = used_frames.size() + 1;
                used_frames.push_back(fr);
            }
            stack.push_back(frame_id[fr]);
        }
        proto s;
        s.packed(1, stack);
        s.packed(2, {samples[n], periods[n]});
        out.bytes(2, s.str());
    });
    std::vector<std::uint64_t> mapping_of(used_frames.size());
    for (std::size_t i = 0; i < used_frames.size(); ++i) {
        const auto module = p.module(used_frames[i]);
        const auto key = static_cast<std::uint32_t>(strings.get(module));
        auto [it, fresh] = module_id.try_emplace(key, module_id.size() + 1);
        if (fresh) {
            proto m;
            m.uint(1, it->second);
            m.uint(5, key);
            out.bytes(3, m.str());
        }
        mapping_of[i] = it->second;
    }
    for (std::size_t i = 0; i < used_frames.size(); ++i) {
        proto line;
        line.uint(1, i + 1);
        proto loc;
        loc.uint(1, i + 1);
        loc.uint(2, mapping_of[i]);
        loc.bytes(4, line.str());
        out.bytes(4, loc.str());
    }
    for (std::size_t i = 0; i < used_frames.size(); ++i) {
        const auto name = strings.get(p.symbol(used_frames[i]));
        proto fn;
        fn.uint(1, i + 1);
        fn.uint(2, name);
        fn.uint(3, name);
        fn.uint(4, strings.get(p.module(used_frames[i])));
        out.bytes(5, fn.str());
    }
    for (const auto& s : strings.list())
        out.bytes(6, s);
    if (p.sample_count()) {
        out.uint(10, p.last_time() - p.first_time());
    }
    proto period_type;
    period_type.uint(1, strings.get(event));
    period_type.uint(2, strings.get(unit));
    // (The string table is complete above: these two names were interned already.)
    out.bytes(11, period_type.str());
    return std::move(out.str());
}

} // namespace collector
