#include "protocol/build_id.hpp"

#include <catch2/catch.hpp>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

using protocol::parse_build_id;
using protocol::read_build_id;

namespace {

// What binutils says the build-id is: "Build ID: <hex>" in `readelf -n`.
std::string readelf_build_id(const std::string& path) {
    std::string out;
    if (FILE* p = ::popen(("readelf -n '" + path + "' 2>/dev/null").c_str(), "r")) {
        char buf[4096];
        while (std::fgets(buf, sizeof buf, p))
            out += buf;
        ::pclose(p);
    }
    const auto at = out.find("Build ID: ");
    if (at == std::string::npos)
        return {};
    const auto start = at + 10;
    return out.substr(start, out.find_first_of("\r\n", start) - start);
}

std::string file_bytes(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

void put(std::string& s, std::size_t at, std::uint64_t v, int size) { // big-endian
    for (int i = 0; i < size; ++i)
        s[at + static_cast<std::size_t>(i)] = static_cast<char>(v >> (8 * (size - 1 - i)));
}

// A 32-bit big-endian ELF with one PT_NOTE segment holding `notes`.
std::string elf32_be(const std::string& notes) {
    std::string e(52 + 32, '\0');
    e.replace(0, 4,
              "\x7f"
              "ELF");
    e[4] = 1; // ELFCLASS32
    e[5] = 2; // ELFDATA2MSB
    e[6] = 1;
    put(e, 28, 52, 4); // e_phoff
    put(e, 42, 32, 2); // e_phentsize
    put(e, 44, 1, 2);  // e_phnum
    put(e, 52, 4, 4);  // p_type PT_NOTE
    put(e, 56, e.size(), 4);
    put(e, 68, notes.size(), 4); // p_filesz
    return e + notes;
}

std::string note(const std::string& name, std::uint32_t type, const std::string& desc) {
    std::string n(12, '\0');
    put(n, 0, name.size() + 1, 4); // with its NUL
    put(n, 4, desc.size(), 4);
    put(n, 8, type, 4);
    n += name;
    n += '\0';
    n.resize((n.size() + 3) & ~std::size_t{3}, '\0');
    n += desc;
    n.resize((n.size() + 3) & ~std::size_t{3}, '\0');
    return n;
}

} // namespace

TEST_CASE("build-ids of real binaries match readelf's", "[protocol][build_id]") {
    for (const std::string& path : {std::string(PERFWIRE_DEMO_BIN), std::string("/bin/ls"),
                                    std::string("/usr/lib/x86_64-linux-gnu/libc.so.6")}) {
        const auto expected = readelf_build_id(path);
        if (expected.empty())
            continue; // not on this machine
        INFO(path);
        const auto id = read_build_id(path);
        REQUIRE(id);
        CHECK(*id == expected);
        CHECK(id->size() >= 16);
    }
    CHECK(read_build_id(PERFWIRE_DEMO_BIN) != read_build_id("/bin/ls"));
}

TEST_CASE("build-id: truncated, foreign and hostile images", "[protocol][build_id]") {
    const std::string image = file_bytes(PERFWIRE_DEMO_BIN).substr(0, 8192);
    const auto full = parse_build_id(image);
    REQUIRE(full);
    // A cut image gives the whole id or nothing, never part of one.
    int found = 0;
    for (std::size_t n = 0; n < image.size(); n += 7)
        if (const auto id = parse_build_id(image.substr(0, n))) {
            CHECK(*id == *full);
            ++found;
        }
    CHECK(found > 0);
    CHECK_FALSE(parse_build_id("#!/bin/sh\necho not elf\n"));
    CHECK_FALSE(read_build_id("/no/such/file"));
    CHECK_FALSE(read_build_id("/proc/self/status"));

    // Other byte order and class, made by hand.
    CHECK(parse_build_id(elf32_be(note("GNU", 3, "\xde\xad\xbe\xef"))) == "deadbeef");
    CHECK(parse_build_id(elf32_be(note("GNU", 1, "\x01\x02") + note("GNU", 3, "\xab\xcd"))) ==
          "abcd");
    CHECK_FALSE(parse_build_id(elf32_be(note("XYZ", 3, "\xde\xad"))));
    std::string huge = note("GNU", 3, "\xde\xad");
    put(huge, 4, 0xfffffff0, 4); // a descriptor far past the segment
    CHECK_FALSE(parse_build_id(elf32_be(huge)));
}
