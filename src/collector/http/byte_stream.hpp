// A browser connection's bytes, whatever carries them: TCP, TLS over TCP, or a test's stream.
// The HTTP, SSE and WebSocket code (connection.cpp, ws_events.cpp) is written against this
// one type and compiled once, not once per transport: Beast's readers, writers and WebSocket
// instantiated over three stream types cost minutes of every build.
//
// Reads go into the first non-empty buffer given (a read may always return less), writes
// gather up to 16 buffers (a write may always write less): one read and one write at a time,
// as Beast and Asio's composed operations already do.
#pragma once

#include <boost/asio/any_completion_handler.hpp>
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/append.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/buffer.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/beast/core/role.hpp>
#include <boost/beast/core/stream_traits.hpp>
#include <boost/system/error_code.hpp>

#include <array>
#include <chrono>
#include <cstddef>
#include <span>
#include <utility>

namespace collector {
namespace asio = boost::asio;

class byte_stream {
public:
    using executor_type = asio::any_io_executor;
    using handler = asio::any_completion_handler<void(boost::system::error_code, std::size_t)>;

    virtual ~byte_stream() = default;
    virtual executor_type get_executor() = 0;

    // The deadline of the next reads and writes (a stream without deadlines ignores it).
    virtual void expires_after(std::chrono::steady_clock::duration) {}
    virtual void expires_never() {}
    // Ends both directions: what is in flight completes with an error.
    virtual void shutdown() = 0;
    // Closes the socket at once.
    virtual void close() = 0;

    template <class MutableBuffers, class Token>
    auto async_read_some(const MutableBuffers& buffers, Token&& token) {
        asio::mutable_buffer into;
        for (auto it = asio::buffer_sequence_begin(buffers);
             it != asio::buffer_sequence_end(buffers); ++it) {
            if (asio::mutable_buffer b(*it); b.size() > 0) {
                into = b;
                break;
            }
        }
        return asio::async_initiate<Token, void(boost::system::error_code, std::size_t)>(
            [this](auto h, asio::mutable_buffer b) { read(b, handler(std::move(h))); }, token,
            into);
    }

    template <class ConstBuffers, class Token>
    auto async_write_some(const ConstBuffers& buffers, Token&& token) {
        return asio::async_initiate<Token, void(boost::system::error_code, std::size_t)>(
            [this](auto h, const ConstBuffers& bs) {
                std::size_t n = 0;
                for (auto it = asio::buffer_sequence_begin(bs);
                     it != asio::buffer_sequence_end(bs) && n < gathered_.size(); ++it) {
                    if (asio::const_buffer b(*it); b.size() > 0)
                        gathered_[n++] = b;
                }
                write(std::span<const asio::const_buffer>(gathered_.data(), n),
                      handler(std::move(h)));
            },
            token, buffers);
    }

protected:
    virtual void read(asio::mutable_buffer into, handler h) = 0;
    virtual void write(std::span<const asio::const_buffer> from, handler h) = 0;

private:
    std::array<asio::const_buffer, 16> gathered_;
};

// A byte_stream over `Stream` (held by value, or by reference when Stream is one).
template <class Stream>
class stream_of final : public byte_stream {
public:
    template <class... Args>
    explicit stream_of(Args&&... args)
        : stream_(std::forward<Args>(args)...) {}

    auto& next() { return stream_; }
    executor_type get_executor() override { return stream_.get_executor(); }

    void expires_after(std::chrono::steady_clock::duration d) override {
        if constexpr (requires { stream_.expires_after(d); })
            stream_.expires_after(d);
        else if constexpr (requires { stream_.next_layer().expires_after(d); })
            stream_.next_layer().expires_after(d); // over TLS: the TCP stream's
    }
    void expires_never() override {
        if constexpr (requires { stream_.expires_never(); })
            stream_.expires_never();
        else if constexpr (requires { stream_.next_layer().expires_never(); })
            stream_.next_layer().expires_never();
    }
    void shutdown() override {
        boost::system::error_code ignored;
        if constexpr (requires { stream_.socket(); })
            stream_.socket().shutdown(asio::ip::tcp::socket::shutdown_both, ignored);
        else if constexpr (requires { stream_.next_layer().socket(); })
            stream_.next_layer().socket().shutdown(asio::ip::tcp::socket::shutdown_both, ignored);
        else
            stream_.close();
    }
    void close() override { boost::beast::get_lowest_layer(stream_).close(); }

private:
    // (The handlers complete on the stream's executor, which is the connection's: Beast's
    // TCP stream cannot post to the type-erased executor an erased handler brings.)
    void read(asio::mutable_buffer into, handler h) override {
        stream_.async_read_some(into, asio::bind_executor(get_executor(), std::move(h)));
    }
    void write(std::span<const asio::const_buffer> from, handler h) override {
        stream_.async_write_some(from, asio::bind_executor(get_executor(), std::move(h)));
    }

    Stream stream_;
};

// How Beast closes a byte_stream when a WebSocket's timer runs out (found by argument-dependent
// lookup).
inline void beast_close_socket(byte_stream& s) {
    s.close();
}

// A WebSocket's end over a byte_stream, found by Beast by argument-dependent lookup: the close
// handshake is over (or the peer is gone), so the connection is shut down at once.
inline void teardown(boost::beast::role_type, byte_stream& s, boost::system::error_code& ec) {
    s.shutdown();
    ec = {};
}

template <class Handler>
void async_teardown(boost::beast::role_type, byte_stream& s, Handler&& h) {
    s.shutdown();
    asio::post(s.get_executor(),
               asio::append(std::forward<Handler>(h), boost::system::error_code{}));
}

} // namespace collector
