// profile.proto (github.com/google/pprof/proto/profile.proto), the fields written here:
//
//   Profile   1 sample_type: ValueType   2 sample: Sample   3 mapping: Mapping
//             4 location: Location       5 function: Function   6 string_table: string
//             9 time_nanos  10 duration_nanos  11 period_type: ValueType  12 period
//             14 default_sample_type (string index)
//   ValueType 1 type (string index)  2 unit (string index)
//   Sample    1 location_id (packed, leaf first)  2 value (packed)
//   Mapping   1 id  5 filename  6 build_id (string indices)  7 has_functions
//             8 has_filenames  9 has_line_numbers  10 has_inline_frames
//   Location  1 id  2 mapping_id  3 address  4 line: Line{1 function_id  2 line}
//   Function  1 id  2 name  3 system_name  4 filename (string indices)  5 start_line
//
// A sample is a site: its call path, with the call sites along it, and, when perf printed
// `sym+0x…` for the leaf, the instruction. That instruction is the leaf's location (address
// and source lines, inlined functions included, from the symbolizer); each caller's is its
// call (call_offset), with its lines too, or its function (start address, file, no line)
// when perf printed no offset for it.
#include "collector/export/exports.hpp"

#include "collector/symbols/elf_symbols.hpp"
#include "collector/symbols/symbolizer.hpp"

#include <zlib.h>

#include <algorithm>
#include <map>
#include <stdexcept>
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

// gzip (RFC 1952) of `in`, as pprof files are usually stored.
std::string gzip(std::string_view in) {
    z_stream z{};
    if (deflateInit2(&z, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK)
        throw std::runtime_error("zlib: deflateInit2 failed");
    std::string out;
    char buffer[64 * 1024];
    int rc = Z_OK;
    while (rc != Z_STREAM_END) {
        const std::size_t step = std::min<std::size_t>(in.size(), 1U << 30);
        z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
        z.avail_in = static_cast<uInt>(step);
        z.next_out = reinterpret_cast<Bytef*>(buffer);
        z.avail_out = sizeof buffer;
        rc = deflate(&z, step == in.size() ? Z_FINISH : Z_NO_FLUSH);
        if (rc != Z_OK && rc != Z_STREAM_END && rc != Z_BUF_ERROR) {
            deflateEnd(&z);
            throw std::runtime_error("zlib: deflate failed");
        }
        in.remove_prefix(step - z.avail_in);
        out.append(buffer, sizeof buffer - z.avail_out);
    }
    deflateEnd(&z);
    return out;
}

} // namespace

