#include "protocol/link_stream.hpp"
#include "protocol/use_nothrow.hpp"

#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/ssl/error.hpp>
#include <boost/asio/ssl/host_name_verification.hpp>
#include <boost/asio/this_coro.hpp>

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

namespace protocol {
namespace asio = boost::asio;
namespace ssl = boost::asio::ssl;
using namespace asio::experimental::awaitable_operators;
using protocol::use_nothrow;

namespace {

std::shared_ptr<ssl::context> base_context(ssl::context::method m) {
    auto ctx = std::make_shared<ssl::context>(m);
    ctx->set_options(ssl::context::default_workarounds | ssl::context::no_compression);
    SSL_CTX_set_min_proto_version(ctx->native_handle(), TLS1_2_VERSION);
    return ctx;
}

std::string der_of_peer(SSL* ssl) {
    X509* cert = SSL_get0_peer_certificate(ssl);
    if (!cert)
        return {};
    const int n = i2d_X509(cert, nullptr);
    if (n <= 0)
        return {};
    std::string der(static_cast<std::size_t>(n), '\0');
    auto* p = reinterpret_cast<unsigned char*>(der.data());
    i2d_X509(cert, &p);
    return der;
}

std::string handshake_error(const boost::system::error_code& ec) {
    if (ec == asio::error::eof || ec == ssl::error::stream_truncated)
        return "the peer closed the connection during the TLS handshake";
    if (ec.category() == asio::error::get_ssl_category()) {
        char buf[256];
        ERR_error_string_n(static_cast<unsigned long>(ec.value()), buf, sizeof buf);
        return std::string("TLS handshake failed: ") + buf;
    }
    return "TLS handshake failed: " + ec.message();
}

} // namespace

std::shared_ptr<ssl::context> server_context(const tls::identity& id) {
    auto ctx = base_context(ssl::context::tls_server);
    ctx->use_certificate_chain(asio::buffer(id.cert_pem));
    ctx->use_private_key(asio::buffer(id.key_pem), ssl::context::pem);
    ctx->set_verify_mode(ssl::verify_none); // agents authenticate with a token or a code
    return ctx;
}

std::variant<std::shared_ptr<ssl::context>, std::string> client_context(const peer_check& check) {
    auto ctx = base_context(ssl::context::tls_client);
    if (check.ca_file) {
        boost::system::error_code ec;
        if (check.ca_file->empty())
            ctx->set_default_verify_paths(ec); // (the system's CAs, wherever it keeps them)
        else
            ctx->load_verify_file(*check.ca_file, ec);
        if (ec)
            return "cannot load the CA file " +
                   (check.ca_file->empty() ? std::string("(the system's)") : *check.ca_file) +
                   ": " + ec.message();
        ctx->set_verify_mode(ssl::verify_peer);
        ctx->set_verify_callback(ssl::host_name_verification(check.host));
    } else {
        // The pin is checked once the handshake is done: any chain, only this certificate.
        ctx->set_verify_mode(ssl::verify_none);
    }
    return ctx;
}

std::string link_stream::tls_version() const {
    return tls_ ? SSL_get_version(const_cast<ssl::stream<tcp::socket&>&>(*tls_).native_handle())
                : std::string();
}

asio::awaitable<std::pair<boost::system::error_code, bool>> link_stream::peer_opens_tls() {
    for (;;) {
        auto [ec] = co_await tcp_.async_wait(tcp::socket::wait_read, use_nothrow);
        if (ec)
            co_return std::make_pair(ec, false);
        unsigned char first = 0;
        const auto n = tcp_.receive(asio::buffer(&first, 1), tcp::socket::message_peek, ec);
        if (ec == asio::error::would_block || ec == asio::error::try_again)
            continue;
        if (ec || n == 0)
            co_return std::make_pair(ec ? ec : make_error_code(asio::error::eof), false);
        co_return std::make_pair(ec, first == 0x16);
    }
}

asio::awaitable<std::string> link_stream::handshake(std::shared_ptr<ssl::context> ctx, bool server,
                                                    std::chrono::steady_clock::duration timeout) {
    ctx_ = std::move(ctx);
    tls_ = std::make_unique<ssl::stream<tcp::socket&>>(tcp_, *ctx_);
    if (!sni_.empty())
        SSL_ctrl(tls_->native_handle(), SSL_CTRL_SET_TLSEXT_HOSTNAME, TLSEXT_NAMETYPE_host_name,
                 sni_.data()); // (SSL_set_tlsext_host_name, without its C cast)
    asio::steady_timer deadline(tcp_.get_executor(), timeout);
    auto r =
        co_await (tls_->async_handshake(
                      server ? ssl::stream_base::server : ssl::stream_base::client, use_nothrow) ||
                  deadline.async_wait(use_nothrow));
    if (r.index() == 1)
        co_return "no TLS handshake within " +
            std::to_string(std::chrono::duration_cast<std::chrono::seconds>(timeout).count()) +
            " s";
    if (auto [ec] = std::get<0>(r); ec)
        co_return handshake_error(ec);
    if (!server)
        peer_pin_ = tls::pin_of_der(der_of_peer(tls_->native_handle()));
    co_return std::string();
}

asio::awaitable<std::string> link_stream::accept_tls(std::shared_ptr<ssl::context> ctx,
                                                     std::chrono::steady_clock::duration timeout) {
    co_return co_await handshake(std::move(ctx), true, timeout);
}

asio::awaitable<std::string> link_stream::connect_tls(std::shared_ptr<ssl::context> ctx,
                                                      const peer_check& check,
                                                      std::chrono::steady_clock::duration timeout) {
    if (!check.pin && !check.ca_file)
        co_return "no key pinned and no CA given: a TLS peer is never taken unchecked";
    boost::system::error_code not_address;
    asio::ip::make_address(check.host, not_address);
    sni_ = check.ca_file && not_address ? check.host : std::string(); // a name, for its CA check
    auto why = co_await handshake(std::move(ctx), false, timeout);
    if (!why.empty())
        co_return why;
    if (check.pin && peer_pin_ != *check.pin)
        co_return "the peer's key is " + peer_pin_ + ", not the pinned " + *check.pin +
            ": refused (a different collector or agent, or someone in between)";
    co_return std::string();
}

void link_stream::close() noexcept {
    boost::system::error_code ec;
    tcp_.shutdown(tcp::socket::shutdown_both, ec);
    tcp_.close(ec);
}

bool peer_went_away(const boost::system::error_code& ec) {
    return ec == asio::error::eof || ec == ssl::error::stream_truncated;
}

} // namespace protocol
