// Every event a browser receives on GET /api/stream is formed here, from typed input: the
// first picture a new stream gets, a change (targets, a session's data, the session list),
// an agent's metrics (already parsed and re-serialised), an import's progress. Nothing an agent
// sent reaches a browser except through these functions.
#pragma once

#include <boost/json/fwd.hpp>

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
// "lost_samples"}; sessions: {"session_id"} (a session came, ended or went).
void publish(app_context& app, change what, const std::string& session_id);
// {"session_id", "metrics": <one record as protocol::serialize wrote it>}.
void metrics(app_context& app, std::string_view session_id, std::string_view record);
// {"import", "phase", "bytes", "samples", "total"?}.
void import_progress(app_context& app, const boost::json::object& progress);

} // namespace events
} // namespace collector
