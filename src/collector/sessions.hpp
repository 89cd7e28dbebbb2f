// Every session the collector knows, live (an agent connected now) or saved on disk.
//
// A session's model is touched only on its strand of the shared thread pool: chunks are
// stored and parsed there, and views are computed there, so parsing never runs on the thread
// that serves HTTP and no mutex guards the model. A saved session is replayed from disk the
// first time a view asks for it, and stays loaded until the saved sessions in memory exceed
// their budget: then the least recently used are unloaded (on their strands) and replay again
// when next opened.
#pragma once

#include "collector/session_model.hpp"
#include "collector/store/session_store.hpp"

#include <boost/asio/strand.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/json/object.hpp>

#include <atomic>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace collector {

namespace asio = boost::asio;

struct session_entry {
    session_entry(std::string session_id, asio::thread_pool& pool)
        : id(std::move(session_id))
        , strand(pool.get_executor()) {}

    const std::string id;
    asio::strand<asio::thread_pool::executor_type> strand;

    // Strand only.
    std::unique_ptr<session_model> model;
    std::optional<session_writer> writer; // live sessions
    bool loaded = false;
    // Chunks that reached memory but not the disk yet (a full disk, a removed folder): kept,
    // up to max_unsaved_bytes, and written before the next chunk once there is room; beyond
    // that the oldest are given up and counted. And why the last write failed.
    struct unsaved_chunk {
        bool compressed = false;
        std::string payload;
        std::uint64_t samples = 0;
        std::uint64_t seq = 0; // its number in its run (0: not a run's)
    };
    std::deque<unsaved_chunk> unsaved;
    std::size_t unsaved_bytes = 0;
    std::uint64_t dropped_chunks = 0, dropped_samples = 0;
    std::string store_error;
    // Chunks that brought nothing (no sample, no perf stat report): past max_junk_bytes of
    // them, such chunks are no longer stored, only counted (refused_*).
    static constexpr std::uint64_t max_junk_bytes = std::uint64_t{4} << 20;
    std::uint64_t junk_bytes = 0, refused_chunks = 0, refused_bytes = 0;
    // Rebuilds because a build-id came after its module was named without one.
    int stale_rebuilds = 0;
    // A live session named again (new symbols, a build-id, the kernel's symbols): its model is
    // built off the strand, from the chunks on disk when it began, while views are answered
    // from the model in place; what arrives meanwhile is kept here and taken by the new model
    // when it is swapped in (live_session.cpp).
    struct rebuild {
        std::vector<std::pair<bool, std::string>> chunks; // (compressed, payload), in order
        std::vector<std::string> metrics;                 // records, in order
        bool again = false; // asked for again meanwhile: one more follows
    };
    std::shared_ptr<rebuild> rebuilding;
    // A live session's work in arrival order (chunks, metrics records, the kernel's symbols,
    // the end), held up behind a chunk whose parse needs symbol tables not in memory yet:
    // they are read on the collector's loader thread, not on the pool, and the work goes on
    // here once they are (live_session.cpp).
    struct queued {
        std::function<void(std::string_view text)> run; // with no text: a chunk decompresses
    };
    std::deque<queued> work;
    // Symbol tables a parse wanted are being read (live_session.cpp, want_tables); how many
    // times they were read for this session and it was named again.
    bool reading_tables = false;
    int table_rounds = 0;
    std::uint64_t unsaved_chunks() const { return unsaved.size() + dropped_chunks; }
    std::uint64_t unsaved_samples() const;

    // Published for listings and SSE (written on the strand, read anywhere).
    std::atomic<std::uint64_t> samples{0}, chunks{0}, lost_samples{0}, version{0};
    std::atomic<std::uint64_t> threads{0}, span_ns{0}; // threads sampled; first to last sample
    std::atomic<std::size_t> memory_bytes{0};          // of the loaded model; 0 when not loaded
    std::atomic<std::size_t> sample_bytes{0};          // of it, the samples' (whole and folded)
    std::atomic<std::uint64_t> folded{0};              // samples in folded rows
    // What its model may hold: set by the registry from the memory budget (I/O thread), taken
    // by the model on the strand (session_model::allowance).
    std::atomic<std::size_t> allowance{SIZE_MAX};
    std::atomic<bool> fitting{false}; // a fit() posted to the strand has not run yet
    std::atomic<bool> live{false};    // an agent is connected now
    // Live, its run's link down since then (seconds since the epoch; 0: the link is up).
    std::atomic<double> link_down_since{0};
    // Kernel frames stay unnamed and the device's kernel symbols were not asked for yet.
    std::atomic<bool> wants_kernel_symbols{false};

