// Test helper: a browser's GET /api/stream read raw from a socket, and the events in it.
#pragma once

#include <chrono>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <poll.h>
#include <unistd.h>

namespace test_support {

// The events the stream's bytes hold so far, as (kind, data), after the HTTP header.
inline std::vector<std::pair<std::string, std::string>> stream_events(const std::string& raw) {
    std::vector<std::pair<std::string, std::string>> out;
    const auto body = raw.find("\r\n\r\n");
    std::size_t at = body == std::string::npos ? raw.size() : body + 4;
    for (auto end = raw.find("\n\n", at); end != std::string::npos;
         at = end + 2, end = raw.find("\n\n", at)) {
        std::string kind, data;
        std::istringstream lines(raw.substr(at, end - at));
        for (std::string line; std::getline(lines, line);) {
            if (line.rfind("event: ", 0) == 0)
                kind = line.substr(7);
            else if (line.rfind("data: ", 0) == 0)
                data += line.substr(6);
        }
        if (!kind.empty())
            out.emplace_back(kind, data);
    }
    return out;
}

// Appends what `fd` sends to `raw` until `done(raw)`, the peer closes, or `timeout`.
template <class Done>
void read_stream(int fd, std::string& raw, std::chrono::milliseconds timeout, Done done) {
    const auto until = std::chrono::steady_clock::now() + timeout;
    while (!done(raw) && std::chrono::steady_clock::now() < until) {
        pollfd p{fd, POLLIN, 0};
        if (::poll(&p, 1, 100) > 0) {
            char buf[16384];
            const ssize_t n = ::read(fd, buf, sizeof buf);
            if (n <= 0)
                return;
            raw.append(buf, static_cast<std::size_t>(n));
        }
    }
}

} // namespace test_support
