#include "collector/symbols/elf_symbols.hpp"

#include <algorithm>
#include <cstdlib>
#include <cxxabi.h>
#include <memory>
#include <vector>

namespace collector {
namespace {

std::vector<std::string_view> fields(std::string_view line) {
    std::vector<std::string_view> out;
    std::size_t i = 0;
    while (i < line.size()) {
        while (i < line.size() && (line[i] == ' ' || line[i] == '\t'))
            ++i;
        const std::size_t start = i;
        while (i < line.size() && line[i] != ' ' && line[i] != '\t')
            ++i;
        if (i > start)
            out.push_back(line.substr(start, i - start));
    }
    return out;
}

} // namespace

std::string strip_parameters(std::string_view s) {
    // Drop trailing qualifiers, then the last balanced "(...)" group.
    for (;;) {
        const auto before = s.size();
        for (std::string_view q : {" const", " volatile", " &&", " &", " noexcept"})
            if (s.size() > q.size() && s.substr(s.size() - q.size()) == q)
                s.remove_suffix(q.size());
        if (s.size() == before)
            break;
    }
    if (s.empty() || s.back() != ')')
        return std::string(s);
    int depth = 0;
    for (std::size_t i = s.size(); i-- > 0;) {
        if (s[i] == ')')
            ++depth;
        else if (s[i] == '(' && --depth == 0)
            return i == 0 ? std::string(s) : std::string(s.substr(0, i));
    }
    return std::string(s);
}

std::string strip_return_type(std::string_view s) {
    // A function template's demangled name starts with its return type ("void std::sort<…>",
    // "bool std::operator==<char>"), which perf leaves out: keep what follows the last space
    // outside brackets, before any operator's own name ("operator new", "operator bool").
    // Only template names end in '>' this way; thunks and wrappers ("virtual thunk to f",
    // "TLS wrapper function for x") are other symbols and keep their names.
    if (s.empty() || s.back() != '>' || s.find(" to ") != std::string_view::npos ||
        s.find(" for ") != std::string_view::npos)
        return std::string(s);
    int depth = 0;
    std::size_t cut = std::string_view::npos;
    for (std::size_t i = 0; i < s.size(); ++i) {
        const char c = s[i];
        if (depth == 0 && s.substr(i, 8) == "operator")
            break;
        if (c == '<' || c == '(' || c == '[' || c == '{')
            ++depth;
        else if ((c == '>' || c == ')' || c == ']' || c == '}') && depth > 0)
            --depth;
        else if (c == ' ' && depth == 0)
            cut = i;
    }
    return cut == std::string_view::npos ? std::string(s) : std::string(s.substr(cut + 1));
}

std::string perf_symbol_name(std::string_view raw) {
    if (const auto at = raw.find('@'); at != std::string_view::npos && at > 0)
        raw = raw.substr(0, at);
    if (raw.substr(0, 2) != "_Z")
        return std::string(raw);
    const std::string mangled(raw);
    int status = 0;
    std::unique_ptr<char, decltype(&std::free)> d(
        abi::__cxa_demangle(mangled.c_str(), nullptr, nullptr, &status), &std::free);
    if (status != 0 || !d)
        return mangled;
    return strip_return_type(strip_parameters(d.get()));
}

elf_symbols elf_symbols::parse_readelf(std::string_view text, bool thumb) {
    elf_symbols out;
    std::size_t pos = 0;
    while (pos < text.size()) {
        auto nl = text.find('\n', pos);
        if (nl == std::string_view::npos)
            nl = text.size();
        const auto line = text.substr(pos, nl - pos);
        pos = nl + 1;
        const auto f = fields(line);
        // Num: Value Size Type Bind Vis Ndx Name
        if (f.size() < 8 || f[0].empty() || f[0].back() != ':' ||
            (f[3] != "FUNC" && f[3] != "IFUNC") || f[6] == "UND")
            continue;
        char* end = nullptr;
        const std::string value(f[1]), size_text(f[2]);
        std::uint64_t address = std::strtoull(value.c_str(), &end, 16);
        if (address == 0 || *end != '\0')
            continue;
        if (thumb)
            address &= ~std::uint64_t{1};
        // readelf prints a size in decimal, or in hex with "0x" when it is large.
        const std::uint64_t size = std::strtoull(size_text.c_str(), &end, 0);
        if (*end != '\0')
            continue;
        // Both the name perf shows and the raw name, first definition wins (.dynsym first,
        // which agrees with .symtab).
        auto name = perf_symbol_name(f[7]);
        out.by_name_.try_emplace(name, address);
        out.by_name_.try_emplace(std::string(f[7]), address);
        const int rank = f[4] == "GLOBAL" ? 0 : f[4] == "WEAK" ? 1 : 2;
        out.by_address_.push_back({address, size, std::move(name), rank});
    }
    // One entry per address: the alias perf would show (global before weak before local,
    // then the first listed), with the largest size any alias gives.
    auto& v = out.by_address_;
    std::stable_sort(v.begin(), v.end(), [](const entry& a, const entry& b) {
        return a.start != b.start ? a.start < b.start : a.rank < b.rank;
    });
    std::size_t kept = 0;
    for (std::size_t i = 0; i < v.size(); ++i) {
        if (kept && v[kept - 1].start == v[i].start) {
            v[kept - 1].size = std::max(v[kept - 1].size, v[i].size);
            continue;
        }
        if (kept != i)
            v[kept] = std::move(v[i]);
        ++kept;
    }
    v.resize(kept);
    return out;
}

std::optional<elf_symbols::function> elf_symbols::at(std::uint64_t address) const {
    auto it = std::upper_bound(by_address_.begin(), by_address_.end(), address,
                               [](std::uint64_t a, const entry& e) { return a < e.start; });
    if (it == by_address_.begin())
        return std::nullopt;
    --it;
    if (address - it->start >= (it->size != 0 ? it->size : 4096))
        return std::nullopt; // past its end: a gap between functions
    return function{it->name, it->start};
}

std::optional<std::uint64_t> elf_symbols::address_of(std::string_view perf_name) const {
    const auto it = by_name_.find(std::string(perf_name));
    if (it == by_name_.end())
        return std::nullopt;
    return it->second;
}

std::uint64_t elf_symbols::extent_at(std::uint64_t start) const {
    const auto it = std::lower_bound(by_address_.begin(), by_address_.end(), start,
                                     [](const entry& e, std::uint64_t a) { return e.start < a; });
    if (it == by_address_.end() || it->start != start)
        return 0;
    if (it->size)
        return it->size;
    const auto next = std::next(it);
    return next == by_address_.end() ? 0 : next->start - start;
}

} // namespace collector
