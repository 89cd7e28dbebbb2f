// The agent link's byte stream: TCP, or TLS over it (OpenSSL through Asio's ssl::stream). The
// framing inside is the same either way; frame_reader and asio::async_write take this stream
// like a socket.
//
//   collector, agent port:   accept ─▶ peek the first byte ─┬─ 0x16 (a TLS ClientHello) ─▶ TLS
//   server
//                                                           └─ anything else (a hello frame) ─▶
//                                                           plain
//   agent --server, --tls-pin/--tls-ca:   connect ─▶ TLS client ─▶ the collector's certificate
//                                                     must have the pinned SHA-256 (or chain to the
//                                                     CA)
//   agent --listen --tls:    accept ─▶ TLS server; the collector that dials pins the agent's key
//
// Only connection code includes this (it brings in Asio and OpenSSL's headers).
#pragma once

#include "protocol/tls.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/asio/ssl/stream.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <variant>

namespace protocol {

// What a TLS client accepts from the server: the certificate with this pin, or one that
// chains to this CA file and names the host dialled. There is no "accept anything".
struct peer_check {
    std::optional<std::string> pin;     // "sha256:<hex>" (tls::parse_pin)
    std::optional<std::string> ca_file; // PEM bundle; "": the system's CAs
    std::string host;                   // for the CA check's name
};

// A server context (TLS 1.2 at least) presenting `id`.
std::shared_ptr<boost::asio::ssl::context> server_context(const tls::identity& id);
// A client context (TLS 1.2 at least); with a CA file, it verifies the chain and the name.
// An error message when the CA file cannot be loaded.
std::variant<std::shared_ptr<boost::asio::ssl::context>, std::string>
client_context(const peer_check& check);

class link_stream {
public:
    using tcp = boost::asio::ip::tcp;
    using executor_type = tcp::socket::executor_type;

    explicit link_stream(tcp::socket socket)
        : tcp_(std::move(socket)) {}
    link_stream(const link_stream&) = delete;
    link_stream& operator=(const link_stream&) = delete;

    executor_type get_executor() { return tcp_.get_executor(); }
    tcp::socket& socket() noexcept { return tcp_; }
    bool encrypted() const noexcept { return tls_ != nullptr; }
    // The SHA-256 pin of the certificate the peer presented ("" when none: plain, or a client).
    const std::string& peer_pin() const noexcept { return peer_pin_; }
    // The protocol version agreed ("TLSv1.3"), "" when plain.
    std::string tls_version() const;

    // Whether the peer opens with a TLS record (its first byte is 0x16): a hello frame starts
    // with a length's high byte, never 0x16 (hellos are ≤ 64 KiB). Waits for that byte; an
    // error when the peer closes (eof) or the wait is cancelled.
    boost::asio::awaitable<std::pair<boost::system::error_code, bool>> peer_opens_tls();

    // The TLS handshake within `timeout`, as the server (`ctx` presents this side's identity)
    // or as the client (then `check` decides: a pin mismatch is an error naming both keys).
    // "" on success, else what went wrong, for the log and the user.
    boost::asio::awaitable<std::string> accept_tls(std::shared_ptr<boost::asio::ssl::context> ctx,
                                                   std::chrono::steady_clock::duration timeout);
    boost::asio::awaitable<std::string> connect_tls(std::shared_ptr<boost::asio::ssl::context> ctx,
                                                    const peer_check& check,
                                                    std::chrono::steady_clock::duration timeout);

    // Closes the connection at once (no close_notify: a peer that stopped reading must not
    // hold us up).
    void close() noexcept;

    template <class Buffers, class Token>
    auto async_read_some(const Buffers& b, Token&& token) {
        if (tls_)
            return tls_->async_read_some(b, std::forward<Token>(token));
        return tcp_.async_read_some(b, std::forward<Token>(token));
    }
    template <class Buffers, class Token>
    auto async_write_some(const Buffers& b, Token&& token) {
        if (tls_)
            return tls_->async_write_some(b, std::forward<Token>(token));
        return tcp_.async_write_some(b, std::forward<Token>(token));
    }

private:
    boost::asio::awaitable<std::string> handshake(std::shared_ptr<boost::asio::ssl::context> ctx,
                                                  bool server,
                                                  std::chrono::steady_clock::duration timeout);
    tcp::socket tcp_;
    std::shared_ptr<boost::asio::ssl::context> ctx_; // outlives tls_
    std::unique_ptr<boost::asio::ssl::stream<tcp::socket&>> tls_;
    std::string peer_pin_;
    std::string sni_; // the server name a client sends (a CA check's host)
};

// A read's end that is just the peer going away: eof, or a TLS peer that closed without
// close_notify.
bool peer_went_away(const boost::system::error_code& ec);

} // namespace protocol
