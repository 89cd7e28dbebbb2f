// A live session's one path. The agent's link reads frames and hands each data chunk and
// metrics record here, on the I/O thread; the session's strand stores it (disk first), parses
// it into the model and publishes the counts; then one typed change reaches the browsers
// (http/events.hpp). When the agent leaves, the session is completed on disk, or removed if it
// never held a sample.
#pragma once

#include "collector/sessions.hpp"

#include <functional>
#include <memory>
#include <optional>
#include <string>

namespace collector {

struct app_context;

// A data chunk as it arrived (`who` names the peer in the log). `digested` runs on the I/O
// thread once the chunk is stored and parsed: the link counts what is still in flight by it.
void ingest_chunk(app_context& app, const std::shared_ptr<session_entry>& e, std::string who,
                  bool compressed, std::string payload, std::function<void()> digested);

// One metrics record, already parsed and re-serialised (protocol::serialize): appended to the
// session, kept in its model, sent to the browsers.
void ingest_metrics(app_context& app, const std::shared_ptr<session_entry>& e, std::string record);

// The run ended at `ended_at` (seconds since the epoch): the agent went idle or left. `pid`:
// the process it profiled, when the agent said (a session may open with the agent's first
// metrics, before it knows).
void end_live(app_context& app, const std::shared_ptr<session_entry>& e, double ended_at,
              std::optional<int> pid = std::nullopt);

// The device's kernel symbols, as its agent answered `kallsyms` (or why there are none): kept
// with the session, which is named again with them.
void take_kernel_symbols(app_context& app, const std::shared_ptr<session_entry>& e,
                         std::shared_ptr<const kernel_symbols> table, std::string why);

// The collector's symbols changed (a setting, a debuginfod answer): every session in memory
// that was named under older ones is named again, on its strand. A live one is rebuilt at once
// from its recording (and the chunks still waiting for the disk); a saved one is let go and
// replays, newly named, when next viewed. The browsers are told each one changed.
void rename_frames(app_context& app);

} // namespace collector
