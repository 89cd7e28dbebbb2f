#include "collector/symbols/kernel_symbols.hpp"

#include "protocol/digest.hpp"

#include <algorithm>
#include <cstdio>
#include <set>

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
    out.name_end_.reserve(found.size());
    std::size_t bytes = 0;
    for (const auto& f : found)
        bytes += f.second.size();
    out.names_.reserve(bytes);
    for (const auto& [address, name] : found) {
        if (!out.starts_.empty() && out.starts_.back() == address)
            continue; // aliases: the first listed
        out.starts_.push_back(address);
        out.names_.append(name);
        out.name_end_.push_back(static_cast<std::uint32_t>(out.names_.size()));
    }
    out.names_.shrink_to_fit();
    return out;
}

std::string kernel_symbols::text() const {
    std::string out;
    char hex[24];
    for (std::size_t i = 0; i < starts_.size(); ++i) {
        std::snprintf(hex, sizeof hex, "%llx ", static_cast<unsigned long long>(starts_[i]));
        out += hex;
        out += name(i);
        out += '\n';
    }
    return out;
}

std::shared_ptr<const kernel_symbols> kernel_tables::get(std::string_view text) {
    // By SHA-256: an agent cannot make its text share another device's table (and read that
    // kernel's names in its own session's frames); two texts share one only when the tables
    // they make are the same.
    const auto key = protocol::sha256_hex(text);
    {
        std::lock_guard lock(mutex_);
        if (const auto it = tables_.find(key); it != tables_.end())
            if (auto held = it->second.lock())
                return held;
    }
    auto made = std::make_shared<const kernel_symbols>(kernel_symbols::parse(text));
    const auto canonical = protocol::sha256_hex(made->text());
    std::lock_guard lock(mutex_);
    std::erase_if(tables_, [](const auto& kv) { return kv.second.expired(); });
    for (const auto& k : {canonical, key})
        if (const auto it = tables_.find(k); it != tables_.end())
            if (auto held = it->second.lock()) { // made meanwhile, or from the other text
                tables_[key] = held;
                return held;
            }
    if (held_locked() + made->memory_bytes() > limit_)
        return nullptr;
    tables_[key] = made;
    tables_[canonical] = made;
    return made;
}

void kernel_tables::set_limit(std::size_t bytes) {
    std::lock_guard lock(mutex_);
    limit_ = bytes;
}

std::size_t kernel_tables::limit() const {
    std::lock_guard lock(mutex_);
    return limit_;
}

std::size_t kernel_tables::memory_bytes() const {
    std::lock_guard lock(mutex_);
    return held_locked();
}

std::size_t kernel_tables::held_locked() const {
    std::set<const kernel_symbols*> seen; // a table is under two keys
    std::size_t n = 0;
    for (const auto& [key, weak] : tables_)
        if (const auto t = weak.lock(); t && seen.insert(t.get()).second)
            n += t->memory_bytes();
    return n;
}

std::optional<kernel_symbols::symbol> kernel_symbols::at(std::uint64_t address) const {
    const auto it = std::upper_bound(starts_.begin(), starts_.end(), address);
    if (it == starts_.begin() || it == starts_.end())
        return std::nullopt;
    const auto i = static_cast<std::size_t>(it - starts_.begin()) - 1;
    return symbol{name(i), starts_[i]};
}

} // namespace collector
