// A live session's one path. The agent's link reads frames and hands each data chunk and
// metrics record here, on the I/O thread; the session's strand stores it (disk first), parses
// it into the model and publishes the counts; then one typed change reaches the browsers
// (browsers.hpp). When the agent leaves, the session is completed on disk, or removed if it
// never held a sample.
#pragma once

#include "collector/fleet/rows.hpp"
#include "collector/sessions.hpp"

#include <boost/system/result.hpp>

#include <functional>
#include <memory>
#include <optional>
#include <string>

namespace collector {

struct app_context;

// One agent's run, from its first data to its end. The link calls it on the I/O thread; it
// hops to the session's strand for everything that touches the model or the disk, and back
// to the I/O thread to tell the browsers.
class live_session {
public:
    // A new live session for the agent `who` names in the log: its folder is made (named
    // after `agent_name`) with `meta`. An error when the folder cannot be made.
    // `kernel_wanted`: called on the I/O thread after a chunk whose kernel frames stayed
    // unnamed, while the session has no kernel symbols (the link asks its agent for them).
    static boost::system::result<std::unique_ptr<live_session>>
    open(app_context& app, std::string who, std::string_view agent_name,
         const boost::json::object& meta, std::function<void()> kernel_wanted = nullptr);
    live_session(const live_session&) = delete;
    live_session& operator=(const live_session&) = delete;

    const std::string& id() const noexcept;
    // Kernel frames stay unnamed and the device's kernel symbols were not asked for yet.
    bool wants_kernel_symbols() const noexcept;

    // A data chunk as it arrived. `digested` runs on the I/O thread once the chunk is stored
    // and parsed: the link's credit for what is still in flight, nothing more.
    void chunk(bool compressed, std::string payload, std::function<void()> digested);
    // One metrics record, already parsed and re-serialised (protocol::serialize): appended to
    // the session, kept in its model, sent to the browsers.
    void metrics(std::string record);
    // The device's kernel symbols, as its agent answered `kallsyms` (or `why` there are
    // none): kept with the session, which is named again with them.
    void kernel(std::shared_ptr<const kernel_symbols> table, std::string why);
    // The run ended at `ended_at` (seconds since the epoch): the agent went idle or left.
    // `pid`: the process it profiled, when the agent said. The session is completed on disk,
    // or removed if it never held a sample. Once; later calls do nothing. The link calls it
    // when the run ends and when its connection closes.
    void end(double ended_at, std::optional<int> pid = std::nullopt);

private:
    live_session(app_context& app, std::shared_ptr<session_entry> entry, std::string who,
                 std::shared_ptr<const fleet_encoder::origin> fleet,
                 std::function<void()> kernel_wanted);

    app_context& app_;
    std::shared_ptr<session_entry> entry_;
    std::string who_;
    // What its samples are called in the fleet store; null when the collector writes to none.
    std::shared_ptr<const fleet_encoder::origin> fleet_;
    std::function<void()> kernel_wanted_;
    bool ended_ = false;
};

// The collector's symbols changed (a setting, a debuginfod answer): every session in memory
// that was named under older ones is named again, on its strand. A live one is rebuilt at once
// from its recording (and the chunks still waiting for the disk); a saved one is let go and
// replays, newly named, when next viewed. The browsers are told each one changed.
void rename_frames(app_context& app);

} // namespace collector
