// Agent updates over the link (docs/protocol.md, "Agent updates"): what an offer says, and what
// its signature covers. The collector signs offers with the Ed25519 key of its
// --agent-update-key; an agent given the public key (--update-pubkey) takes one only when the
// signature covers every field that decides what would run: architecture, version, size and
// sha256 of the build. So a peer that knows the pairing code, or holds another device, gets
// nothing run, and a signature of one build cannot be moved to another. An agent without a
// public key takes an unsigned offer only over a TLS link to a collector whose key it pinned.
// The Python agent has the same rules in its own words.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace protocol {

struct update_offer {
    std::string version, arch, sha256; // sha256: 64 lowercase hex
    std::string signature;             // Ed25519, base64 ("": unsigned)
    std::uint64_t size = 0;
};

// The text an offer's signature is made over: one "name=value" line per field after a line
// naming the scheme. Fields are checked to hold no line break before it is made.
std::string update_signed_text(const update_offer& offer);

// Whether `candidate` is a later version than `current`: dotted parts compared in turn, as
// numbers when both are, else as text; a missing part counts as 0 ("0.1" == "0.1.0").
bool later_version(std::string_view candidate, std::string_view current);

// Whether `version` may be offered as an update: dotted numbers ("0.1.0.1"), at most 64
// characters, each number at most 18 digits. Nothing that would compare as text ("0.5.0-rc1"
// would pass for later than "0.5.0"), so a signed offer cannot be replayed as a downgrade.
bool update_version(std::string_view version);

// What an agent's hello says of the updates it takes (hello.updates):
namespace updates {
inline constexpr std::string_view signed_only = "signed"; // signed for its --update-pubkey
inline constexpr std::string_view pinned = "pinned";      // unsigned too, over this pinned TLS link
inline constexpr std::string_view needs_key = "needs-key"; // no public key, no pinned link
inline constexpr std::string_view disabled = "disabled";   // started with --no-update
// An agent that cannot check a signature (a Python without Ed25519) and has no pinned link.
inline constexpr std::string_view cannot_verify = "cannot-verify";
inline constexpr std::string_view needs_pairing = "needs-pairing"; // (older agents' word)
} // namespace updates

} // namespace protocol
