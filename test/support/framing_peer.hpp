// Test helper: the collector's side of the wire on a loopback socket, in plain POSIX so the
// tests do not depend on the code under test for their I/O. Every call has a deadline.
#pragma once

#include "protocol/frame.hpp"
#include "protocol/messages.hpp"

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>

namespace test_support {

// A TCP socket connected to 127.0.0.1:port, or -1.
int connect_loopback(std::uint16_t port);

class listener {
public:
    explicit listener(std::uint16_t port = 0); // 127.0.0.1; 0: an ephemeral port
    ~listener();
    std::uint16_t port() const { return port_; }
    // Accepted socket fd, or -1 after `timeout`.
    int accept(std::chrono::milliseconds timeout);

private:
    int fd_ = -1;
    std::uint16_t port_ = 0;
};

class framing_peer {
public:
    explicit framing_peer(int fd);
    static std::optional<framing_peer> connect(std::uint16_t port);
    framing_peer(framing_peer&&) noexcept;
    ~framing_peer();

    void send(protocol::frame_flag flag, const std::string& payload);
    void send_raw(std::string_view bytes);
    // Next frame within `timeout`; nullopt on timeout, EOF or a decode error.
    std::optional<protocol::frame> next(std::chrono::milliseconds timeout);
    // Next frame of `flag` (others are dropped), within `timeout`.
    std::optional<protocol::frame> next_of(protocol::frame_flag flag,
                                           std::chrono::milliseconds timeout);
    // Sends a command and waits for the response with the same id; other frames go to
    // `on_other` when given, else are dropped.
    std::optional<protocol::command_response>
    command(const std::string& cmd, const std::string& args_json = "{}",
            std::chrono::milliseconds timeout = std::chrono::seconds(10),
            const std::function<void(const protocol::frame&)>& on_other = {});
    bool closed() const { return closed_; }

private:
    int fd_;
    protocol::frame_decoder decoder_{protocol::collector_max_frame};
    bool closed_ = false;
    int next_id_ = 1;
};

} // namespace test_support
