#include "protocol/error.hpp"

#include <boost/throw_exception.hpp>

#include <stdexcept>

namespace protocol {
namespace {

class category final : public boost::system::error_category {
public:
    const char* name() const noexcept override { return "perfwire.protocol"; }

    std::string message(int ev) const override {
        switch (static_cast<errc>(ev)) {
        case errc::frame_too_large:
            return "frame length exceeds limit";
        case errc::unknown_flag:
            return "unknown frame flag";
        case errc::truncated_frame:
            return "stream ended inside a frame";
        case errc::zstd_corrupt:
            return "corrupt zstd data";
        case errc::zstd_truncated:
            return "truncated zstd data";
        case errc::zstd_too_large:
            return "zstd output exceeds limit";
        case errc::invalid_json:
            return "invalid JSON";
        case errc::invalid_message:
            return "invalid message";
        case errc::message_too_large:
            return "message too large";
        case errc::unknown_message_type:
            return "unknown message type";
        }
        return "unknown protocol error";
    }
};

} // namespace

const boost::system::error_category& protocol_category() noexcept {
    static const category instance;
    return instance;
}

void throw_exception_from_error(const parse_error& e, const boost::source_location& loc) {
    boost::throw_exception(std::runtime_error(e.message()), loc);
}

std::string describe(std::exception_ptr e) {
    if (!e)
        return {};
    try {
        std::rethrow_exception(e);
    } catch (const std::exception& x) {
        return x.what();
    } catch (...) {
        return "unknown exception";
    }
}

} // namespace protocol
