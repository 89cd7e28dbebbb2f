// A run: what the agent profiles, owned by the agent, not by a link, so it outlives one.
//
//   collection ──chunk──▶ outbox (numbered from 1, kept until the collector stored them)
//                             │ attached link: sends what the collector lacks, in order
//                             ▼
//   link A ✕ (reset) ……… link B: `sequence {run, after}` ─▶ sends after+1 … then live
//
// While no link is attached perf keeps recording and the outbox keeps the chunks: in memory,
// then in the spool directory, the oldest dropped (and counted) past their caps. A run ends as it
// did: stopped by the collector, or by itself (the target exited); and when no link came back
// within --offline-max.
#pragma once

#include "agent/collection.hpp"
#include "agent/flight.hpp"
#include "agent/overhead.hpp"
#include "agent/triggers.hpp"

#include <boost/asio/steady_timer.hpp>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <deque>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace agent {

// Where the outbox keeps what its memory does not hold (--spool-dir): a file per chunk,
// written whole (a temporary name, fsync, rename), read back when sent, removed once stored.
// A file a power loss cut short is found at the next start, counted and removed.
class spool_dir {
public:
    // Made if missing; an error when it cannot be written.
    static std::variant<spool_dir, std::string> open(const std::filesystem::path& dir);
    // "" when written, else why not (a full or read-only disk).
    std::string put(std::string_view run, std::uint64_t seq, std::string_view chunk) const;
    std::optional<std::string> get(std::string_view run, std::uint64_t seq) const;
    void remove(std::string_view run, std::uint64_t seq) const;
    struct found {
        std::string run;
        std::uint64_t seq;
        std::uint64_t size;
    };
    // What an earlier start left, whole, in the order it was made (oldest run first); the
    // files that are not whole are removed and counted in `broken`.
    std::vector<found> recover(std::uint64_t& broken) const;
    const std::filesystem::path& path() const noexcept { return dir_; }

private:
    explicit spool_dir(std::filesystem::path dir)
        : dir_(std::move(dir)) {}
    std::filesystem::path file(std::string_view run, std::uint64_t seq) const;
    std::filesystem::path dir_;
};

// The chunks the collector has not confirmed it stored, in the order they were made. Each
// belongs to a run and has its number in that run (from 1); a link sends them by their
// position in the outbox, so the tail of one run and the start of the next go in order.
// Past its memory cap the oldest go to the spool (if there is one, up to its own cap), else
// they are dropped; past the spool's cap its oldest are dropped. Every drop is counted.
class outbox {
public:
    struct held {
        std::uint64_t pos; // in the outbox, from 1
        std::string run;
        std::uint64_t seq;
        std::string chunk;          // flag 1's payload (empty while it is spooled)
        std::uint64_t size;         // of the payload
        bool spooled;               // on disk, not in memory
        std::uint64_t bytes_before; // bytes added before this chunk
    };

    explicit outbox(std::size_t memory_cap, std::optional<spool_dir> spool = std::nullopt,
                    std::uint64_t spool_cap = 0);

    // Keeps `chunk` as the next of `run` (its number returned); past the caps the oldest go
    // first, counted (never the one just added).
    std::uint64_t add(const std::string& run, std::string chunk);
    // The collector has stored `run` up to `seq`: those chunks, and any of older runs before
    // them, are let go. Returns the position just before what is still to send.
    std::uint64_t stored(std::string_view run, std::uint64_t seq);
    // The first chunk held after position `pos`, or nullptr.
    const held* after(std::uint64_t pos) const;
    // Its payload, from memory or the spool; nullopt when the spool lost it (then counted as
    // dropped).
    std::optional<std::string> payload(const held& h);
    // Bytes held after `pos`: what a link that sent up to `pos` still has to send.
    std::uint64_t bytes_after(std::uint64_t pos) const;
    const held* front() const { return held_.empty() ? nullptr : &held_.front(); }
    // Takes back what an earlier start spooled (before anything is added).
    void recover();
    // The agent stops: every chunk still in memory goes to the spool (if there is one, within
    // its cap), for the next start to send.
    void spool_all();

    std::uint64_t last_pos() const noexcept { return next_pos_ - 1; }
    // The run of the last chunk added, and its number there (0: none yet).
    const std::string& last_run() const noexcept { return last_run_; }
    std::uint64_t last_seq() const noexcept { return last_seq_; }
    std::size_t count() const noexcept { return held_.size(); }
    std::size_t bytes() const noexcept { return memory_bytes_ + spooled_bytes_; }
    std::size_t memory_bytes() const noexcept { return memory_bytes_; }
    std::uint64_t spooled_bytes() const noexcept { return spooled_bytes_; }
    std::uint64_t dropped_chunks() const noexcept { return dropped_chunks_; }
    std::uint64_t dropped_bytes() const noexcept { return dropped_bytes_; }
    std::uint64_t broken_files() const noexcept { return broken_; }
    // Why the spool last refused a chunk ("" when it never did).
    const std::string& spool_error() const noexcept { return spool_error_; }

private:
    void let_go_front(bool dropped = false);
    void fit();