    std::uint64_t last_used = 0; // I/O thread: the registry's clock at the last find()

    // What a live session is, as its model names it now: the process sampled most, its
    // events (written by publish_counts on the strand, read by listings anywhere).
    struct label {
        std::string process;
        std::vector<std::string> events;
        bool operator==(const label&) const = default;
    };
    label named() const {
        std::lock_guard lock(label_mutex_);
        return label_;
    }
    void name(label l) {
        std::lock_guard lock(label_mutex_);
        label_ = std::move(l);
    }

private:
    mutable std::mutex label_mutex_;
    label label_;
};

// What the sessions' models hold against the memory budget (session_registry::enforce).
struct memory_use {
    std::size_t budget = 0;    // every session's model together (--memory-budget)
    std::size_t live = 0;      // held by live sessions' models
    std::size_t saved = 0;     // by saved sessions loaded in memory
    std::size_t kernel = 0;    // by devices' kernel symbol tables (each distinct one once)
    std::size_t symbols = 0;   // by modules' symbol tables (each file's once)
    std::size_t allowance = 0; // what each live session may hold now
    std::size_t live_sessions = 0, saved_loaded = 0;
    std::uint64_t folded = 0; // samples of live sessions folded into per-interval rows
    // The least a live session is allowed, however many share the budget: below it every
    // session folds to its widest intervals and the budget may be exceeded (said in the log).
    static constexpr std::size_t least_allowance = std::size_t{1} << 20;
};

class session_registry {
public:
    // `budget_bytes`: how much memory loaded saved sessions may hold (live ones always stay).
    // `names`: the collector's symbols, for the models of live sessions (session_model).
    session_registry(session_store& store, asio::thread_pool& pool,
                     std::size_t budget_bytes = std::size_t{2} << 30, symbolizer* names = nullptr);

    session_store& store() noexcept { return store_; }

    // A new live session for an agent (creates its folder). Called on the I/O thread.
    boost::system::result<std::shared_ptr<session_entry>>
    create_live(std::string_view agent_name, const boost::json::object& meta);
    // A saved session made live again (a run back after the collector restarted): its folder
    // reopened for writing; its model is loaded on its strand before its next chunk
    // (live_session::reopen). Called on the I/O thread.
    boost::system::result<std::shared_ptr<session_entry>> reopen_live(std::string_view id);
    // A saved session whose model was built as it was stored (an import): in memory at once,
    // no replay.
    std::shared_ptr<session_entry> adopt(std::string id, std::unique_ptr<session_model> model);
    // A live or saved session; nullptr when the id is unknown or invalid. Counts as a use
    // (the cache of loaded saved sessions keeps the most recently used).
    std::shared_ptr<session_entry> find(std::string_view id);
    // A session already known, without counting a use or touching the cache: what a notice
    // about a new chunk needs (its cost must not grow with the number of sessions).
    std::shared_ptr<session_entry> known(std::string_view id) const;
    // Removed (deleted, or ended without a sample): a listing read from disk meanwhile leaves
    // it out (gone).
    void forget(std::string_view id);
    bool gone(std::string_view id) const;
    static constexpr std::size_t max_gone = 4096; // ids remembered as gone
    bool is_live(std::string_view id) const;
    void set_live(std::string_view id, bool live);
    // Every session known now, live or saved (I/O thread).
    std::vector<std::shared_ptr<session_entry>> entries() const;
    // Memory held by loaded saved sessions, as last published.
    std::size_t saved_bytes() const;

    // The memory budget: `total` bytes for every session's model, live and saved; one live
    // session at most `live_cap`.
    void set_memory_budget(std::size_t total, std::size_t live_cap);
    // I/O thread, once a second: keeps the models within the budget. Three quarters of it are
    // for models and the kernel tables they hold (the rest for what connections and views
    // hold meanwhile). Saved sessions may
    // keep up to a quarter of that (and --cache-mb), the least recently used unloaded past it;
    // the live sessions share the rest equally (at most --live-mb each), and one over its
    // share folds its oldest samples on its strand (session_model::fit).
    memory_use enforce();
    // What the models hold now, and each live session's allowance as last enforced.
    memory_use memory() const;
    // What one saved session's model may hold (an import, a session opened from disk).
    std::size_t saved_allowance() const noexcept { return saved_share(); }

private:
    void evict_over_budget(const session_entry* keep);
    void evict_saved_over(std::size_t limit, const session_entry* keep);
    // What loaded saved sessions may hold together, and one of them at most.
    std::size_t saved_share() const noexcept;

