// SHA-256 (FIPS 180-4), HMAC-SHA-256 (RFC 2104) and base64 (RFC 4648): what an agent update
// needs to check the bytes it received, without a crypto library on the device.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace protocol {

class sha256 {
public:
    sha256() noexcept;
    void update(std::string_view bytes) noexcept;
    // The digest; the object is spent afterwards.
    std::array<std::uint8_t, 32> finish() noexcept;
    std::string finish_hex();

private:
    void block(const std::uint8_t* p) noexcept;
    std::array<std::uint32_t, 8> h_;
    std::array<std::uint8_t, 64> buf_{};
    std::size_t used_ = 0;
    std::uint64_t total_ = 0;
};

std::string sha256_hex(std::string_view bytes);
// HMAC-SHA-256 of `message` under `key`, as 64 lowercase hex characters.
std::string hmac_sha256_hex(std::string_view key, std::string_view message);

std::string base64_encode(std::string_view bytes);
// Nothing if `text` is not canonical padded base64.
std::optional<std::string> base64_decode(std::string_view text);

} // namespace protocol
