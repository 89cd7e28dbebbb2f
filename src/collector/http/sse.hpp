// Server-Sent Events fan-out for GET /api/stream.
//
// Every broadcast is formatted once into a shared immutable buffer; each browser has its own
// queue of those buffers, capped in bytes: a browser with the cap's worth unread when the next
// event comes is dropped (one event larger than the cap still reaches a reader that keeps up) —
// EventSource reconnects by itself — so a slow browser never blocks the collector or other
// browsers. No Beast in this header.
#pragma once

#include <boost/asio/awaitable.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>

#include <deque>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <string_view>

namespace collector {

namespace asio = boost::asio;

class sse_client;

class sse_hub {
public:
    static constexpr std::size_t default_cap = std::size_t{1} << 20;

    explicit sse_hub(std::size_t cap_bytes = default_cap)
        : cap_(cap_bytes) {}

    // "event: <kind>\ndata: <json>\n\n" to every client.
    void broadcast(std::string_view kind, std::string_view data);
    std::size_t clients() const noexcept { return clients_.size(); }
    std::uint64_t dropped() const noexcept { return dropped_; }
    // Bytes a client may have queued before it is dropped.
    void set_cap(std::size_t cap_bytes) noexcept { cap_ = cap_bytes; }

    // Formats one event; data must be one line (JSON is).
    static std::string format(std::string_view kind, std::string_view data);

private:
    friend class sse_client;
    std::size_t cap_;
    std::set<sse_client*> clients_;
    std::uint64_t dropped_ = 0;
};

class sse_client {
public:
    explicit sse_client(sse_hub& hub, asio::any_io_executor ex);
    ~sse_client();

    // Queues an event; false (and the client is marked dropped) when over the cap.
    bool push(std::shared_ptr<const std::string> event);
    bool dropped() const noexcept { return dropped_; }
    // The next buffer to write, waiting up to `heartbeat` (then a comment line).
    asio::awaitable<std::shared_ptr<const std::string>>
    next(std::chrono::steady_clock::duration heartbeat);
    void written(std::size_t bytes) noexcept { queued_ -= bytes; }
    void close();
    // Called once when the client is dropped: ends its connection at once, so a write that
    // waits on a browser that stopped reading ends too and the client is gone.
    std::function<void()> on_drop;

private:
    sse_hub& hub_;
    std::deque<std::shared_ptr<const std::string>> queue_;
    std::size_t queued_ = 0;
    bool dropped_ = false;
    bool closed_ = false;
    asio::steady_timer wake_;
};

} // namespace collector
