// How the perf script parser names frames (perf_script.hpp): functions perf names alike told
// apart by where they start, frames perf could not name named by the collector's symbols, and
// a session named again in place when those change.
#include "collector/parse/blanks.hpp"
#include "collector/parse/perf_script.hpp"

#include <algorithm>

namespace collector {

std::uint32_t script_parser::told_apart(std::uint32_t frame, std::string_view module,
                                        std::string_view ip, std::uint32_t offset) {
    constexpr std::uint32_t unasked = 0xFFFFFFFFU, alone = 0xFFFFFFFEU;
    if (frame >= apart_.size())
        apart_.resize(std::size_t{frame} + 1, unasked);
    if (apart_[frame] == unasked) {
        auto starts = namer_->starts_of(module, profile_.symbol(frame));
        if (starts.empty() || apart_modules_.size() >= max_named_modules) {
            apart_[frame] = alone;
            return frame;
        }
        apart a;
        const auto [m, fresh] =
            apart_modules_.try_emplace(std::string(module), apart_modules_.size());
        a.module = m->second;
        apart_module_bytes_ += fresh ? module.size() + 64 : 0;
        for (auto& s : starts)
            a.starts.push_back(
                {s.address, starts.size() == 1 ? frame : profile_.intern_frame(s.name, module)});
        std::sort(a.starts.begin(), a.starts.end(),
                  [](const auto& x, const auto& y) { return x.address < y.address; });
        for (std::uint32_t k = 0; k < a.starts.size(); ++k) {
            const auto [at, first] = a.by_page.try_emplace(a.starts[k].address & 0xFFF, k);
            if (!first)
                at->second = alone; // more than one at that place
        }
        apart_[frame] = static_cast<std::uint32_t>(apart_by_.size());
        apart_by_.push_back(std::move(a));
    }
    if (apart_[frame] == alone)
        return frame;
    const auto& a = apart_by_[apart_[frame]];
    // Where the function starts in this process, and where its module is loaded there: known
    // from any function of the module whose name is its own (the latest one says).
    const std::uint64_t start = hex_u64(ip) - offset;
    const std::uint64_t key = std::uint64_t{pid_} << 32 | a.module;
    if (bases_.size() >= max_named_modules * 4)
        bases_.clear();
    if (a.starts.size() == 1) {
        bases_.insert_or_assign(key, start - a.starts[0].address);
        return frame;
    }
    const auto base = bases_.find(key);
    if (base != bases_.end()) {
        if (const auto there = a.at(start - base->second, profile::no_frame);
            there != profile::no_frame)
            return there;
    } else if (const auto only = a.by_page.find(start & 0xFFF);
               only != a.by_page.end() && only->second != alone) {
        // Not placed yet: a module is loaded at a page boundary, so its functions keep their
        // place within a page; the only one at this start's place is the one (and places the
        // module).
        const auto& s = a.starts[only->second];
        bases_.try_emplace(key, start - s.address);
        return s.frame;
    }
    // A function further down this stack may place it, or place the module anew (commit);
    // else none starts there (another build) and it keeps perf's name.
    if (unplaced_.size() < max_stack_frames)
        unplaced_.push_back({frames_.size(), start, apart_[frame]});
    return frame;
}

std::uint32_t script_parser::apart::at(std::uint64_t address, std::uint32_t otherwise) const {
    const auto it = std::lower_bound(starts.begin(), starts.end(), address,
                                     [](const start& s, std::uint64_t a) { return s.address < a; });
    return it != starts.end() && it->address == address ? it->frame : otherwise;
}

void script_parser::place_unplaced() {
    for (const auto& u : unplaced_) {
        const auto& a = apart_by_[u.apart];
        const auto base = bases_.find(std::uint64_t{pid_} << 32 | a.module);
        if (base != bases_.end() && u.index < frames_.size())
            frames_[u.index] = a.at(u.start - base->second, frames_[u.index]);
    }
    unplaced_.clear();
}

script_parser::renaming script_parser::name_again() {
    if (!namer_)
        return renaming::unchanged;
    // Answers it no longer knows may have changed; callers that kept no address (past the
    // allowance of call sites) could be named only by a new parse.
    if (!named_all_ || stats_.call_sites_dropped > 0)
        return renaming::reparse;
    constexpr std::uint32_t unasked = 0xFFFFFFFFU, alone = 0xFFFFFFFEU;
    // Functions told apart (or asked and alone) are told apart as before.
    for (std::uint32_t f = 0; f < apart_.size(); ++f) {
        if (apart_[f] == unasked)
            continue;
        auto starts = namer_->starts_of(profile_.module(f), profile_.symbol(f));
        if (apart_[f] == alone) {
            if (!starts.empty())
                return renaming::reparse;
            continue;
        }
        const auto& a = apart_by_[apart_[f]];
        if (starts.size() != a.starts.size())
            return renaming::reparse;
        std::sort(starts.begin(), starts.end(),
                  [](const auto& x, const auto& y) { return x.address < y.address; });
        for (std::size_t k = 0; k < starts.size(); ++k)
            if (starts[k].address != a.starts[k].address ||
                (starts.size() > 1 && starts[k].name != profile_.symbol(a.starts[k].frame)))
                return renaming::reparse;
    }
    // Every address asked before gets the same answer, or a name where it got none and its
    // frame kept the address (a module's, within 32 bits). The answers are kept for the
    // renaming below.
    auto answers = named_;
    for (auto& [module, addresses] : answers)
        for (auto& [address, n] : addresses) {
            const auto answer = namer_->name_frame(module, address);
            if (n.frame == profile::no_frame) {
                // (A frame of a module named whole kept perf's name, not its address.)
                if (answer && (module.front() != '/' || address >= profile::no_offset - 1 ||
                               namer_->names_all(module)))
                    return renaming::reparse;
                if (answer)
                    n = {profile_.intern_frame(answer->symbol, module), answer->offset};
                continue;
            }
            if (!answer || answer->offset != n.offset || answer->symbol != profile_.symbol(n.frame))
                return renaming::reparse;
        }
    // Each thread's last stack is forgotten (its sites are moved: the next sample looks its
    // frames up again). Frames keep their ids, so what was learned of functions told apart
    // (checked above) and of where modules are loaded stays.
    for (auto& l : last_)
        l = {};
    named_ = std::move(answers);
    // The waits not yet ended hold sites of their own: moved with the samples'.
    std::vector<std::uint32_t> held;
    held.reserve(waits_.size());
    for (const auto& [tid, w] : waits_)
        held.push_back(w.site);
    const bool renamed = profile_.rename(
        [this](std::uint32_t frame, std::uint32_t offset) -> profile::renamed {
            const auto module = profile_.module(frame);
            if (offset == profile::no_offset || module.empty() || module.front() != '/' ||
                profile_.symbol(frame) != "[unknown]")
                return {frame, offset};
            std::uint32_t named_offset = profile::no_offset;
            const auto now = named_frame(module, offset, named_offset);
            return now == profile::no_frame ? profile::renamed{frame, offset}
                                            : profile::renamed{now, named_offset};
        },
        &held);
    auto moved = held.begin();
    for (auto& [tid, w] : waits_) // (the same order: the map did not change)
        w.site = *moved++;
    return renamed ? renaming::renamed : renaming::unchanged;
}

std::uint32_t script_parser::named_frame(std::string_view module, std::uint64_t address,
                                         std::uint32_t& offset) {
    auto by_module = named_.find(module);
    if (by_module != named_.end())
        if (const auto it = by_module->second.find(address); it != by_module->second.end()) {
            offset = it->second.offset;
            return it->second.frame;
        }
    named n;
    if (auto answer = namer_->name_frame(module, address)) {
        n.frame = profile_.intern_frame(answer->symbol, module);
        n.offset = answer->offset;
    }
    if (named_count_ < max_named_addresses &&
        (by_module != named_.end() || named_.size() < max_named_modules)) {
        if (by_module == named_.end())
            by_module = named_.emplace(std::string(module), 0).first;
        by_module->second.emplace(address, n);
        ++named_count_;
    } else {
        named_all_ = false;
    }
    offset = n.offset;
    return n.frame;
}

} // namespace collector
