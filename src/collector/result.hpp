// The collector's one error convention above protocol/: what can fail returns result<T>, a
// value or a failure. A failure carries a short code programs match on ("bad_event", "io"),
// a sentence a person can act on, the HTTP status the API answers with, and, when known, the
// candidates that would have worked. The API turns it into {"error": {"code", "message",
// "candidates"?}} (http/routes.hpp); the log prints the message.
#pragma once

#include <boost/system/result.hpp>

#include <iosfwd>
#include <string>
#include <vector>

namespace collector {

struct failure {
    // (Not an aggregate: a failure is never made from a lone string, which would leave
    // result<std::string> unable to tell a value from an error.)
    failure() = default;
    failure(std::string code_, std::string message_, int status_ = 400,
            std::vector<std::string> candidates_ = {})
        : code(std::move(code_))
        , message(std::move(message_))
        , status(status_)
        , candidates(std::move(candidates_)) {}

    std::string code;
    std::string message;
    int status = 400; // 400: the request's or the input's fault; 404, 409, 500 …
    std::vector<std::string> candidates; // what would have worked, when known
};

// "code: message", for logs and test reports.
std::ostream& operator<<(std::ostream& os, const failure& f);

[[noreturn]] void throw_exception_from_error(const failure& f, const boost::source_location& loc);

template <class T = void>
using result = boost::system::result<T, failure>;

} // namespace collector
