// Test helper: waits, bounded, for the collector's API to answer what a test expects.
#pragma once

#include "support/http_client.hpp"

#include <boost/json/parse.hpp>

#include <chrono>
#include <string>
#include <string_view>
#include <thread>

namespace test_support {

// Polls GET `target` on 127.0.0.1:`port` every 250 ms until `pred(answer)` holds or `timeout`
// passes; returns the last answer (null if none parsed).
template <class Pred>
boost::json::value poll_json(std::uint16_t port, const std::string& target,
                             std::chrono::milliseconds timeout, Pred pred) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    boost::json::value v;
    while (std::chrono::steady_clock::now() < deadline) {
        const auto r = http_call(port, "GET", target);
        if (r.status == 200) {
            boost::json::parse_options deep;
            deep.max_depth = 4096; // flame graphs nest deeply
            v = boost::json::parse(r.body, {}, deep);
            if (pred(v))
                return v;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(250));
    }
    return v;
}

// Whether a functions answer ({functions:[{name,…}]}) names `fn`.
inline bool names_function(const boost::json::value& functions, std::string_view fn) {
    if (!functions.is_object() || !functions.as_object().contains("functions"))
        return false;
    for (const auto& r : functions.at("functions").as_array())
        if (r.at("name").as_string() == fn)
            return true;
    return false;
}

} // namespace test_support
