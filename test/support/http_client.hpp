// Test helper: a minimal blocking HTTP/1.1 client over loopback (Connection: close).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace test_support {

struct http_reply {
    int status = 0; // 0: no answer
    std::string headers;
    std::string body;
};

http_reply http_call(std::uint16_t port, const std::string& method, const std::string& target,
                     const std::string& body = {},
                     const std::vector<std::string>& extra_headers = {});

} // namespace test_support