    std::size_t memory_cap_;
    std::optional<spool_dir> spool_;
    std::uint64_t spool_cap_;
    std::deque<held> held_;
    std::uint64_t next_pos_ = 1;
    std::string last_run_;
    std::uint64_t last_seq_ = 0;
    std::size_t memory_bytes_ = 0;
    std::uint64_t spooled_bytes_ = 0;
    std::uint64_t added_ = 0; // bytes, ever
    std::uint64_t dropped_chunks_ = 0, dropped_bytes_ = 0, broken_ = 0;
    std::string spool_error_;
};

// 128 random bits as 32 lowercase hex digits (protocol::valid_run_id).
std::string make_run_id();

// Set by SIGUSR1 (a script on the device asking a flight recorder to capture), taken by its
// watch.
std::atomic<bool>& flight_signalled() noexcept;

// A flight recorder's settings (--flight-recorder, or `flight_recorder` in start).
struct flight_settings {
    std::chrono::seconds window{0}; // 0: not a flight recorder
    std::chrono::seconds after{10};
    std::size_t memory_bytes = std::size_t{16} << 20;
    trigger_settings triggers; // what fires on the device (check_triggers passed)
    std::chrono::seconds min_gap{60};
};

// A flight recorder under way: the window held, the captures, the triggers. While no capture
// runs the run's chunks go to the ring, not the outbox; a capture is a run of its own (a new
// id), its window then its chunks in the outbox as any run's.
struct flight_state {
    // `pid`: the process profiled (--trigger-cpu's).
    flight_state(const flight_settings& s, std::optional<int> pid);
    flight_settings settings;
    flight_ring ring;
    capture_plan plan;
    trigger_watch watch;
    std::uint64_t captures = 0;
    // A capture's time is over and its last chunk is being cut: that chunk is the capture's;
    // armed again once it came (or half a second passed with nothing to cut).
    std::optional<flight_clock::time_point> draining;
    bool refusing = false; // the last firing was refused (said once, not every reading)
    // Chunks go to the ring (armed), not the outbox.
    bool holding() const { return !plan.capturing() && !draining; }
};

struct run_state {
    enum class state { idle, profiling, paused };

    run_state(asio::any_io_executor ex, outbox box, std::chrono::seconds offline_max_limit)
        : kept(std::move(box))
        , collection_done(ex, asio::steady_timer::time_point::max())
        , offline_timer(ex)
        , offline_max(offline_max_limit) {}

    std::string id; // made when a run begins from idle; "" before the first
    outbox kept;
    state now = state::idle;
    collection_settings settings;
    std::shared_ptr<collection> current;
    asio::steady_timer collection_done; // cancelled whenever a collection ends
    std::uint64_t lost_samples = 0;

    // The link attached now, if any: told of each chunk, asked whether a flush may go, told
    // why the run ended by itself.
    bool attached = false;
    const void* owner = nullptr; // the session attached
    std::function<void()> on_chunk;
    std::function<bool()> may_flush;
    std::function<void(const std::string& why)> on_end;
    // A flight recorder's news for the link attached: a capture begins (what fired, when, the
    // window's seconds) or ends (empty `capture`: armed again).
    std::function<void(const std::string& reason, const std::string& capture, double at,
                       double window_s)>
        on_flight;
    flight_settings flight_asked;         // for the next run
    std::shared_ptr<flight_state> flight; // the run under way's, if it is a flight recorder
    // The last captures (each a run of its own): what fired, when, the window before it, and
    // its last chunk once it is over. A link that comes back is told them with `sequence`, so
    // a capture that began or ended while no link was there is still one session, said to be
    // a capture (the live notices were lost with the link).
    struct capture_note {
        std::string run, trigger;
        double at = 0, window_s = 0;
        std::optional<std::uint64_t> last_seq; // set once over
    };
    std::deque<capture_note> capture_notes;
    // --max-overhead (or a start's max_overhead): the budget for the next run (0: none), and
    // the run under way's governor and meter while one holds it to a budget.
    double overhead_asked = 0;
    std::optional<overhead_governor> governor;
    cost_meter meter;
    const void* watcher = nullptr; // the session whose loop watches the cost (one at a time)
    // The settings a collection runs with: the run's, at the governor's rate and call graphs.
    collection_settings effective() const {
        auto s = settings;
        if (governor) {
            s.record.frequency = governor->hz();
            // Every rate of the governor's ladder held by perf at once, where the rate is one.
            const auto& ladder = governor->ladder();
            if (std::find(ladder.begin(), ladder.end(), s.record.frequency) != ladder.end())
                s.record.ladder = ladder;
            // Not woken per sample: at 300 Hz that costs more than 999 Hz buffered does, and a
            // cost that falls as the rate rises cannot be governed.
            s.prompt = false;
            if (!governor->dwarf() && s.record.callgraph == "dwarf")
                s.record.callgraph = "fp";
        }
        return s;
    }
    static constexpr std::size_t max_capture_notes = 16;
    // Why the run ended while no link was attached: said to the next one, after its data.
    std::optional<std::string> ended_offline;

    // --offline-max: a run with no link for this long ends.
    asio::steady_timer offline_timer;
    std::chrono::seconds offline_max;
    bool offline_expired = false;
};

} // namespace agent
