#include "protocol/digest.hpp"

#include <openssl/evp.h>

#include <array>
#include <cstdint>
#include <stdexcept>

namespace protocol {
namespace {

constexpr char alphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

} // namespace

sha256::sha256()
    : ctx_(EVP_MD_CTX_new()) {
    if (!ctx_ || EVP_DigestInit_ex(ctx_, EVP_sha256(), nullptr) != 1)
        throw std::runtime_error("SHA-256: OpenSSL cannot start a digest");
}

sha256::~sha256() {
    EVP_MD_CTX_free(ctx_);
}

void sha256::update(std::string_view bytes) noexcept {
    EVP_DigestUpdate(ctx_, bytes.data(), bytes.size());
}

std::array<std::uint8_t, 32> sha256::finish() noexcept {
    std::array<std::uint8_t, 32> out{};
    unsigned int n = 0;
    EVP_DigestFinal_ex(ctx_, out.data(), &n);
    return out;
}

std::string sha256::finish_hex() {
    static constexpr char digits[] = "0123456789abcdef";
    std::string out;
    for (const auto b : finish()) {
        out.push_back(digits[b >> 4]);
        out.push_back(digits[b & 15]);
    }
    return out;
}

std::string sha256_hex(std::string_view bytes) {
    sha256 h;
    h.update(bytes);
    return h.finish_hex();
}

std::string base64_encode(std::string_view bytes) {
    // OpenSSL's encoder: a pushed agent build is tens of megabytes, and the sanitized Debug
    // build of a per-character loop took seconds per megabyte.
    // A block at a time: its length is an int.
    constexpr std::size_t block = 3 << 20;
    std::string out((bytes.size() + 2) / 3 * 4 + 1, '\0');
    std::size_t written = 0;
    for (std::size_t at = 0; at < bytes.size(); at += block) {
        const auto piece = bytes.substr(at, block);
        written += static_cast<std::size_t>(EVP_EncodeBlock(
            reinterpret_cast<unsigned char*>(out.data() + written),
            reinterpret_cast<const unsigned char*>(piece.data()), static_cast<int>(piece.size())));
    }
    out.resize(written);
    return out;
}

std::optional<std::string> base64_decode(std::string_view text) {
    // Strict where OpenSSL's decoder is lenient (spaces, padding bits): canonical text only.
    if (text.size() % 4 != 0)
        return std::nullopt;
    static constexpr auto values = [] {
        std::array<std::int8_t, 256> v{};
        v.fill(-1);
        for (int i = 0; i < 64; ++i)
            v[static_cast<unsigned char>(alphabet[i])] = static_cast<std::int8_t>(i);
        return v;
    }();
    const auto* in = reinterpret_cast<const unsigned char*>(text.data());
    const std::size_t size = text.size();
    const std::size_t pad = size == 0 ? 0 : (in[size - 1] == '=') + (in[size - 2] == '=');
    if (pad == 1 && in[size - 2] == '=')
        return std::nullopt; // "x=y=" is not padding
    std::string out(size / 4 * 3 - pad, '\0');
    auto* o = reinterpret_cast<unsigned char*>(out.data());
    for (std::size_t i = 0, w = 0; i < size; i += 4) {
        const std::size_t digits = i + 4 == size ? 4 - pad : 4;
        std::uint32_t v = 0;
        for (std::size_t j = 0; j < digits; ++j) {
            const int d = values[in[i + j]];
            if (d < 0)
                return std::nullopt;
            v = v << 6 | static_cast<std::uint32_t>(d);
        }
        v <<= 6 * (4 - digits);
        // Bits a canonical encoder leaves zero must be zero.
        if ((digits == 3 && (v & 0xff) != 0) || (digits == 2 && (v & 0xffff) != 0))
            return std::nullopt;
        o[w++] = static_cast<unsigned char>(v >> 16);
        if (digits > 2)
            o[w++] = static_cast<unsigned char>(v >> 8);
        if (digits > 3)
            o[w++] = static_cast<unsigned char>(v);
    }
    return out;
}

} // namespace protocol
