// Runs that outlive their links (docs/protocol.md, "Runs"): for each, the session that holds
// it, the last chunk number taken into it, and, while no link carries it, the live session
// itself (parked), until its agent is back or its --offline-max passed. I/O thread only. No
// Asio here: widely included.
//
// A run is known by its device and its id together: a peer naming another device's run id
// reaches a run of its own, never the other's session.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace collector {
class agent_link;
class live_session;
class session_store;
} // namespace collector

namespace collector::agents {

class run_book {
public:
    struct run {
        std::string session_id;
        std::uint64_t received = 0; // the highest chunk number taken into the session
        std::uint64_t stored = 0;   // of those, the highest stored and parsed
        std::uint64_t duplicates = 0, missing = 0; // chunks sent twice; numbers never sent
        bool ended = false;                        // the agent said it ended, or it was given up
        bool continuous = false; // --continuous's run: cut into sessions, a user's start ends it
        // Its session is saved on disk, not in memory: this collector restarted mid-run.
        bool on_disk = false;
        std::weak_ptr<agent_link> holder; // the link whose session holds it now
        // While no link carries it: its live session, since when, and until when it waits.
        std::unique_ptr<live_session> parked;
        double link_down_at = 0;
        std::chrono::steady_clock::time_point wait_until{};
        std::uint64_t touched = 0; // the book's clock at its last use
    };

    run_book();
    ~run_book();
    run_book(const run_book&) = delete;
    run_book& operator=(const run_book&) = delete;

    static std::string key(std::string_view device, std::string_view run_id);
    run* find(std::string_view key);
    const run* peek(std::string_view key) const; // (not counted as a use)
    // Made when unknown; the book keeps at most max_runs, forgetting the least recently used
    // that is not parked.
    run& at(const std::string& key);
    static constexpr std::size_t max_runs = 4096;
    // A device's parked runs past the `keep` most recently used, taken out (given up), for
    // their sessions to end: a device cannot park runs without bound.
    std::vector<std::unique_ptr<live_session>> parked_beyond(std::string_view device,
                                                             std::size_t keep);
    static constexpr std::size_t max_parked_per_device = 8;
    // The parked runs whose wait is over, taken out of the book, for their sessions to end.
    std::vector<std::unique_ptr<live_session>> expired(std::chrono::steady_clock::time_point now);
    // Every parked session, taken out (the collector stops).
    std::vector<std::unique_ptr<live_session>> take_all_parked();
    std::size_t parked() const;
    // At start: the runs whose sessions a stop (or a crash) left open, from their metadata
    // (run_id, run_device; no end, or run_open), each at the last chunk number on disk.
    void recall(const session_store& store);

private:
    std::map<std::string, run, std::less<>> runs_;
    std::uint64_t clock_ = 0;
};

} // namespace collector::agents
