// A binary's function symbols, keyed the way perf script names them, so that a sample's
// "sym+0xoff" becomes an address in the binary's own address space (symbol value + offset).
// That is right for PIE executables and shared libraries alike, whatever their load address.
//
// Input is `readelf -SrsW BIN` text (a toolchain prefix may pick a cross readelf): the
// symbols,
//
//   Num:    Value          Size Type    Bind   Vis      Ndx Name
//    14: 0000000000001377    46 FUNC    LOCAL  DEFAULT   15 _ZN12_GLOBAL__N_113recursive_fibEi
//
// and, from the section headers and the PLT's relocations, a "foo@plt" symbol for each PLT
// stub, as perf synthesizes them (the stubs have no symbols of their own).
//
// perf prints C++ names demangled without their parameter lists, so names are demangled and
// the trailing "(...)" (with any cv/ref qualifiers) is cut off.
//
// Several functions may share perf's name in one binary: static functions of several files
// (`init`, `parse`), C++ overloads. perf shows them as one; here each keeps a name of its own
// where the symbol table tells them apart — "work (a.c)", by the FILE symbol its local
// symbols follow, else "f(int)", by its parameters — and the parser tells which one a frame
// is from its start address (same_named).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace collector {

// "ns::f(int) const" -> "ns::f"; "(anonymous namespace)::g(int)" -> "(anonymous namespace)::g".
std::string strip_parameters(std::string_view demangled);

// "void std::sort<int*>" -> "std::sort<int*>": a function template's return type dropped.
std::string strip_return_type(std::string_view demangled);

// The name perf script shows for a symbol table name (mangled or not, "@VERSION" dropped).
std::string perf_symbol_name(std::string_view raw);

// `readelf -SrsW` output as it streams in, in any pieces, keeping what parse_readelf reads:
// every line but those of relocation sections other than the PLT's (a large PIE has millions
// of relative relocations — hundreds of MB of text — and none names a function).
class readelf_text {
public:
    void append(std::string_view block);
    std::size_t size() const noexcept { return text_.size() + partial_.size(); }
    // The text kept, a last line without '\n' included.
    std::string finish();

private:
    void line(std::string_view l);
    std::string text_, partial_;
    bool skipping_ = false;
    bool in_skipped_line_ = false; // a skipped line goes on in the next block
};

class elf_symbols {
public:
    // `machine`: the file's e_machine. For ARM (40) function symbols have bit 0 set for
    // Thumb code (cleared, as perf does); it also says how PLT stubs are laid out (x86_64,
    // aarch64, arm, s390x; other machines get no stub names).
    static elf_symbols parse_readelf(std::string_view text, std::uint16_t machine = 62);

    // The start of the function named so (perf's name, or the name of its own given to one
    // of several sharing perf's name; for a shared name, the first listed).
    std::optional<std::uint64_t> address_of(std::string_view perf_name) const;
    // How many bytes the function at `start` spans: its symbol's size, or up to the next
    // symbol when it has none; 0 when no symbol starts there.
    std::uint64_t extent_at(std::uint64_t start) const;
    std::size_t size() const noexcept { return by_address_.size(); }
    // About what the table holds in memory, in bytes (counted once, as it is made).
    std::size_t memory_bytes() const noexcept { return bytes_; }

    // The function holding `address` (its name as perf shows it, and its start): the one
    // whose [start, start + size) holds it, or one of no size starting at most a page below
    // it (perf's guess for a symbol without a size).
    struct function {
        std::string_view name;
        std::uint64_t start = 0;
    };
    std::optional<function> at(std::uint64_t address) const;

    // Whether some functions here share perf's name and are told apart by names of their own.
    bool has_same_named() const noexcept { return !same_named_.empty(); }
    // The start of the one function perf names `perf_name`: none when several share the name
    // (told apart or not), for a PLT stub, or for a name only an alias has.
    std::optional<std::uint64_t> alone(std::string_view perf_name) const;
    // The functions perf names `perf_name` when several do and they are told apart: each
    // one's start and its own name ("work (a.c)"). Empty for a name only one function has.
    std::vector<function> same_named(std::string_view perf_name) const;

private:
    struct entry {
        std::uint64_t start = 0, size = 0;
        std::string name; // perf's, or its own where several share perf's
        int rank = 0;     // among aliases at one address: GLOBAL 0, WEAK 1, LOCAL 2, PLT 3
    };
    std::unordered_map<std::string, std::uint64_t> by_name_;
    // perf's name -> the entries (by_address_ indices) that share it and have names of their own.
    std::unordered_map<std::string, std::vector<std::uint32_t>> same_named_;
    std::unordered_set<std::string> shared_; // perf's names several functions have
    std::vector<entry> by_address_;          // by start; one entry per address
    std::size_t bytes_ = 0;
};

} // namespace collector
