// Who may open an agent connection, decided at accept before a byte is read, and the accept
// loop that asks. Connections per source address fill a bucket of `burst` that refills at
// `per_second`: a flood of connect-hello-close from one address is refused, and where agents
// enroll, a second, larger bucket lets a lab behind one NAT in "on probation" (it must then
// present a valid enrollment token). The buckets stay bounded however many addresses come.
// Included by the collector's start and the tests only (it brings Asio).
#pragma once

#include "collector/connections.hpp"

#include <boost/asio/awaitable.hpp>
#include <boost/asio/ip/tcp.hpp>

#include <chrono>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace collector {
struct app_context;
}

namespace collector::agents {

using clock = std::chrono::steady_clock;

class token_buckets {
public:
    enum class verdict { admit, refuse, refuse_first };

    token_buckets(double burst, double per_second)
        : burst_(burst)
        , per_second_(per_second) {}

    // One connection from `address` at `now`: admitted while its bucket holds a token; the
    // first refusal of a run of them says so (refuse_first), to be logged once.
    verdict check(std::string_view address, clock::time_point now);
    std::size_t addresses() const noexcept { return buckets_.size(); }
    static constexpr std::size_t max_addresses = 4096;

private:
    struct bucket {
        double tokens;
        clock::time_point at;
        bool refusing;
    };
    double level(const bucket& b, clock::time_point now) const;

    const double burst_, per_second_;
    std::unordered_map<std::string, bucket> buckets_;
};

// What becomes of a connection from an address.
struct admission_verdict {
    // Closed at once (nullopt), or what it does when every unproven slot is taken.
    std::optional<connection_budget::when_full> when_full;
    bool probation = false; // admitted past its address's limit: must enroll, logs nothing
    // Said once when an address starts being refused (by the first limit, then the second).
    std::vector<std::string> log_lines;
};

// 20 connections from an address at once, then 2 a second; where agents enroll, up to 256
// more at once, then 20 a second, on probation. Only a connection within its address's first
// limit may take the oldest stranger's slot (evict_oldest).
class admission {
public:
    explicit admission(bool enrolls)
        : enrolls_(enrolls) {}
    admission_verdict screen(std::string_view address, clock::time_point now);

private:
    bool enrolls_;
    token_buckets gate_{20, 2}, probation_{256, 20};
};

// The label of the enrollment token an agent presented (compared in constant time with each
// of `tokens`, pairs of token and label); nullopt when it presented none of them.
std::optional<std::string>
enrolled_as(const std::vector<std::pair<std::string, std::string>>& tokens,
            const std::optional<std::string>& presented);

// Accepts agents until the acceptor closes: each admitted connection gets a target id in the
// registry and an agent_link that serves it.
boost::asio::awaitable<void> accept_agents(app_context& app,
                                           boost::asio::ip::tcp::acceptor& acceptor);

} // namespace collector::agents
