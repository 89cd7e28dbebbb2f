// Test helper: a flaky link between an agent and a collector on loopback, in plain POSIX. It
// listens on an ephemeral port and relays each connection to 127.0.0.1:`to`; the test breaks
// the link as a lost NAT mapping, a Wi-Fi roam or a collector restart would: reset() ends every
// connection at once (RST both ways), refuse_for() then turns new connections away (reset as
// they come) for a while. A thread per relayed connection; everything ends with the relay.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace test_support {

class relay {
public:
    explicit relay(std::uint16_t to);
    ~relay();
    relay(const relay&) = delete;
    relay& operator=(const relay&) = delete;

    std::uint16_t port() const { return port_; }
    // Every connection open now ends with a reset, both sides at once.
    void reset();
    // New connections are reset as they come until `d` has passed (from now).
    void refuse_for(std::chrono::milliseconds d);
    // New connections go to 127.0.0.1:`to` from now (a collector restarted on another port).
    void retarget(std::uint16_t to) { to_ = to; }
    // Connections relayed so far (accepted and connected through), and turned away.
    std::size_t relayed() const { return relayed_.load(); }
    std::size_t refused() const { return refused_.load(); }
    // Bytes taken from the agent's side for the collector, and back (counted before they
    // are passed on).
    std::uint64_t bytes_up() const { return up_.load(); }
    std::uint64_t bytes_down() const { return down_.load(); }

private:
    struct pair {
        int a = -1, b = -1; // the agent's side, the collector's
        std::thread pump;
    };
    void accept_loop();
    void pump(pair& p);

    std::atomic<std::uint16_t> to_;
    int listen_fd_ = -1;
    int stop_pipe_[2] = {-1, -1};
    std::uint16_t port_ = 0;
    std::thread acceptor_;
    std::mutex m_;
    std::vector<std::unique_ptr<pair>> pairs_;
    std::chrono::steady_clock::time_point refuse_until_{};
    std::atomic<bool> stopping_{false};
    std::atomic<std::size_t> relayed_{0}, refused_{0};
    std::atomic<std::uint64_t> up_{0}, down_{0};
};

} // namespace test_support
