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
#include <utility>
#include <vector>

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
    // A saved session that goes on: a run back after this collector restarted (runs.hpp).
    static boost::system::result<std::unique_ptr<live_session>>
    reopen(app_context& app, std::string who, std::string_view id,
           std::function<void()> kernel_wanted = nullptr);
    live_session(const live_session&) = delete;
    live_session& operator=(const live_session&) = delete;

    const std::string& id() const noexcept;
    // Kernel frames stay unnamed and the device's kernel symbols were not asked for yet.
    bool wants_kernel_symbols() const noexcept;

    // A data chunk as it arrived (`seq`: its number in its run, 0 for none). `digested` runs
    // on the I/O thread once the chunk is taken and parsed: the link's credit for what is
    // still in flight; `stored` says it is on disk, every chunk before it too (not kept in
    // memory for want of room).
    void chunk(bool compressed, std::string payload, std::function<void(bool stored)> digested,
               std::uint64_t seq = 0);
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
    // Its run's link went down at `at` (seconds since the epoch): the session waits for it.
    void link_down(double at);
    // Its run's link was down from `down` to `up` (seconds since the epoch), the run going on
    // on the device, `late` chunks made meanwhile still to come: added to its metadata at once
    // (link_gaps, and link_gaps_s on the session's own clock for the timeline).
    void link_gap(double down, double up, std::uint64_t late = 0);
    // The agent changed the run's sampling rate at `at` (seconds since the epoch: its budget,
    // --max-overhead), and why: added to its metadata at once (rate_changes, with `at_s` on the
    // session's own clock).
    void rate_change(double at, int from_hz, int to_hz, const std::string& callgraph,
                     const std::string& why);
    // The collector stops while the run goes on on the device: its metadata says so
    // (run_open), and the run continues the session when its agent is back.
    void keep_run_open() { run_open_ = true; }

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
    bool run_open_ = false;
    std::size_t rate_changes_ = 0; // said so far (the first 64 kept: a peer chooses them)
};

// The collector's symbols changed (a setting, a debuginfod answer): every session in memory
// that was named under older ones is named again, on its strand. A live one is rebuilt at once
// from its recording (and the chunks still waiting for the disk); a saved one is let go and
// replays, newly named, when next viewed. The browsers are told each one changed.
void rename_frames(app_context& app);
// On the strand of `e`: the symbol tables its parse wanted (session_model::tables_wanted) are
// read on the loader thread, then the session is named again with them.
void want_tables(const std::shared_ptr<session_entry>& e, app_context& app);

} // namespace collector
