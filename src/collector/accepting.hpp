// The listeners' accept, inside the connection budget (connections.hpp): a connection past
// its kind's cap is closed at once (the peer sees the close, the kernel's queue drains), and
// an accept that fails for want of descriptors or memory waits before the next try instead of
// spinning. Each condition is logged when it begins and when it ends, never per connection.
// Included by the two accept loops only (it brings Asio).
#pragma once

#include "collector/connections.hpp"

#include <boost/asio/awaitable.hpp>
#include <boost/asio/ip/tcp.hpp>

#include <functional>
#include <optional>
#include <string>
#include <utility>

namespace collector {

class budgeted_acceptor {
public:
    budgeted_acceptor(boost::asio::ip::tcp::acceptor& acceptor, connection_budget& budget,
                      connection_budget::kind kind, std::string name);

    // Looks at a connection before it takes a slot: nullopt closes it, else what it does when
    // the unproven agents' slots are all taken.
    using screen = std::function<std::optional<connection_budget::when_full>(
        const boost::asio::ip::tcp::socket&)>;

    // The next connection within the budget with its slot; nullopt once the acceptor is
    // closed (the collector stops). Without a screen, every connection is taken if there is
    // room.
    boost::asio::awaitable<
        std::optional<std::pair<boost::asio::ip::tcp::socket, connection_budget::slot>>>
    next(const screen& look = {});

private:
    boost::asio::ip::tcp::acceptor& acceptor_;
    connection_budget& budget_;
    connection_budget::kind kind_;
    std::string name_;
    accept_backoff backoff_;
    std::uint64_t refused_ = 0; // at the cap since the last "accepting again"
    // When the cap was last said to be reached: churn at the cap (a connection ends, the next
    // is let in, the one after is refused) says so once in `cap_quiet`, not at every turn.
    std::optional<std::chrono::steady_clock::time_point> cap_said_;
    bool cap_told_ = false; // this episode's "at the cap" line was written
    static constexpr std::chrono::seconds cap_quiet{10};
};

} // namespace collector
