#include "protocol/pairing.hpp"

#include <sys/random.h>

#include <cerrno>
#include <cmath>
#include <system_error>

namespace protocol {
namespace {

void random_bytes(unsigned char* out, std::size_t size) {
    std::size_t got = 0;
    while (got < size) {
        const ssize_t n = ::getrandom(out + got, size - got, 0);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            throw std::system_error(errno, std::generic_category(), "getrandom");
        }
        got += static_cast<std::size_t>(n);
    }
}

} // namespace

std::string generate_pairing_code() {
    unsigned char bytes[pairing_code_bytes];
    random_bytes(bytes, sizeof bytes);
    static constexpr char hex[] = "0123456789abcdef";
    std::string code;
    code.reserve(2 * sizeof bytes);
    for (unsigned char b : bytes) {
        code.push_back(hex[b >> 4]);
        code.push_back(hex[b & 0xF]);
    }
    return code;
}

std::string generate_typeable_code() {
    static constexpr char alphabet[] = "23456789abcdefghijkmnpqrstuvwxyz"; // 32: 5 bits each
    unsigned char bytes[16];
    random_bytes(bytes, sizeof bytes);
    std::string code;
    for (std::size_t i = 0; i < sizeof bytes; ++i) {
        if (i && i % 4 == 0)
            code.push_back('-');
        code.push_back(alphabet[bytes[i] & 31]);
    }
    return code;
}

std::string normalize_code(std::string_view code) {
    std::string out;
    for (char c : code)
        if (c != '-' && c != ' ')
            out.push_back(c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c);
    return out;
}

bool code_matches(std::string_view expected, std::string_view presented) {
    return constant_time_equal(normalize_code(expected), normalize_code(presented));
}

double code_strength_bits(std::string_view code) {
    const std::string c = normalize_code(code);
    bool lower = false, digit = false, other = false;
    for (char ch : c) {
        lower |= ch >= 'a' && ch <= 'z';
        digit |= ch >= '0' && ch <= '9';
        other |= !(ch >= 'a' && ch <= 'z') && !(ch >= '0' && ch <= '9');
    }
    const double alphabet = (lower ? 26 : 0) + (digit ? 10 : 0) + (other ? 32 : 0);
    return alphabet > 1 ? static_cast<double>(c.size()) * std::log2(alphabet) : 0;
}

bool constant_time_equal(std::string_view expected, std::string_view presented) noexcept {
    // Walk `presented` in full; compare against `expected` cyclically so a length mismatch
    // costs the same as a content mismatch.
    unsigned diff = expected.size() != presented.size() ? 1U : 0U;
    if (expected.empty())
        return false;
    for (std::size_t i = 0; i < presented.size(); ++i)
        diff |= static_cast<unsigned char>(expected[i % expected.size()]) ^
                static_cast<unsigned char>(presented[i]);
    return diff == 0;
}

} // namespace protocol
