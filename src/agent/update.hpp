// An agent update received over the link (commands update, update_data, update_apply): the
// collector offers a build for this agent's compile-time architecture, sends it in pieces, and
// the agent writes it to a file beside its own executable (.<name>.update-<pid>-<n>), then
// renames it over itself. It is taken only when the offer's Ed25519 signature, checked with
// the public key the agent was given (--update-pubkey), covers its architecture, version, size
// and sha256 (protocol/update.hpp) — or, without a public key, only over a TLS link to a
// collector whose key the agent pinned (--tls-pin); the version must be later than the agent's
// own, and the bytes received have that size and sha256: all of it is checked before any byte
// of the build is run. Running the new build's --version and re-executing are the session's
// part. A receiver that is dropped before install() removes its file.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <variant>

#include "protocol/digest.hpp"
#include "protocol/update.hpp"

namespace agent {

using protocol::update_offer;

inline constexpr std::uint64_t max_update_size = std::uint64_t{64} << 20;
// Decoded bytes per update_data: as base64 in a JSON command, well inside the agent's 1 MiB
// frame limit.
inline constexpr std::size_t max_update_piece = std::size_t{384} << 10;

class update_receiver {
public:
    // A receiver with its file created beside `self`, or why the offer is refused.
    // `public_key`: the --update-pubkey (the signature must be its); without one, `pinned`
    // says the link is TLS to the collector this agent pinned (else every offer is refused).
    // `running`: this agent's own version.
    static std::variant<std::unique_ptr<update_receiver>, std::string>
    begin(const update_offer& offer, const std::filesystem::path& self,
          const std::optional<std::string>& public_key, bool pinned, std::string_view running);

    update_receiver(const update_receiver&) = delete;
    update_receiver& operator=(const update_receiver&) = delete;
    ~update_receiver();

    // Pieces come in order: `offset` is the number of bytes received so far. "" or the error.
    std::string write(std::uint64_t offset, std::string_view bytes);
    std::uint64_t received() const noexcept { return received_; }
    // All bytes there with the offered (signed) sha256, the file closed and executable: "" or
    // the error.
    std::string finish();
    const std::filesystem::path& file() const noexcept { return file_; }
    const update_offer& offer() const noexcept { return offer_; }
    // Renames the file over `self` (atomic: the old executable stays whole until then).
    std::string install();

private:
    update_receiver(update_offer offer, std::filesystem::path self, std::filesystem::path file,
                    int fd);
    update_offer offer_;
    std::filesystem::path self_, file_;
    int fd_ = -1;
    protocol::sha256 hash_;
    std::uint64_t received_ = 0;
    bool installed_ = false;
};

// The path of this process's executable (/proc/self/exe), resolved at start-up, before an
// update can replace it.
std::filesystem::path own_executable();

} // namespace agent
