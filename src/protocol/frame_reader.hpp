// The read side of a framed connection, shared by the agent and the collector: bytes from an
// Asio stream through a frame_decoder, one whole frame at a time.
//
// The one protocol header with Asio in it: include it only in connection code, never from a
// widely-included header (frame.hpp stays Asio-free for the fuzzer and the unit tests).
#pragma once

#include "protocol/error.hpp"
#include "protocol/frame.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/buffer.hpp>
#include <boost/asio/error.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <string>
#include <vector>

namespace protocol {

template <class Stream>
class frame_reader {
public:
    frame_reader(Stream& stream, std::size_t max_payload, std::size_t read_size,
                 std::size_t first_max_payload = SIZE_MAX)
        : stream_(stream)
        , decoder_(max_payload, first_max_payload)
        , buf_(read_size) {}

    // The next whole frame. Errors: the decoder's (a protocol violation, protocol_category()),
    // or the stream's (asio::error::eof when the peer closed, operation_aborted on cancel).
    boost::asio::awaitable<boost::system::result<frame>> next() {
        for (;;) {
            auto f = decoder_.next();
            if (!f)
                co_return f.error();
            if (*f)
                co_return std::move(**f);
            auto [ec, n] = co_await stream_.async_read_some(
                boost::asio::buffer(buf_), boost::asio::as_tuple(boost::asio::use_awaitable));
            if (ec)
                co_return ec;
            decoder_.feed(std::string_view(buf_.data(), n));
        }
    }

private:
    Stream& stream_;
    frame_decoder decoder_;
    std::vector<char> buf_;
};

// What to log when a connection's reading ends with `ec`: nothing for a peer that closed or a
// read that was cancelled.
inline std::string read_end_reason(const boost::system::error_code& ec) {
    if (ec == boost::asio::error::eof || ec == boost::asio::error::operation_aborted)
        return {};
    if (ec.category() == protocol_category())
        return "protocol error: " + ec.message() + "; closing";
    return "read: " + ec.message();
}

} // namespace protocol
