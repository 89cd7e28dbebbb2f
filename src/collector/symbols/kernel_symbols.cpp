#include "collector/symbols/kernel_symbols.hpp"

#include <algorithm>

namespace collector {

kernel_symbols kernel_symbols::parse(std::string_view text) {
    std::vector<std::pair<std::uint64_t, std::string_view>> found;
    while (!text.empty() && found.size() < max_kernel_symbols) {
        const auto nl = text.find('\n');
        const auto line = text.substr(0, nl);
        text.remove_prefix(nl == std::string_view::npos ? text.size() : nl + 1);
        const auto sp = line.find(' ');
        if (sp == 0 || sp == std::string_view::npos || sp > 16 || sp + 1 >= line.size())
            continue;
        std::uint64_t address = 0;
        bool hex = true;
        for (const char c : line.substr(0, sp)) {
            const int v = c >= '0' && c <= '9'   ? c - '0'
                          : c >= 'a' && c <= 'f' ? c - 'a' + 10
                          : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                                 : -1;
            hex = hex && v >= 0;
            address = address * 16 + static_cast<std::uint64_t>(v < 0 ? 0 : v);
        }
        const auto name = line.substr(sp + 1);
        if (!hex || address == 0 || name.size() > 512)
            continue;
        found.emplace_back(address, name);
    }
    std::stable_sort(found.begin(), found.end(),
                     [](const auto& a, const auto& b) { return a.first < b.first; });
    kernel_symbols out;
    out.starts_.reserve(found.size());
    out.names_.reserve(found.size());
    for (const auto& [address, name] : found) {
        if (!out.starts_.empty() && out.starts_.back() == address)
            continue; // aliases: the first listed
        out.starts_.push_back(address);
        out.names_.emplace_back(name);
    }
    return out;
}

std::optional<kernel_symbols::symbol> kernel_symbols::at(std::uint64_t address) const {
    const auto it = std::upper_bound(starts_.begin(), starts_.end(), address);
    if (it == starts_.begin() || it == starts_.end())
        return std::nullopt;
    const auto i = static_cast<std::size_t>(it - starts_.begin()) - 1;
    return symbol{names_[i], starts_[i]};
}

} // namespace collector
