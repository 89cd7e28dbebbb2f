// A binary's GNU build-id: the identity the agent reports for every file the profiled process
// has mapped, and the collector compares with its local copy before trusting that copy's lines.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace protocol {

// The NT_GNU_BUILD_ID note of an ELF file (32- or 64-bit, either byte order), as lowercase
// hex; nullopt when the file cannot be read, is not ELF, or has no such note. Reads only
// the headers and note segments, each bounded, so a hostile file costs little.
std::optional<std::string> read_build_id(const std::string& path);

// The same on an ELF image already in memory (tests, fuzzing).
std::optional<std::string> parse_build_id(std::string_view image);

} // namespace protocol
