#include "protocol/update.hpp"

#include <optional>

namespace protocol {

std::string update_signed_text(const update_offer& o) {
    return "perfwire-agent-update-v2\narch=" + o.arch + "\nversion=" + o.version +
           "\nsize=" + std::to_string(o.size) + "\nsha256=" + o.sha256 + "\n";
}

bool update_version(std::string_view version) {
    if (version.empty() || version.size() > 64)
        return false;
    std::size_t digits = 0;
    for (const char c : version) {
        if (c == '.') {
            if (digits == 0)
                return false; // an empty part
            digits = 0;
        } else if (c >= '0' && c <= '9') {
            if (++digits > 18)
                return false;
        } else {
            return false;
        }
    }
    return digits > 0;
}

bool later_version(std::string_view candidate, std::string_view current) {
    if (candidate.empty())
        return false;
    auto next = [](std::string_view& s) {
        const auto dot = s.find('.');
        const auto part = s.substr(0, dot);
        s = dot == std::string_view::npos ? std::string_view() : s.substr(dot + 1);
        return part;
    };
    auto number = [](std::string_view p) -> std::optional<unsigned long long> {
        if (p.empty() || p.size() > 18 || p.find_first_not_of("0123456789") != p.npos)
            return std::nullopt;
        return std::stoull(std::string(p));
    };
    while (!candidate.empty() || !current.empty()) {
        const auto a = next(candidate), b = next(current);
        const auto na = number(a.empty() ? "0" : a), nb = number(b.empty() ? "0" : b);
        if (na && nb) {
            if (*na != *nb)
                return *na > *nb;
        } else if (a != b) {
            return a > b;
        }
    }
    return false;
}

} // namespace protocol
