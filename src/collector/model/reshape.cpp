#include "collector/model/reshape.hpp"

#include "collector/model/stack_shaper.hpp"

#include <unordered_map>

namespace collector {

std::unique_ptr<reshaped_view> reshape(const profile& p, const view_filter& f,
                                       const tree_shape& shape, std::string_view match) {
    tree_shape kept = shape;
    kept.inverted = false; // a file holds stacks; its reader turns them round
    kept.callers = false;
    const stack_shaper shaper(p, kept);
    if (shaper.focus_missing())
        return nullptr;
    const std::string needle = folded(match);
    auto out = std::make_unique<reshaped_view>();
    profile& dst = out->prof;
    out->filter.event = dst.intern_event(view_event_name(p, f)); // (wall: one event of both)
    out->filter.by_period = f.by_period;
    // Each frame of the shape, interned once; whether it matches the text.
    std::vector<std::uint32_t> frame_of(shaper.frame_count(), profile::no_frame);
    std::vector<char> matches(shaper.frame_count(), 0);
    for (std::uint32_t fr = 0; fr < shaper.frame_count(); ++fr)
        matches[fr] = needle.empty() || holds_folded(shaper.name(fr), needle) ||
                      holds_folded(shaper.module(fr), needle);
    // Each site of the source, as a site of the reshaped profile (0: the stack is left out).
    constexpr std::uint32_t unknown = 0xFFFFFFFFU;
    std::unordered_map<std::uint32_t, std::uint32_t> site_of;
    struct step {
        std::uint32_t frame, offset;
    };
    std::vector<step> stack; // leaf first
    const auto image = [&](std::uint32_t site) -> std::uint32_t {
        const auto [it, fresh] = site_of.try_emplace(site, unknown);
        if (!fresh)
            return it->second;
        stack.clear();
        std::size_t cut = 0;
        bool matched = needle.empty();
        for (auto m = site; m != 0; m = p.site_parent(m)) {
            if (shaper.drops(p.site_frame(m))) { // the sample is left out whole
                stack.clear();
                cut = 0;
                break;
            }
            const auto fr = shaper.image(p.site_frame(m));
            if (fr == stack_shaper::dropped ||
                (!stack.empty() && stack.back().frame == fr && shaper.merges(fr)))
                continue;
            // A collapsed module's frame has no instruction of its own.
            stack.push_back({fr, fr < p.frame_count() ? p.site_offset(m) : profile::no_offset});
            if (shaper.is_focus(fr))
                cut = stack.size();
        }
        if (shaper.focused())
            stack.resize(cut);
        for (const auto& s : stack)
            matched = matched || matches[s.frame];
        std::uint32_t at = 0;
        if (matched && !stack.empty())
            for (auto s = stack.rbegin(); s != stack.rend(); ++s) {
                auto& id = frame_of[s->frame];
                if (id == profile::no_frame)
                    id = dst.intern_frame(shaper.name(s->frame), shaper.module(s->frame));
                at = dst.child_site(at, id, s->offset);
            }
        site_of[site] = at;
        return at;
    };
    const auto& threads = p.threads();
    constexpr std::size_t fold_every = std::size_t{1} << 18;
    for_each_sample(p, f, [&](const sample_row& r) {
        const auto site = image(r.site);
        if (!site)
            return;
        const auto t = threads.find(r.tid);
        const std::uint32_t pid = t == threads.end() ? r.tid : t->second.pid;
        const std::string_view comm =
            t == threads.end() ? std::string_view() : p.strings()[t->second.comm];
        // A folded row stands for `count` samples: as many, its period shared among them,
        // folded again as they come (the source's intervals) so that a view of a folded
        // session never holds its samples whole.
        const std::uint64_t each = r.count ? r.period / r.count : r.period;
        for (std::uint32_t k = 0; k < std::max<std::uint32_t>(r.count, 1); ++k) {
            dst.add_sample_at(r.time, site, pid, r.tid, comm, out->filter.event,
                              k ? each : r.period - each * (r.count ? r.count - 1 : 0));
            if (p.compact_width() && dst.raw_samples() >= fold_every)
                dst.compact(0, p.compact_width());
        }
    });
    if (p.compact_width())
        dst.compact(0, p.compact_width());
    return out;
}

} // namespace collector
