#include "collector/symbols/elf_symbols.hpp"

#include <algorithm>
#include <cstdlib>
#include <cxxabi.h>
#include <memory>
#include <optional>
#include <utility>
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

std::optional<std::uint64_t> hex(std::string_view text) {
    const std::string s(text);
    char* end = nullptr;
    const std::uint64_t v = std::strtoull(s.c_str(), &end, 16);
    if (s.empty() || *end != '\0')
        return std::nullopt;
    return v;
}

struct section {
    std::string_view name;
    std::uint64_t address = 0, size = 0;
};

// A section header line: "  [13] .plt  PROGBITS  0000000000002020 002020 0001b0 10  AX  0 0 16".
std::optional<section> section_line(std::string_view line) {
    const auto open = line.find('['), close = line.find(']');
    if (open == std::string_view::npos || close == std::string_view::npos || close < open ||
        line.find_first_not_of(" \t") != open)
        return std::nullopt;
    const auto f = fields(line.substr(close + 1)); // Name Type Address Off Size ES …
    if (f.size() < 6)
        return std::nullopt;
    const auto address = hex(f[2]), size = hex(f[4]);
    if (!address || !size)
        return std::nullopt;
    return section{f[0], *address, *size};
}

// How a machine's PLT is laid out: the header before the first stub, each stub's size, and
// a GOT slot's (the stub for GOT slot 3 + i is stub i). With .plt.sec (x86_64 with CET) the
// stubs called are there, headerless.
struct plt_layout {
    std::uint64_t header, entry, slot;
};
std::optional<plt_layout> plt_layout_of(std::uint16_t machine, bool sec) {
    switch (machine) {
    case 62: // x86_64
        return sec ? plt_layout{0, 16, 8} : plt_layout{16, 16, 8};
    case 183: // aarch64
        return plt_layout{32, 16, 8};
    case 40: // arm
        return plt_layout{20, 12, 4};
    case 22: // s390x
        return plt_layout{32, 32, 8};
    default:
        return std::nullopt;
    }
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

namespace {

// A symbol table name without its "@VERSION", demangled whole (parameters and all) when it
// is a C++ name (`cxx`).
std::string demangled(std::string_view raw, bool& cxx) {
    cxx = false;
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
    cxx = true;
    return d.get();
}

// perf's name with the parameter list it leaves out: "ns::f(int) const".
std::string signature_of(std::string_view raw) {
    bool cxx = false;
    const auto full = demangled(raw, cxx);
    if (!cxx)
        return full;
    const auto bare = strip_parameters(full);
    return strip_return_type(bare) + full.substr(bare.size());
}

} // namespace

std::string perf_symbol_name(std::string_view raw) {
    bool cxx = false;
    auto name = demangled(raw, cxx);
    return cxx ? strip_return_type(strip_parameters(name)) : name;
}

void readelf_text::append(std::string_view block) {
    for (std::size_t pos = 0; pos < block.size();) {
        if (skipping_ && partial_.empty()) {
            // A relocation section that names no function (a large PIE's relative ones are
            // millions of lines): passed over at memchr's pace, up to the blank line that
            // ends it, instead of line by line.
            if (in_skipped_line_) {
                const auto nl = block.find('\n', pos);
                if (nl == std::string_view::npos)
                    return;
                in_skipped_line_ = false;
                pos = nl + 1;
                continue;
            }
            if (block[pos] == '\n') {
                line({}); // the blank line: the section ends
                ++pos;
                continue;
            }
            if (const auto end = block.find("\n\n", pos); end != std::string_view::npos) {
                pos = end + 1;
                continue;
            }
            in_skipped_line_ = block.back() != '\n';
            return;
        }
        const auto nl = block.find('\n', pos);
        if (nl == std::string_view::npos) {
            partial_.append(block.substr(pos));
            return;
        }
        if (partial_.empty()) {
            line(block.substr(pos, nl - pos));
        } else {
            partial_.append(block.substr(pos, nl - pos));
            const std::string whole = std::exchange(partial_, {});
            line(whole);
        }
        pos = nl + 1;
    }
}

void readelf_text::line(std::string_view l) {
    if (l.starts_with("Relocation section "))
        skipping_ = l.find("'.rela.plt'") == std::string_view::npos &&
                    l.find("'.rel.plt'") == std::string_view::npos;
    else if (skipping_ && l.empty())
        skipping_ = false; // a relocation section ends at a blank line
    if (skipping_)
        return;
    text_.append(l);
    text_.push_back('\n');
}

std::string readelf_text::finish() {
    if (!partial_.empty()) {
        const std::string last = std::exchange(partial_, {});
        line(last);
    }
    return std::exchange(text_, {});
}

elf_symbols elf_symbols::parse_readelf(std::string_view text, std::uint16_t machine) {
    const bool thumb = machine == 40;
    elf_symbols out;
    // Each function as listed, with its symbol table name and, for a local one, the file
    // whose FILE symbol it follows.
    struct listed {
        entry e;
        std::string_view raw, file;
    };
    std::vector<listed> v;
    std::string_view file; // the last FILE symbol's name in the table being read
    std::optional<section> plt, plt_sec, got_plt;
    bool in_plt_relocations = false;
    std::vector<std::pair<std::uint64_t, std::string_view>> jump_slots; // GOT slot, name
    std::size_t pos = 0;
    while (pos < text.size()) {
        auto nl = text.find('\n', pos);
        if (nl == std::string_view::npos)
            nl = text.size();
        const auto line = text.substr(pos, nl - pos);
        pos = nl + 1;
        if (const auto s = section_line(line)) {
            if (s->name == ".plt")
                plt = s;
            else if (s->name == ".plt.sec")
                plt_sec = s;
            else if (s->name == ".got.plt")
                got_plt = s;
            continue;
        }
        if (line.starts_with("Symbol table ")) {
            in_plt_relocations = false;
            file = {};
            continue;
        }
        if (line.starts_with("Relocation section ")) {
            in_plt_relocations = line.find("'.rela.plt'") != std::string_view::npos ||
                                 line.find("'.rel.plt'") != std::string_view::npos;
            continue;
        }
        const auto f = fields(line);
        if (in_plt_relocations && !f.empty() && !f[0].ends_with(':')) {
            // Offset Info Type Sym.Value Sym.Name [+ Addend]: every one takes a stub.
            if (f.size() >= 3 && f[0] != "Offset")
                if (const auto slot = hex(f[0]))
                    jump_slots.emplace_back(*slot, f.size() >= 5 && (f[2].ends_with("JUMP_SLOT") ||
                                                                     f[2].ends_with("JMP_SLOT"))
                                                       ? f[4]
                                                       : std::string_view());
            continue;
        }
        // Num: Value Size Type Bind Vis Ndx Name
        if (f.size() >= 7 && f[0].ends_with(':') && f[3] == "FILE") {
            file = f.size() >= 8 ? f[7] : std::string_view(); // nameless: the linker's own
            continue;
        }
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
        v.push_back(
            {{address, size, std::move(name), rank}, f[7], rank == 2 ? file : std::string_view()});
    }
    // The PLT's stubs, "foo@plt" as perf names them: the stub of each jump slot, found by
    // the slot's place in .got.plt (else by the relocations' order).
    const auto stubs = plt_sec ? plt_sec : plt;
    if (const auto layout = plt_layout_of(machine, plt_sec.has_value()); layout && stubs)
        for (std::size_t k = 0; k < jump_slots.size(); ++k) {
            const auto& [slot, raw] = jump_slots[k];
            std::uint64_t index = k;
            if (got_plt && slot >= got_plt->address + 3 * layout->slot &&
                slot < got_plt->address + got_plt->size)
                index = (slot - got_plt->address) / layout->slot - 3;
            const auto at = stubs->address + layout->header + index * layout->entry;
            if (raw.empty() || at + layout->entry > stubs->address + stubs->size)
                continue;
            auto name = perf_symbol_name(raw) + "@plt";
            out.by_name_.try_emplace(name, at);
            v.push_back({{at, layout->entry, std::move(name), 3}, {}, {}});
        }
    // One entry per address: the alias perf would show (global before weak before local,
    // then the first listed), with the largest size any alias gives.
    std::stable_sort(v.begin(), v.end(), [](const listed& a, const listed& b) {
        return a.e.start != b.e.start ? a.e.start < b.e.start : a.e.rank < b.e.rank;
    });
    std::size_t kept = 0;
    for (std::size_t i = 0; i < v.size(); ++i) {
        if (kept && v[kept - 1].e.start == v[i].e.start) {
            v[kept - 1].e.size = std::max(v[kept - 1].e.size, v[i].e.size);
            continue;
        }
        if (kept != i)
            v[kept] = std::move(v[i]);
        ++kept;
    }
    v.resize(kept);
    // Functions sharing perf's name: each gets the name of its file where no other of them
    // has that file, else its parameters where no other has those; one told apart by neither
    // keeps perf's name.
    std::unordered_map<std::string_view, std::vector<std::uint32_t>> by_perf_name;
    for (std::size_t i = 0; i < v.size(); ++i)
        by_perf_name[v[i].e.name].push_back(static_cast<std::uint32_t>(i));
    std::vector<std::pair<std::uint32_t, std::string>> renamed;
    for (const auto& [name, ids] : by_perf_name) {
        if (ids.size() < 2)
            continue;
        out.shared_.emplace(name);
        std::vector<std::string> signatures;
        std::unordered_map<std::string_view, std::size_t> files, signed_alike;
        for (const auto i : ids) {
            signatures.push_back(signature_of(v[i].raw));
            ++files[v[i].file];
        }
        for (const auto& sig : signatures)
            ++signed_alike[sig];
        std::size_t own = 0;
        for (std::size_t k = 0; k < ids.size(); ++k) {
            const auto& l = v[ids[k]];
            if (!l.file.empty() && files[l.file] == 1)
                renamed.emplace_back(ids[k], std::string(name) + " (" + std::string(l.file) + ")");
            else if (signatures[k] != name && signed_alike[signatures[k]] == 1)
                renamed.emplace_back(ids[k], signatures[k]);
            else
                continue;
            ++own;
        }
        if (own)
            out.same_named_.emplace(std::string(name), ids);
    }
    for (auto& [i, name] : renamed) {
        out.by_name_.try_emplace(name, v[i].e.start);
        v[i].e.name = std::move(name);
    }
    out.by_address_.reserve(v.size());
    for (auto& l : v)
        out.by_address_.push_back(std::move(l.e));
    // The heap behind each container: strings past the small-string buffer, hash nodes (a
    // next pointer and the cached hash) and bucket arrays.
    const auto heap = [](const std::string& s) { return s.capacity() > 15 ? s.capacity() + 1 : 0; };
    constexpr std::size_t node = 2 * sizeof(void*);
    std::size_t bytes = out.by_address_.capacity() * sizeof(entry);
    for (const auto& e : out.by_address_)
        bytes += heap(e.name);
    bytes += out.by_name_.bucket_count() * sizeof(void*);
    for (const auto& [name, address] : out.by_name_)
        bytes += node + sizeof(std::string) + sizeof address + heap(name);
    bytes += out.same_named_.bucket_count() * sizeof(void*);
    for (const auto& [name, ids] : out.same_named_)
        bytes += node + sizeof(std::string) + sizeof ids + heap(name) + ids.capacity() * 4;
    bytes += out.shared_.bucket_count() * sizeof(void*);
    for (const auto& name : out.shared_)
        bytes += node + sizeof(std::string) + heap(name);
    out.bytes_ = bytes;
    return out;
}

std::optional<std::uint64_t> elf_symbols::alone(std::string_view perf_name) const {
    const std::string name(perf_name);
    const auto named = by_name_.find(name);
    if (named == by_name_.end() || shared_.count(name))
        return std::nullopt;
    const auto it = std::lower_bound(by_address_.begin(), by_address_.end(), named->second,
                                     [](const entry& e, std::uint64_t a) { return e.start < a; });
    if (it == by_address_.end() || it->start != named->second || it->name != name || it->rank == 3)
        return std::nullopt;
    return it->start;
}

std::vector<elf_symbols::function> elf_symbols::same_named(std::string_view perf_name) const {
    std::vector<function> out;
    if (const auto it = same_named_.find(std::string(perf_name)); it != same_named_.end())
        for (const auto i : it->second)
            out.push_back({by_address_[i].name, by_address_[i].start});
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
