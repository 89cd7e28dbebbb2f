// Inside the views' JSON (view_json.cpp, time_json.cpp): a tree_shape resolved against one
// profile, and what every view's answer starts with.
#pragma once

#include "collector/model/view_json.hpp"

#include <algorithm>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace collector {

// A tree_shape resolved against one profile: what each frame becomes — itself, nothing when
// hidden, or its module's one frame when the module is collapsed (such frames are numbered
// from the profile's frame count on) — which of those are the focus, and which call-tree
// nodes are left out whole (their stack holds a dropped function, by its own name or by the
// frame it became).
class stack_shaper {
public:
    static constexpr std::uint32_t dropped = 0xFFFFFFFFU;

    stack_shaper(const profile& p, const tree_shape& s)
        : p_(p)
        , recursion_(s.collapse_recursion)
        , focused_(!s.focus.empty()) {
        const auto n = static_cast<std::uint32_t>(p.frame_count());
        image_.resize(n);
        std::vector<std::uint32_t> made(s.collapse.size(), dropped); // module -> its frame
        for (std::uint32_t fr = 0; fr < n; ++fr) {
            image_[fr] = fr;
            if (s.collapse.empty())
                continue;
            const auto it = std::find(s.collapse.begin(), s.collapse.end(), p.module(fr));
            if (it == s.collapse.end())
                continue;
            auto& id = made[static_cast<std::size_t>(it - s.collapse.begin())];
            if (id == dropped) {
                id = n + static_cast<std::uint32_t>(synthetic_.size());
                synthetic_.push_back({collapsed_module_name(*it), *it});
            }
            image_[fr] = id;
        }
        if (!s.hide.empty())
            for (auto& im : image_)
                if (std::find(s.hide.begin(), s.hide.end(), name(im)) != s.hide.end())
                    im = dropped;
        if (!s.drop.empty()) {
            std::vector<char> drops(n, 0);
            const auto named = [&](std::string_view name) {
                return std::find(s.drop.begin(), s.drop.end(), name) != s.drop.end();
            };
            for (std::uint32_t fr = 0; fr < n; ++fr)
                drops[fr] =
                    named(p.symbol(fr)) || (image_[fr] != dropped && named(name(image_[fr])));
            // (A node's parent comes before it.)
            gone_.assign(p.node_count(), 0);
            for (std::uint32_t m = 1; m < p.node_count(); ++m)
                gone_[m] = gone_[p.node_parent(m)] || drops[p.node_frame(m)];
            drops_frame_ = std::move(drops);
        }
        plain_ = !recursion_ && !focused_ && synthetic_.empty() && gone_.empty();
        for (std::uint32_t fr = 0; fr < n; ++fr)
            plain_ = plain_ && image_[fr] == fr;
        if (focused_) {
            focus_.assign(frame_count(), false);
            for (const auto im : image_)
                if (im != dropped && name(im) == s.focus)
                    any_focus_ = focus_[im] = true;
        }
    }

    // Nothing changes a stack.
    bool plain() const noexcept { return plain_; }
    // A focus was asked for that no frame in any stack has.
    bool focus_missing() const noexcept { return focused_ && !any_focus_; }
    bool focused() const noexcept { return focused_; }
    bool is_focus(std::uint32_t frame) const { return focused_ && focus_[frame]; }
    std::uint32_t image(std::uint32_t frame) const { return image_[frame]; }
    // Node `node`'s stack holds a dropped function: the sample is not in the view.
    bool gone(std::uint32_t node) const { return !gone_.empty() && gone_[node]; }
    // A frame of the profile that drops the stacks holding it.
    bool drops(std::uint32_t frame) const { return !drops_frame_.empty() && drops_frame_[frame]; }
    // Per-node weights with the dropped nodes' set to 0 (the view's total is what is kept).
    void keep_only_kept(std::vector<std::uint64_t>& per_node) const {
        if (!gone_.empty())
            for (std::size_t m = 0; m < per_node.size() && m < gone_.size(); ++m)
                if (gone_[m])
                    per_node[m] = 0;
    }
    // A frame right below another of itself is one frame with it.
    bool merges(std::uint32_t frame) const noexcept {
        return recursion_ || frame >= p_.frame_count();
    }
    std::size_t frame_count() const noexcept { return p_.frame_count() + synthetic_.size(); }
    std::string_view name(std::uint32_t frame) const {
        return frame < p_.frame_count() ? p_.symbol(frame)
                                        : synthetic_[frame - p_.frame_count()].first;
    }
    std::string_view module(std::uint32_t frame) const {
        return frame < p_.frame_count() ? p_.module(frame)
                                        : synthetic_[frame - p_.frame_count()].second;
    }

    // Node `node`'s stack as the shape keeps it, leaf first, into `out`; returns how many of
    // its frames are kept up to its outermost focus frame (0: the stack is not through the
    // focus), or all of them without a focus; nothing for a dropped stack.
    std::size_t walk(std::uint32_t node, std::vector<std::uint32_t>& out) const {
        out.clear();
        if (gone(node))
            return 0;
        std::size_t cut = 0;
        for (auto m = node; m != profile::root; m = p_.node_parent(m)) {
            const auto fr = image_[p_.node_frame(m)];
            if (fr == dropped || (!out.empty() && out.back() == fr && merges(fr)))
                continue;
            out.push_back(fr);
            if (is_focus(fr))
                cut = out.size();
        }
        return focused_ ? cut : out.size();
    }

private:
    const profile& p_;
    bool recursion_, focused_, any_focus_ = false, plain_ = true;
    std::vector<std::uint32_t> image_;
    std::vector<bool> focus_;
    std::vector<char> gone_, drops_frame_; // per node, per frame: empty without a drop
    std::vector<std::pair<std::string, std::string>> synthetic_; // name, module
};

// {"event", "weight", "total", "samples"}: what every view's answer starts with.
json::object view_header(const profile& p, const view_filter& f, std::uint64_t total,
                         json::storage_ptr sp);

} // namespace collector
