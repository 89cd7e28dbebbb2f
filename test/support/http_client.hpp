// Test helper: a minimal blocking HTTP/1.1 client over loopback (Connection: close).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace test_support {

struct http_reply {
    int status = 0; // 0: no answer
    std::string headers;
    std::string body;
};

// Sends `Authorization: Bearer` with the token remembered for `port` (see api_port) unless
// `extra_headers` has its own Authorization or Cookie. Gives up when nothing arrives for
// `silence` (a request that legitimately works longer, like pushing an agent build, says so).
http_reply http_call(std::uint16_t port, const std::string& method, const std::string& target,
                     const std::string& body = {},
                     const std::vector<std::string>& extra_headers = {},
                     std::chrono::milliseconds silence = std::chrono::seconds(30));

// What follows "UI and API on http://127.0.0.1:" in a collector's log ("PORT/?code=C"): the
// port. The sign-in link is opened as a browser would (spending C), and the access token its
// cookie carries remembered for later calls to the port.
std::uint16_t api_port(const std::string& log_rest);

// The access token remembered for `port` ("" if none).
std::string api_token(std::uint16_t port);

} // namespace test_support
