#include "collector/http/target.hpp"

#include <charconv>

namespace collector {

const std::string& target_url::param(const std::string& key) const {
    static const std::string none;
    const auto it = query.find(key);
    return it == query.end() ? none : it->second;
}

std::string url_decode(std::string_view s, bool plus_is_space) {
    std::string out;
    out.reserve(s.size());
    for (std::size_t i = 0; i < s.size(); ++i) {
        if (s[i] == '%' && i + 2 < s.size()) {
            int v = 0;
            const auto [p, ec] = std::from_chars(s.data() + i + 1, s.data() + i + 3, v, 16);
            if (ec == std::errc() && p == s.data() + i + 3) {
                out.push_back(static_cast<char>(v));
                i += 2;
                continue;
            }
        }
        out.push_back(plus_is_space && s[i] == '+' ? ' ' : s[i]);
    }
    return out;
}

std::string url_encode(std::string_view s) {
    static constexpr char hex[] = "0123456789ABCDEF";
    std::string out;
    out.reserve(s.size() * 3 / 2);
    for (const unsigned char c : s) {
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
            c == '-' || c == '_' || c == '.' || c == '~') {
            out += static_cast<char>(c);
        } else {
            out += '%';
            out += hex[c >> 4];
            out += hex[c & 15];
        }
    }
    return out;
}

target_url split_target(std::string_view target) {
    target_url t;
    const auto q = target.find('?');
    std::string_view path = target.substr(0, q);
    while (!path.empty()) {
        const auto slash = path.find('/');
        const auto seg = path.substr(0, slash);
        if (!seg.empty())
            t.segments.push_back(url_decode(seg));
        if (slash == std::string_view::npos)
            break;
        path.remove_prefix(slash + 1);
    }
    if (q != std::string_view::npos) {
        std::string_view qs = target.substr(q + 1);
        while (!qs.empty()) {
            const auto amp = qs.find('&');
            const auto kv = qs.substr(0, amp);
            const auto eq = kv.find('=');
            t.query[url_decode(kv.substr(0, eq))] =
                eq == std::string_view::npos ? std::string() : url_decode(kv.substr(eq + 1));
            if (amp == std::string_view::npos)
                break;
            qs.remove_prefix(amp + 1);
        }
    }
    return t;
}

std::optional<double> number_param(const target_url& u, const std::string& key, bool& bad) {
    const auto it = u.query.find(key);
    if (it == u.query.end() || it->second.empty())
        return std::nullopt;
    double v = 0;
    const auto& s = it->second;
    const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec != std::errc() || p != s.data() + s.size()) {
        bad = true;
        return std::nullopt;
    }
    return v;
}

} // namespace collector
