// Debug files by build-id from the debuginfod servers in DEBUGINFOD_URLS (libdebuginfod, with
// its own cache), fetched on one thread of their own: naming a frame never waits for the
// network. The first ask for a build-id queues it and answers "pending"; once the queue is
// answered, `arrived(found)` is called (on that thread) so the symbols are looked up again —
// `found` when a debug file came, else only so that no lookup stays "pending" for ever.
//
// The build-ids come from agents: only well-formed ones are asked for, the queue and the
// answers kept are bounded, and a fetch in progress is cut short when the collector stops.
// What agents can make the collector download is bounded too (debuginfod_limits): one file's
// size and time (a server that stalls holds the queue for `stall` at most), the downloads
// begun in any hour, and the bytes fetched in all.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

namespace collector {

struct debuginfod_limits {
    std::uint64_t file_bytes = std::uint64_t{1} << 30;   // one debug file
    std::chrono::seconds stall{15};                      // no byte for this long: given up
    std::chrono::seconds deadline{120};                  // one download at most this long
    std::size_t per_hour = 120;                          // downloads begun in any hour
    std::uint64_t total_bytes = std::uint64_t{16} << 30; // everything fetched since start
};

class debuginfod_fetcher {
public:
    // `urls`: DEBUGINFOD_URLS as the collector was started with (libdebuginfod reads the
    // environment itself); empty: nothing is ever fetched.
    debuginfod_fetcher(std::string urls, std::function<void(bool found)> arrived,
                       debuginfod_limits limits = {});
    ~debuginfod_fetcher();
    debuginfod_fetcher(const debuginfod_fetcher&) = delete;
    debuginfod_fetcher& operator=(const debuginfod_fetcher&) = delete;

    // Ends the fetching thread (a transfer in progress is cut short) and waits for it; later
    // lookups are answered from what was fetched. The destructor does it too.
    void stop();

    // Whether this build has debuginfod support (libdebuginfod was found at build time).
    static bool available() noexcept;

    // The local path of the debug file for `build_id` once fetched; otherwise nullopt, `why`
    // saying what happened and `pending` whether an answer is still to come.
    std::optional<std::string> lookup(const std::string& build_id, std::string& why, bool& pending);

private:
    struct state;
    std::shared_ptr<state> state_;
};

} // namespace collector