    session_store& store_;
    asio::thread_pool& pool_;
    std::map<std::string, std::shared_ptr<session_entry>, std::less<>> entries_;
    std::set<std::string, std::less<>> live_;
    // The ids forgotten lately (at most max_gone), each with when it was forgotten; the order,
    // oldest first, may still hold an id made again since (its stamp then no longer matches).
    std::map<std::string, std::uint64_t, std::less<>> gone_;
    std::deque<std::pair<std::string, std::uint64_t>> gone_order_;
    std::uint64_t gone_count_ = 0;
    std::size_t budget_;
    std::size_t total_budget_ = SIZE_MAX, live_cap_ = SIZE_MAX;
    memory_use memory_;
    std::uint64_t clock_ = 0;
    symbolizer* names_;
};

// On the entry's strand: the counts listings and notices show, from its model.
void publish_counts(session_entry& e);

// What a new model of a session starts from besides its folder: what the model in place
// learned that the folder may not hold (build-ids, the kernel's symbols and why they are
// missing), and the chunks still waiting for the disk.
struct model_seed {
    std::map<std::string, std::string> device_build_ids;
    std::shared_ptr<const kernel_symbols> kernel;
    std::string kernel_note;
    std::vector<std::pair<bool, std::string>> unsaved;
};
model_seed seed_of(const session_entry& e);
// A session's model made from its folder (the first `max_chunks` chunks, then the seed's
// unsaved ones), its frames named by `names` (when given) for the builds and kernel that ran.
// The model keeps within `allowance` bytes as it is built (session_model::fit). Touches no
// entry: runs anywhere. `added`: as session_model::ingest's, with the model (its `chunks - 1`
// is the chunk's number, as a live session counted it).
using samples_added = std::function<void(session_model&, std::size_t from, std::size_t to)>;
std::unique_ptr<session_model> build_model(const session_store& store, const std::string& id,
                                           symbolizer* names, std::size_t allowance,
                                           const model_seed& seed, std::size_t max_chunks,
                                           const samples_added& added = nullptr);
// On the entry's strand: the session's model made again (build_model, all its chunks, within
// the entry's allowance) and put in place.
void load_model(session_entry& e, const session_store& store, symbolizer* names);
// On the entry's strand: replays a saved session from disk if it is not in memory yet.
void ensure_loaded(session_entry& e, const session_store& store, symbolizer* names = nullptr);

inline constexpr std::size_t max_unsaved_bytes = std::size_t{64} << 20;
inline constexpr int max_stale_rebuilds = 4;

// What became of a chunk a live session took, for its log.
struct chunk_taken {
    bool parsed = true;         // false: unreadable, skipped
    bool stored = true;         // false: kept in memory; `store_error` says why
    bool saved_again = false;   // the chunks kept in memory reached the disk with this one
    bool unsaved_noted = false; // what the recording lacks changed, and the metadata says so
    bool first_refused = false; // the first chunk refused for bringing nothing
};
// On the strand of a live session, one chunk as it arrived: stored, disk first, so a crash
// after it loses nothing that arrived (a chunk the disk refuses is kept in memory, at most
// max_unsaved_bytes, written first once there is room, and the metadata says meanwhile what the
// recording lacks, so a restart still does); parsed by `parse` (false: unreadable); its counts
// published. Past session_entry::max_junk_bytes of chunks that brought nothing (no sample, no
// perf stat report), a chunk is parsed first and stored only if it brings something: an agent
// streaming junk fills no disk. A rebuild under way (rebuilding) gets the chunk too.
// `seq`: the chunk's number in its run (0: not a run's), kept in its file's name.
chunk_taken take_chunk(session_entry& e, const session_store& store, bool compressed,
                       std::string_view payload, const std::function<bool()>& parse,
                       std::uint64_t seq = 0);

} // namespace collector
