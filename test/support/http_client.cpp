#include "support/http_client.hpp"

#include "support/framing_peer.hpp"

#include <arpa/inet.h>
#include <map>
#include <mutex>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

namespace test_support {
namespace {

std::mutex tokens_mutex;
std::map<std::uint16_t, std::string> tokens;

} // namespace

std::uint16_t api_port(const std::string& log_rest) {
    const auto port = static_cast<std::uint16_t>(std::stoi(log_rest));
    {
        std::lock_guard lock(tokens_mutex);
        tokens.erase(port);
    }
    const auto at = log_rest.find("?code=");
    if (at == std::string::npos)
        return port;
    // Signed in as a browser opening the printed link is: the cookie it gets holds the token.
    const auto link = http_call(port, "GET", "/?code=" + log_rest.substr(at + 6));
    const std::string cookie = "Set-Cookie: perfwire_token_"; // and the collector's own suffix
    if (const auto c = link.headers.find(cookie); c != std::string::npos) {
        const auto from = link.headers.find('=', c) + 1;
        std::lock_guard lock(tokens_mutex);
        tokens[port] = link.headers.substr(from, link.headers.find(';', from) - from);
    }
    return port;
}

std::string api_token(std::uint16_t port) {
    std::lock_guard lock(tokens_mutex);
    const auto it = tokens.find(port);
    return it == tokens.end() ? std::string() : it->second;
}

http_reply http_call(std::uint16_t port, const std::string& method, const std::string& target,
                     const std::string& body, const std::vector<std::string>& extra_headers,
                     std::chrono::milliseconds silence) {
    http_reply r;
    const int fd = connect_loopback(port);
    if (fd < 0)
        return r;
    std::string req = method + " " + target + " HTTP/1.1\r\nConnection: close\r\n";
    bool has_host = false, has_credentials = false;
    for (const auto& h : extra_headers) {
        req += h + "\r\n";
        has_host |= h.rfind("Host:", 0) == 0;
        has_credentials |= h.rfind("Authorization:", 0) == 0 || h.rfind("Cookie:", 0) == 0;
    }
    if (const auto token = api_token(port); !has_credentials && !token.empty())
        req += "Authorization: Bearer " + token + "\r\n";
    if (!has_host)
        req += "Host: 127.0.0.1:" + std::to_string(port) + "\r\n";
    if (!body.empty() || method == "POST")
        req += "Content-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) +
               "\r\n";
    req += "\r\n" + body;
    ::send(fd, req.data(), req.size(), MSG_NOSIGNAL);
    std::string in;
    char buf[65536];
    for (;;) {
        pollfd p{fd, POLLIN, 0};
        if (::poll(&p, 1, static_cast<int>(silence.count())) <= 0)
            break;
        const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
        if (n <= 0)
            break;
        in.append(buf, static_cast<std::size_t>(n));
    }
    ::close(fd);
    const auto head_end = in.find("\r\n\r\n");
    if (in.rfind("HTTP/1.1 ", 0) != 0 || head_end == std::string::npos)
        return r;
    r.status = std::stoi(in.substr(9, 3));
    r.headers = in.substr(0, head_end);
    r.body = in.substr(head_end + 4);
    return r;
}

} // namespace test_support
