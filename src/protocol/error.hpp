// Protocol errors: one boost::system category shared by the frame decoder, the zstd codec and
// the message parsers, so a session can log `ec.message()` and close, whatever failed.
#pragma once

#include <boost/system/error_code.hpp>
#include <boost/system/result.hpp>

#include <exception>
#include <string>
#include <type_traits>

namespace protocol {

enum class errc {
    frame_too_large = 1,  // LEN exceeds the receiver's limit
    unknown_flag,         // FLAG is not one of frame_flag
    truncated_frame,      // the stream ended inside a header or payload
    zstd_corrupt,         // not a zstd frame, or damaged
    zstd_truncated,       // the zstd frame stops before its end
    zstd_too_large,       // declared or actual output exceeds the cap
    invalid_json,         // not JSON, or not a JSON object
    invalid_message,      // JSON object with a missing or mistyped field
    message_too_large,    // e.g. a hello over 64 KiB
    unknown_message_type, // metrics "type" this build does not know
};

const boost::system::error_category& protocol_category() noexcept;

inline boost::system::error_code make_error_code(errc e) noexcept {
    return {static_cast<int>(e), protocol_category()};
}

// A parse failure: the code for programs, the detail ("field 'id' must be a string") for logs.
struct parse_error {
    boost::system::error_code code;
    std::string detail;

    std::string message() const {
        return detail.empty() ? code.message() : code.message() + ": " + detail;
    }
};

[[noreturn]] void throw_exception_from_error(const parse_error& e,
                                             const boost::source_location& loc);

template <class T>
using parse_result = boost::system::result<T, parse_error>;

// What a coroutine's exception says, for the one log line its completion handler writes
// ("unknown exception" for a non-std one); empty when there was none.
std::string describe(std::exception_ptr e);

} // namespace protocol

template <>
struct boost::system::is_error_code_enum<protocol::errc> : std::true_type {};
