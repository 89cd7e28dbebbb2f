// SHA-256 (OpenSSL's) and base64 (RFC 4648): what an agent update needs to check the bytes it
// received.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

struct evp_md_ctx_st;

namespace protocol {

class sha256 {
public:
    sha256();
    ~sha256();
    sha256(const sha256&) = delete;
    sha256& operator=(const sha256&) = delete;
    void update(std::string_view bytes) noexcept;
    // The digest; the object is spent afterwards.
    std::array<std::uint8_t, 32> finish() noexcept;
    std::string finish_hex();

private:
    evp_md_ctx_st* ctx_;
};

std::string sha256_hex(std::string_view bytes);

std::string base64_encode(std::string_view bytes);
// Nothing if `text` is not canonical padded base64.
std::optional<std::string> base64_decode(std::string_view text);

} // namespace protocol
