#include "protocol/pairing.hpp"

#include <sys/random.h>

#include <cerrno>
#include <system_error>

namespace protocol {

std::string generate_pairing_code() {
    unsigned char bytes[pairing_code_bytes];
    std::size_t got = 0;
    while (got < sizeof bytes) {
        const ssize_t n = ::getrandom(bytes + got, sizeof bytes - got, 0);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            throw std::system_error(errno, std::generic_category(), "getrandom");
        }
        got += static_cast<std::size_t>(n);
    }
    static constexpr char hex[] = "0123456789abcdef";
    std::string code;
    code.reserve(2 * sizeof bytes);
    for (unsigned char b : bytes) {
        code.push_back(hex[b >> 4]);
        code.push_back(hex[b & 0xF]);
    }
    return code;
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
