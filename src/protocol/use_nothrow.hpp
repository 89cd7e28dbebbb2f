// Asio's awaitable completion as a tuple, the error code first: a failed read, write, wait or
// connect is a value the coroutine looks at, never an exception.
#pragma once

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/use_awaitable.hpp>

namespace protocol {

inline constexpr auto use_nothrow = boost::asio::as_tuple(boost::asio::use_awaitable);

} // namespace protocol
