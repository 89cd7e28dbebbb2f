// A request target split into decoded path segments and query parameters.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace collector {

struct target_url {
    std::vector<std::string> segments; // decoded path segments, empty ones left out
    std::map<std::string, std::string> query;

    // The parameter's value, or "" when absent.
    const std::string& param(const std::string& key) const;
};

target_url split_target(std::string_view target);
// `s` as one query value or path segment: every byte but letters, digits and -_.~ as %XX.
std::string url_encode(std::string_view s);
// %XX decoded; '+' as a space too when `plus_is_space` (a query's values).
std::string url_decode(std::string_view s, bool plus_is_space = true);
// A numeric parameter: nullopt when absent or empty; `bad` set when present but not a number.
std::optional<double> number_param(const target_url& u, const std::string& key, bool& bad);

} // namespace collector
