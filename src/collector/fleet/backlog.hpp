// The fleet store's backlog: sessions whose samples ClickHouse may lack, written there from
// their folders. Nothing the collector takes is lost to the fleet store because ClickHouse was
// down, slow, or the collector stopped:
//
//   - a session is marked in its folder (session_store::mark_fleet_pending) when it opens with
//     a fleet store, and an import when it is kept;
//   - once it has ended and none of its batches waits in the store, a thread of its own asks
//     ClickHouse which of its chunks it holds; when it holds every sample the mark goes;
//   - otherwise the session is read again from its folder (build_model) and the chunks
//     ClickHouse lacks are queued as a live session's would have been (the same chunk numbers,
//     the same rows), never faster than the store writes them; once written, the mark goes.
//
// At start every marked session is checked: what was waiting when the collector stopped, what
// was not kept past the store's bound, imports made while ClickHouse was away. A chunk
// ClickHouse holds is never written again, so checking twice writes nothing twice.
#pragma once

#include <boost/json/object.hpp>

#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <set>
#include <string>
#include <string_view>
#include <thread>

namespace collector {

class fleet_store;
class session_store;
class symbolizer;

// The device a session's rows name in the fleet store: the agent's host name (its own word;
// its agent's name when it gave none), under the label of the enrollment token that admitted
// it ("LABEL/hostname", --agent-token TOKEN:LABEL): only that token's holders write into the
// histories of that label's devices (a '/' in the agent's own name becomes '_').
std::string fleet_device(const boost::json::object& meta, std::string_view agent);

class fleet_backlog {
public:
    // `collector`: this collector's name in the store; `allowance`: the memory a session read
    // again may hold (its model folds past it, as a live one does).
    fleet_backlog(const session_store& sessions, fleet_store& fleet, symbolizer* names,
                  std::string collector, std::size_t allowance);
    ~fleet_backlog();
    fleet_backlog(const fleet_backlog&) = delete;
    fleet_backlog& operator=(const fleet_backlog&) = delete;

    // Any thread. A live session opened: marked, and left alone until it ends.
    void opened(const std::string& id);
    // It ended (its metadata written): checked once its batches are written.
    void ended(const std::string& id);
    // A session kept whole at once (an import): marked and checked.
    void added(const std::string& id);
    // {"sessions": marked and not live, "writing": the session being written from its
    //  folder, "written_samples": samples written from folders, "last_error"}
    boost::json::object status() const;
    void stop();

private:
    void run();
    // Checks one session, writing what ClickHouse lacks; false when ClickHouse failed (the
    // session stays marked and is checked again later).
    bool settle(const std::string& id);

    const session_store& sessions_;
    fleet_store& fleet_;
    symbolizer* names_;
    const std::string collector_;
    const std::size_t allowance_;

    mutable std::mutex m_;
    std::condition_variable wake_;
    std::set<std::string> live_;
    std::set<std::string> due_; // ended since the last look
    std::size_t marked_ = 0;    // of the last look, less those settled since
    std::string writing_, last_error_;
    std::uint64_t written_ = 0;
    bool stopping_ = false, woken_ = true;
    std::thread thread_;
};

} // namespace collector
