#include "support/relay.hpp"

#include "support/framing_peer.hpp"

#include <arpa/inet.h>
#include <cerrno>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdexcept>
#include <sys/socket.h>
#include <unistd.h>

namespace test_support {

namespace {

// Closed with a reset (SO_LINGER 0): the peer reads ECONNRESET, as after a lost mapping.
void abort_socket(int& fd) {
    if (fd < 0)
        return;
    linger l{1, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof l);
    ::close(fd);
    fd = -1;
}

} // namespace

relay::relay(std::uint16_t to)
    : to_(to) {
    listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof addr;
    if (listen_fd_ < 0 || ::bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), len) != 0 ||
        ::listen(listen_fd_, 64) != 0 ||
        ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len) != 0 ||
        ::pipe2(stop_pipe_, O_CLOEXEC) != 0)
        throw std::runtime_error("relay: cannot listen");
    port_ = ntohs(addr.sin_port);
    acceptor_ = std::thread([this] { accept_loop(); });
}

relay::~relay() {
    stopping_ = true;
    (void)!::write(stop_pipe_[1], "x", 1);
    acceptor_.join();
    reset();
    std::vector<std::unique_ptr<pair>> pairs;
    {
        std::lock_guard lock(m_);
        pairs.swap(pairs_);
    }
    for (auto& p : pairs)
        if (p->pump.joinable())
            p->pump.join();
    ::close(listen_fd_);
    ::close(stop_pipe_[0]);
    ::close(stop_pipe_[1]);
}

void relay::reset() {
    std::lock_guard lock(m_);
    for (auto& p : pairs_) {
        // (shutdown first: the pump's poll wakes; the descriptors are closed by it)
        if (p->a >= 0)
            ::shutdown(p->a, SHUT_RDWR);
        if (p->b >= 0)
            ::shutdown(p->b, SHUT_RDWR);
    }
}

void relay::refuse_for(std::chrono::milliseconds d) {
    std::lock_guard lock(m_);
    refuse_until_ = std::chrono::steady_clock::now() + d;
}

void relay::accept_loop() {
    for (;;) {
        pollfd fds[2] = {{listen_fd_, POLLIN, 0}, {stop_pipe_[0], POLLIN, 0}};
        if (::poll(fds, 2, -1) < 0 && errno != EINTR)
            return;
        if (stopping_ || fds[1].revents)
            return;
        if (!(fds[0].revents & POLLIN))
            continue;
        int a = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
        if (a < 0)
            continue;
        std::unique_lock lock(m_);
        if (std::chrono::steady_clock::now() < refuse_until_) {
            lock.unlock();
            abort_socket(a);
            ++refused_;
            continue;
        }
        lock.unlock();
        int b = connect_loopback(to_.load());
        if (b < 0) {
            abort_socket(a);
            ++refused_;
            continue;
        }
        ++relayed_;
        auto p = std::make_unique<pair>();
        p->a = a;
        p->b = b;
        auto* raw = p.get();
        lock.lock();
        pairs_.push_back(std::move(p));
        raw->pump = std::thread([this, raw] { pump(*raw); });
    }
}

void relay::pump(pair& p) {
    char buf[65536];
    for (;;) {
        pollfd fds[2] = {{p.a, POLLIN, 0}, {p.b, POLLIN, 0}};
        if (::poll(fds, 2, 200) < 0 && errno != EINTR)
            break;
        if (stopping_)
            break;
        bool ended = false;
        for (int side = 0; side < 2 && !ended; ++side) {
            if (!(fds[side].revents & (POLLIN | POLLHUP | POLLERR)))
                continue;
            const int from = side == 0 ? p.a : p.b, to = side == 0 ? p.b : p.a;
            const ssize_t n = ::recv(from, buf, sizeof buf, 0);
            if (n <= 0) {
                ended = true;
                break;
            }
            // Counted as taken, before the other side can have them.
            (side == 0 ? up_ : down_) += static_cast<std::uint64_t>(n);
            for (ssize_t sent = 0; sent < n;) {
                const ssize_t w =
                    ::send(to, buf + sent, static_cast<std::size_t>(n - sent), MSG_NOSIGNAL);
                if (w <= 0) {
                    ended = true;
                    break;
                }
                sent += w;
            }
        }
        if (ended)
            break;
    }
    // One side ended (or the relay reset it): both end with a reset, as a broken link does.
    std::lock_guard lock(m_);
    abort_socket(p.a);
    abort_socket(p.b);
}

} // namespace test_support
