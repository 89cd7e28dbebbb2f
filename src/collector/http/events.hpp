// Every event a browser receives on GET /api/stream is formed here, from typed input: the
// first picture a new stream gets, a change (targets, a session's data, the session list),
// an agent's metrics (already parsed and re-serialised), an import's progress. Nothing an agent
// sent reaches a browser except through these functions.
#pragma once

#include "collector/browsers.hpp"

#include <boost/json/fwd.hpp>

#include <chrono>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace collector {

struct app_context;
class sse_hub;

namespace events {

// "status", "targets" (the whole list: the snapshot later changes apply to) and a
// "data_version" for each live session, formatted, for a stream that just opened.
std::vector<std::string> first_picture(app_context& app);

// The browsers' side of what the core tells (collector/browsers.hpp): the hub every stream
// reads from (GET /api/stream, /api/ws), and the changes formed into events and coalesced.
// A live session takes a chunk several times a second, two hundred agents may connect within
// a second, and each notice makes every browser look again. The first change after a quiet
// spell is told at once; later ones wait for the next tick, at most one per `interval`, each
// session or target told once per tick whatever the number of its changes. So what a browser
// receives grows with what changed, never with the number of targets times the number of
// changes. I/O thread only. Events:
//   targets_changed  {"targets": [a target as /api/targets lists it, for each that changed],
//                     "gone": [ids of targets that left]}
//   data_version     {"session_id", "version", "chunks", "samples", "lost_samples", "threads",
//                     "duration_sec"}, one per session that took chunks (what a browser shows
//                     without asking)
//   sessions         {"session_ids": [ids]}: sessions that came, ended or went
//   metrics          {"session_id", "metrics": <one record as protocol::serialize wrote it>}
//   import           {"import", "phase", "bytes", "samples", "total"?}
// A notice costs the lookup of what it names, never a walk over all targets or sessions.
class feed final : public browser_feed {
public:
    static constexpr std::chrono::milliseconds interval{250};

    explicit feed(app_context& app);
    ~feed() override;
    feed(const feed&) = delete;
    feed& operator=(const feed&) = delete;

    void changed(change what, const std::string& id) override;
    void metrics(std::string_view session_id, std::string_view record) override;
    void import_progress(const boost::json::object& progress) override;
    // A tick pending is cancelled (its notices would reach no browser).
    void stop() override;

    sse_hub& hub() noexcept;

private:
    struct impl;
    std::unique_ptr<impl> impl_;
};

// The hub of the collector's feed, which every stream reads from.
sse_hub& hub(app_context& app);

} // namespace events
} // namespace collector
