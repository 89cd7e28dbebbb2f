// Pairing codes for --listen agents: 16 random bytes from the OS, shown as 32 lowercase hex
// characters, compared in constant time so a timing probe learns nothing about the code.
#pragma once

#include <string>
#include <string_view>

namespace protocol {

inline constexpr std::size_t pairing_code_bytes = 16;

// Throws std::system_error if the OS has no randomness to give (start-up only).
std::string generate_pairing_code();

// Time depends only on the length of `presented`, never on where the strings differ.
bool constant_time_equal(std::string_view expected, std::string_view presented) noexcept;

} // namespace protocol
