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

// A pairing code a person reads off one screen and types on another, perhaps over a serial
// console: 16 characters from 32 unambiguous ones (no 0/o, 1/l), 80 bits, in groups of four
// ("k7mq-x3vd-9hwt-pe2c"). Throws std::system_error like generate_pairing_code.
std::string generate_typeable_code();

// Codes compare without case, dashes and spaces: "K7MQ X3VD…" is "k7mq-x3vd-…".
std::string normalize_code(std::string_view code);
bool code_matches(std::string_view expected, std::string_view presented);

// Roughly how many bits a guesser must search for `code` (normalized): its length times the
// bits of the character classes it uses. Human-chosen codes below min_code_bits are refused.
inline constexpr double min_code_bits = 40;
double code_strength_bits(std::string_view code);

} // namespace protocol
