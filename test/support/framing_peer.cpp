#include "support/framing_peer.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdexcept>
#include <sys/socket.h>
#include <unistd.h>

namespace test_support {
using namespace std::chrono;

listener::listener(std::uint16_t port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    const int one = 1;
    ::setsockopt(fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in addr{};
    addr.sin_port = htons(port);
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 || ::listen(fd_, 8) != 0)
        throw std::runtime_error("listen failed");
    socklen_t len = sizeof addr;
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
}

listener::~listener() {
    ::close(fd_);
}

int listener::accept(milliseconds timeout) {
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(timeout.count())) <= 0)
        return -1;
    return ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
}

framing_peer::framing_peer(int fd)
    : fd_(fd) {}

framing_peer::framing_peer(framing_peer&& o) noexcept
    : fd_(o.fd_)
    , decoder_(std::move(o.decoder_))
    , closed_(o.closed_)
    , next_id_(o.next_id_) {
    o.fd_ = -1;
}

framing_peer::~framing_peer() {
    if (fd_ >= 0)
        ::close(fd_);
}

int connect_loopback(std::uint16_t port) {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(port);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
        ::close(fd);
        return -1;
    }
    return fd;
}

std::optional<framing_peer> framing_peer::connect(std::uint16_t port) {
    const int fd = connect_loopback(port);
    if (fd < 0)
        return std::nullopt;
    return framing_peer(fd);
}

void framing_peer::send(protocol::frame_flag flag, const std::string& payload) {
    send_raw(protocol::encode_frame(flag, payload));
}

void framing_peer::send_raw(std::string_view bytes) {
    std::size_t sent = 0;
    while (sent < bytes.size()) {
        const ssize_t n = ::send(fd_, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
        if (n <= 0) {
            closed_ = true;
            return;
        }
        sent += static_cast<std::size_t>(n);
    }
}

std::optional<protocol::frame> framing_peer::next(milliseconds timeout) {
    const auto deadline = steady_clock::now() + timeout;
    for (;;) {
        auto r = decoder_.next();
        if (!r)
            return std::nullopt;
        if (*r)
            return std::move(**r);
        if (closed_)
            return std::nullopt;
        const auto left = duration_cast<milliseconds>(deadline - steady_clock::now());
        if (left.count() <= 0)
            return std::nullopt;
        pollfd p{fd_, POLLIN, 0};
        if (::poll(&p, 1, static_cast<int>(left.count())) <= 0)
            return std::nullopt;
        char buf[65536];
        const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
        if (n <= 0) {
            closed_ = true;
            continue;
        }
        decoder_.feed(std::string_view(buf, static_cast<std::size_t>(n)));
    }
}

std::optional<protocol::frame> framing_peer::next_of(protocol::frame_flag flag,
                                                     milliseconds timeout) {
    const auto deadline = steady_clock::now() + timeout;
    while (steady_clock::now() < deadline) {
        auto f = next(duration_cast<milliseconds>(deadline - steady_clock::now()));
        if (!f)
            return std::nullopt;
        if (f->flag == flag)
            return f;
    }
    return std::nullopt;
}

std::optional<protocol::command_response>
framing_peer::command(const std::string& cmd, const std::string& args_json, milliseconds timeout,
                      const std::function<void(const protocol::frame&)>& on_other) {
    const std::string id = "t" + std::to_string(next_id_++);
    send(protocol::frame_flag::command,
         R"({"id":")" + id + R"(","cmd":")" + cmd + R"(","args":)" + args_json + "}");
    const auto deadline = steady_clock::now() + timeout;
    while (steady_clock::now() < deadline) {
        auto f = next(duration_cast<milliseconds>(deadline - steady_clock::now()));
        if (!f)
            return std::nullopt;
        if (f->flag == protocol::frame_flag::response) {
            auto r = protocol::parse_command_response(f->payload);
            if (r && r->id == id)
                return *r;
        }
        if (on_other)
            on_other(*f);
    }
    return std::nullopt;
}

} // namespace test_support
