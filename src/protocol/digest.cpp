#include "protocol/digest.hpp"

#include <openssl/evp.h>

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
    std::string out;
    out.reserve((bytes.size() + 2) / 3 * 4);
    std::size_t i = 0;
    auto at = [&](std::size_t j) { return static_cast<std::uint8_t>(bytes[j]); };
    for (; i + 3 <= bytes.size(); i += 3) {
        const std::uint32_t v = at(i) << 16 | at(i + 1) << 8 | at(i + 2);
        for (int s = 18; s >= 0; s -= 6)
            out.push_back(alphabet[(v >> s) & 63]);
    }
    if (const auto rest = bytes.size() - i; rest > 0) {
        const std::uint32_t v = at(i) << 16 | (rest == 2 ? at(i + 1) << 8 : 0);
        out.push_back(alphabet[(v >> 18) & 63]);
        out.push_back(alphabet[(v >> 12) & 63]);
        out.push_back(rest == 2 ? alphabet[(v >> 6) & 63] : '=');
        out.push_back('=');
    }
    return out;
}

std::optional<std::string> base64_decode(std::string_view text) {
    if (text.size() % 4 != 0)
        return std::nullopt;
    auto value = [](char c) -> int {
        if (c >= 'A' && c <= 'Z')
            return c - 'A';
        if (c >= 'a' && c <= 'z')
            return c - 'a' + 26;
        if (c >= '0' && c <= '9')
            return c - '0' + 52;
        return c == '+' ? 62 : c == '/' ? 63 : -1;
    };
    std::string out;
    out.reserve(text.size() / 4 * 3);
    for (std::size_t i = 0; i < text.size(); i += 4) {
        const bool last = i + 4 == text.size();
        const int pad = last ? (text[i + 3] == '=') + (text[i + 2] == '=') : 0;
        if (pad == 1 && text[i + 2] == '=')
            return std::nullopt; // "x=y=" is not padding
        std::uint32_t v = 0;
        for (int j = 0; j < 4 - pad; ++j) {
            const int d = value(text[i + j]);
            if (d < 0)
                return std::nullopt;
            v = v << 6 | static_cast<std::uint32_t>(d);
        }
        v <<= 6 * pad;
        out.push_back(static_cast<char>(v >> 16));
        if (pad < 2)
            out.push_back(static_cast<char>(v >> 8 & 0xff));
        if (pad < 1)
            out.push_back(static_cast<char>(v & 0xff));
        // Bits a canonical encoder leaves zero must be zero.
        if ((pad == 1 && (v & 0xff) != 0) || (pad == 2 && (v & 0xffff) != 0))
            return std::nullopt;
    }
    return out;
}

} // namespace protocol
