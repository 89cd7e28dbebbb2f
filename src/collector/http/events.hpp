// Every event a browser receives on GET /api/stream is formed here, from typed input: the
// first picture a new stream gets, a change (targets, a session's data, the session list),
// an agent's metrics (already parsed and re-serialised), an import's progress. Nothing an agent
// sent reaches a browser except through these functions.
#pragma once

#include <boost/json/fwd.hpp>

#include <chrono>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace collector {

struct app_context;
enum class change;

namespace events {

// "status" and "targets", formatted, for a stream that just opened.
std::vector<std::string> first_picture(app_context& app);
// targets: the introduced agents; data: {"session_id", "version", "chunks", "samples",
// "lost_samples", "threads", "duration_sec"} (what a browser shows without asking);
// sessions: {"session_id"} (a session came, ended or went). Data changes go through
// data_notices.
void publish(app_context& app, change what, const std::string& session_id);

// Data changes, coalesced: a live session takes a chunk several times a second, and each
// notice makes every browser showing it look again. The first change after a quiet spell is
// told at once; later ones wait for the next tick, at most one per `interval`, each session
// told once per tick whatever the number of its chunks. A notice costs the lookup of its
// session, never a walk over all of them. I/O thread only.
class data_notices {
public:
    static constexpr std::chrono::milliseconds interval{250};

    explicit data_notices(app_context& app);
    ~data_notices();
    data_notices(const data_notices&) = delete;
    data_notices& operator=(const data_notices&) = delete;

    void changed(const std::string& session_id);
    // The collector stops: a tick pending is cancelled (its notices would reach no browser).
    void stop();

private:
    struct impl;
    std::unique_ptr<impl> impl_;
};
// {"session_id", "metrics": <one record as protocol::serialize wrote it>}.
void metrics(app_context& app, std::string_view session_id, std::string_view record);
// {"import", "phase", "bytes", "samples", "total"?}.
void import_progress(app_context& app, const boost::json::object& progress);

} // namespace events
} // namespace collector