std::string pprof_profile(const profile& p, const view_filter& f, const pprof_sources& src) {
    view_filter by_samples = f, by_period = f;
    by_samples.by_period = false;
    by_period.by_period = true;
    const auto samples = site_self_weights(p, by_samples);
    const auto periods = site_self_weights(p, by_period);

    string_index strings;
    proto out;
    const auto event = view_event_name(p, f);
    const auto unit = is_time_event(event) ? "nanoseconds" : "count";
    auto value_type = [&](int field, std::string_view type, std::string_view u) {
        proto vt;
        vt.uint(1, strings.get(type));
        vt.uint(2, strings.get(u));
        out.bytes(field, vt.str());
    };
    value_type(1, "samples", "count");
    value_type(1, event, unit);

    // Locations get ids 1..n (pprof reserves 0): an instruction (frame, offset) — the leaf's
    // sampled one, a caller's call (call_offset: the instruction before its return address,
    // so that its line is the call's) — or a function with no offset known (frame, no_offset).
    std::unordered_map<std::uint64_t, std::uint64_t> location_id;
    std::vector<std::pair<std::uint32_t, std::uint32_t>> locations;
    auto location = [&](std::uint32_t frame, std::uint32_t offset) {
        const auto [it, fresh] =
            location_id.try_emplace(std::uint64_t{frame} << 32 | offset, locations.size() + 1);
        if (fresh)
            locations.emplace_back(frame, offset);
        return it->second;
    };
    std::uint64_t total_samples = 0, total_period = 0;
    std::vector<std::uint64_t> stack;
    for (std::uint32_t s = 0; s < samples.size(); ++s) {
        if (!samples[s])
            continue;
        stack.clear();
        stack.push_back(location(p.site_frame(s), p.site_offset(s)));
        for (auto callee = s, c = p.site_parent(s); c != 0; callee = c, c = p.site_parent(c))
            stack.push_back(location(p.site_frame(c), call_offset(p, c, callee).offset));
        proto sample;
        sample.packed(1, stack);
        sample.packed(2, {samples[s], periods[s]});
        out.bytes(2, sample.str());
        total_samples += samples[s];
        total_period += periods[s];
    }

    // Where each function starts and where each sampled instruction is, in one pass through
    // the symbolizer.
    std::unordered_map<std::uint32_t, std::size_t> frame_index;
    std::vector<std::uint32_t> frames;
    for (const auto& l : locations)
        if (frame_index.try_emplace(l.first, frames.size()).second)
            frames.push_back(l.first);
    std::vector<symbolizer::placement> frame_place(frames.size()), location_place(locations.size());
    if (src.symbols) {
        std::vector<symbolizer::site> sites;
        std::vector<symbolizer::placement*> into;
        auto ask = [&](std::uint32_t frame, std::uint32_t offset, symbolizer::placement* to) {
            if (p.symbol(frame) == "[unknown]")
                return;
            std::string module(p.module(frame)), id = src.missing_build_id;
            if (src.build_ids)
                if (const auto it = src.build_ids->find(module);
                    it != src.build_ids->end() && !it->second.empty())
                    id = it->second;
            sites.push_back({std::move(module), std::string(p.symbol(frame)), offset, id});
            into.push_back(to);
        };
        for (std::size_t i = 0; i < frames.size(); ++i)
            ask(frames[i], 0, &frame_place[i]);
        for (std::size_t i = 0; i < locations.size(); ++i)
            if (locations[i].second != profile::no_offset)
                ask(locations[i].first, locations[i].second, &location_place[i]);
        auto placed = src.symbols->resolve(sites);
        for (std::size_t k = 0; k < placed.size(); ++k)
            *into[k] = std::move(placed[k]);
    }

    // Functions by (name, file); mappings by module.
    std::map<std::pair<std::uint64_t, std::uint64_t>, std::uint64_t> function_id;
    proto functions;
    auto function = [&](std::string_view name, std::string_view file, std::uint32_t start) {
        const auto n = strings.get(name), fl = strings.get(file);
        const auto [it, fresh] = function_id.try_emplace({n, fl}, function_id.size() + 1);
        if (fresh) {
            proto fn;
            fn.uint(1, it->second);
            fn.uint(2, n);
            fn.uint(3, n);
            fn.uint(4, fl);
            if (start)
                fn.uint(5, start);
            functions.bytes(5, fn.str());
        }
        return it->second;
    };
    struct mapping_facts {
        std::uint64_t id = 0;
        bool lines = false, inlined = false;
    };
    std::map<std::string_view, mapping_facts> mappings;
    // pprof takes the first mapping for the program: the executable (not a shared object, not
    // the kernel) where most samples landed, or else the module where most did.
    {
        std::map<std::string_view, std::uint64_t> weight;
        for (std::uint32_t s = 0; s < samples.size(); ++s)
            if (samples[s])
                weight[p.module(p.node_frame(p.site_node(s)))] += samples[s];
        auto is_program = [](std::string_view m) {
            return !m.empty() && m.front() != '[' && m.find(".so") == std::string_view::npos;
        };
        std::string_view main;
        std::uint64_t best = 0;
        bool program = false;
        for (const auto& [module, w] : weight)
            if ((is_program(module) && !program) || (is_program(module) == program && w > best)) {
                main = module;
                best = w;
                program = is_program(module);
            }
        if (!weight.empty())
            mappings[main].id = 1;
    }
    std::uint64_t mappings_named = mappings.size();
    for (std::size_t i = 0; i < locations.size(); ++i) {
        const auto [frame, offset] = locations[i];
        const auto& start = frame_place[frame_index.at(frame)];
        const auto& here = location_place[i];
        auto& m = mappings[p.module(frame)];
        if (!m.id)
            m.id = ++mappings_named;
        // The function's own file and first line, from its start address.
        const std::string_view file =
            start.chain.empty() ? std::string_view() : std::string_view(start.chain.back().file);
        const std::uint32_t first_line = start.chain.empty() ? 0 : start.chain.back().line;
        proto loc;
        loc.uint(1, i + 1);
        loc.uint(2, m.id);
        // (A frame perf could not name has, as its offset, its address in the module.)
        const bool nameless = p.symbol(frame) == "[unknown]" && offset != profile::no_offset;
        if (const auto address = nameless ? std::optional(std::uint64_t{offset})
                                 : offset == profile::no_offset ? start.address
                                                                : here.address)
            loc.uint(3, *address);
        auto line = [&](std::uint64_t fn, std::uint32_t number) {
            proto l;
            l.uint(1, fn);
            if (number)
                l.uint(2, number);
            loc.bytes(4, l.str());
        };
        if (offset != profile::no_offset && !here.chain.empty()) {
            // Innermost first, as pprof wants; the last line is in the function perf named. A
            // line is always in its own file, as the Source tab places it: an instruction whose
            // line is in a header though no inlined call covers it (the debug info has such
            // gaps) is at that header's line, not at that number in the function's file.
            const auto& chain = here.chain;
            for (std::size_t k = 0; k + 1 < chain.size(); ++k)
                line(function(strip_return_type(strip_parameters(chain[k].function)), chain[k].file,
                              0),
                     chain[k].line);
            const auto& outer = chain.back();
            line(outer.file == file ? function(p.symbol(frame), file, first_line)
                                    : function(p.symbol(frame), outer.file, 0),
                 outer.line);
            m.lines = true;
            m.inlined = m.inlined || chain.size() > 1;
        } else {
            line(function(p.symbol(frame), file, first_line), 0);
        }
        out.bytes(4, loc.str());
    }
    std::vector<std::pair<std::string_view, mapping_facts>> by_id(mappings.begin(), mappings.end());
    std::sort(by_id.begin(), by_id.end(),
              [](const auto& a, const auto& b) { return a.second.id < b.second.id; });
    for (const auto& [module, m] : by_id) { // in id order: pprof reads the first as the program
        proto map;
        map.uint(1, m.id);
        map.uint(5, strings.get(module));
        if (src.build_ids)
            if (const auto it = src.build_ids->find(std::string(module));
                it != src.build_ids->end() && !it->second.empty())
                map.uint(6, strings.get(it->second));
        map.uint(7, 1); // names come with the profile: pprof need not look for the binary
        if (m.lines) {
            map.uint(8, 1);
            map.uint(9, 1);
        }
        if (m.inlined)
            map.uint(10, 1);
        out.bytes(3, map.str());
    }
    out.str() += functions.str();

    // The span of the view: the session's, or the time window's part of it.
    const auto lo = std::max(p.first_time(), f.start_ns.value_or(0));
    const auto hi = std::min(p.last_time(), f.end_ns.value_or(~std::uint64_t{0}));
    if (src.start_unix_ns)
        out.uint(9, src.start_unix_ns + (lo - p.first_time()));
    if (p.sample_count() && hi > lo)
        out.uint(10, hi - lo);
    proto period_type;
    period_type.uint(1, strings.get(event));
    period_type.uint(2, strings.get(unit));
    out.bytes(11, period_type.str());
    if (total_samples)
        out.uint(12, total_period / total_samples); // the mean period of a sample
    out.uint(14, strings.get(event));
    for (const auto& s : strings.list()) // complete: every string above is interned
        out.bytes(6, s);
    return gzip(out.str());
}

} // namespace collector
