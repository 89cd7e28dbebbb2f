// POST /api/sessions/import as it arrives: the connection reads the body in blocks and hands
// each to an upload, which feeds the import on a strand of the pool (parsing never runs on
// the I/O thread) and tells browsers how far it got (SSE `import` events). No Beast here:
// the connection's template does the reading.
#pragma once

#include "collector/http/routes.hpp"

#include <boost/asio/awaitable.hpp>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

namespace collector {

// The source an upload's session is named by: the file's name (`name=`), made safe, or
// "upload".
std::string upload_source(std::string_view name);

class upload {
public:
    // Null when too many imports are running: answer `busy` instead. `target`: the request's,
    // whose `name=` (the file's name on the user's machine) names the session's source.
    static std::shared_ptr<upload> start(app_context& app, std::optional<std::uint64_t> declared,
                                         std::string_view target);
    ~upload();

    // One block of the body. False: the import failed, stop reading (finish() says why).
    asio::awaitable<bool> feed(std::string_view block);
    // The body ended: the session is published, or the error answered.
    asio::awaitable<http_response> finish(const http_request& req);
    // The body did not arrive whole (the client left, a read failed): nothing is kept.
    void abandon();
    // The collector stops: the import ends at its next block (a perf script over an uploaded
    // perf.data is stopped too) and finish() answers "cancelled".
    void cancel() noexcept;

    struct state; // (upload.cpp)
    explicit upload(std::shared_ptr<state> s);

private:
    std::shared_ptr<state> state_;
};

// 503 with Retry-After: the imports allowed at once are running.
http_response busy_importing(const http_request& req);

} // namespace collector
