// A binary's GNU build-id: the identity the agent reports for every file the profiled process
// has mapped, and the collector compares with its local copy before trusting that copy's lines.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace protocol {

// The NT_GNU_BUILD_ID note of an ELF file (32- or 64-bit, either byte order), as lowercase
// hex; nullopt when the file cannot be read, is not ELF, or has no such note. Reads only
// the headers and note segments, each bounded, so a hostile file costs little.
std::optional<std::string> read_build_id(const std::string& path);

// The same on an ELF image already in memory (tests, fuzzing).
std::optional<std::string> parse_build_id(std::string_view image);

// What the collector needs of a file it may take symbols from.
struct elf_segment {
    std::uint64_t offset = 0, vaddr = 0, filesz = 0; // a PT_LOAD: file bytes at vaddr
    std::uint64_t memsz = 0, align = 0;
};
struct elf_facts {
    std::optional<std::string> build_id;
    std::vector<elf_segment> loads; // in header order
    bool symtab = false;            // a .symtab with contents (not stripped)
    std::string debuglink;          // .gnu_debuglink's file name, when there is one
    bool text_in_file = true;       // false: .text has no bytes here (a separate debug file)
    std::uint16_t machine = 0;      // e_machine (40: ARM, whose Thumb symbols have bit 0 set)
};
// nullopt when the file cannot be read or is not ELF. Headers and the few sections read are
// bounded, like read_build_id.
std::optional<elf_facts> read_elf_facts(const std::string& path);

// perf script prints an address in a module as a file offset (the mapping's page offset plus
// the distance into it); symbol tables and DWARF use virtual addresses. nullopt when no
// PT_LOAD holds that offset.
std::optional<std::uint64_t> file_offset_to_vaddr(const std::vector<elf_segment>& loads,
                                                  std::uint64_t offset);

// A separate debug file (objcopy --only-keep-debug) keeps the load segments' addresses and
// sizes but not where their bytes were in the binary. Whether `loads` are such, and the file
// offsets the binary had, laid out as linkers do: each segment at the first offset past the
// one before that is congruent to its address modulo its alignment (GNU ld and lld alike).
bool offsets_lost(const elf_facts& facts);
std::vector<elf_segment> rebuild_offsets(std::vector<elf_segment> loads);

} // namespace protocol
