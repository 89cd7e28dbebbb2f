// Sessions on disk, one folder each:
//
//   <root>/<YYYYmmdd_HHMMSS>_<agent>[_N]/    (.staging-XXXXXX/ while an import is written)
//       meta.json        who, when, platform; rewritten when the connection closes
//       chunks/000001.zst  data frames exactly as received (.zst: flag 1, .txt: flag 0),
//                          written and synced before anything parses them; a run's chunk
//                          (flag 5) as 000001.s42.zst, its number in the run in its name, so
//                          the number is on disk exactly when the chunk is
//       metrics.jsonl    one health-metrics object per line
//       owner-import     present only in a recording its owner imported (publish() writes it
//                        into the staged folder): nothing an agent sends can make it
//       fleet-pending    present while the fleet store (ClickHouse) may lack samples of it
//
// A collector killed mid-session leaves meta.json without "ended_at"; the session is still
// listed and replays from its chunks. Ids are folder names and are validated before any path
// is built from them, so no id can reach outside the root.
#pragma once

#include "collector/store/disk_limits.hpp"

#include <boost/json/object.hpp>
#include <boost/system/error_code.hpp>

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace collector {

// The refusals' error codes: 1 the budget is used, 2 the disk is down to its floor, 3 the
// session holds its share.
const boost::system::error_category& disk_category() noexcept;

// The folder's limits and what it holds now, shared by the store and its writers.
struct disk_account {
    disk_limits limits;
    std::filesystem::path root;
    std::atomic<std::uint64_t> used{0}; // counted only with a budget
    // Whether `bytes` more may be written by a session that wrote `session_bytes` already.
    boost::system::error_code admit(std::uint64_t bytes, std::uint64_t session_bytes) const;
};

class session_writer {
public:
    session_writer(std::filesystem::path dir, std::string id, std::uint64_t chunks = 0,
                   std::shared_ptr<disk_account> disk = nullptr);

    const std::string& id() const noexcept { return id_; }
    const std::filesystem::path& dir() const noexcept { return dir_; }

    // Writes a chunk to a temporary name, syncs it and renames it into place. `seq`: its
    // number in its run (0: not a run's).
    boost::system::error_code write_chunk(bool compressed, std::string_view payload,
                                          std::uint64_t seq = 0);
    boost::system::error_code append_metrics(std::string_view json_line);
    // The device's kernel symbols ("ADDRESS NAME" lines), kept beside the chunks.
    boost::system::error_code write_kernel_symbols(std::string_view text);
    boost::system::error_code write_meta(const boost::json::object& meta);
    std::uint64_t chunks_written() const noexcept { return chunks_; }

private:
    std::filesystem::path dir_;
    std::string id_;
    std::uint64_t chunks_ = 0;
    std::uint64_t chunk_bytes_ = 0; // written by this writer (the per-session bound)
    std::shared_ptr<disk_account> disk_;
};

class session_store {
public:
    explicit session_store(std::filesystem::path root);
    // A sessions folder another process may be writing (perfwire compare reads a running
    // collector's): read only — no folder made, no unfinished import or removal cleared away.
    struct read_only_t {};
    static constexpr read_only_t read_only{};
    session_store(std::filesystem::path root, read_only_t)
        : root_(std::move(root)) {}

    const std::filesystem::path& root() const noexcept { return root_; }
    // Bounds what the folder may take from now on (counting what it holds when there is a
    // budget); a floor of UINT64_MAX: the smaller of 1 GiB and 5 % of the filesystem.
    void set_disk_limits(disk_limits limits);
    const disk_limits& limits() const noexcept { return disk_->limits; }
    std::uint64_t disk_used() const noexcept { return disk_->used.load(); }

    // A new session folder named after the start time and the agent (made filename-safe).
    boost::system::result<session_writer> create(std::string_view agent_name,
                                                 const boost::json::object& meta);

    // A session that goes on (a run back after the collector restarted): a writer that
    // numbers on from its chunks, and its metadata live again (its end removed).
    boost::system::result<session_writer> reopen(std::string_view id);

    // A folder that is not a session yet (not listed, removed at the next start if left):
    // an import in progress writes its chunks here. Its writer has no id until publish().
    boost::system::result<session_writer> create_staged();
    // Makes a staged folder a session, named like create(), with `meta`, marked as a recording
    // its owner imported (owner_import()).
    boost::system::error_code publish(session_writer& w, std::string_view agent_name,
                                      const boost::json::object& meta);
    // Whether the session is a recording the collector's owner imported (by the command line
    // or an authenticated upload), not an agent's: only then may its frames be named from the
    // files its paths name on this machine without a build-id to check (symbols/locate.hpp).
    bool owner_import(std::string_view id) const;
    // Removes a staged folder and everything in it.
    void discard(const session_writer& w);

    static bool valid_id(std::string_view id) noexcept;

    // Metadata of every session, newest first, with "imported" (owner_import()); chunk counts
    // come from the folder. Reads every meta.json: call it off the I/O thread.
    std::vector<boost::json::object> list() const;
    // How many sessions there are, without reading them.
    std::size_t count() const;
    // Its chunk files, and the highest run number among their names (0: none).
    std::size_t chunk_count(std::string_view id) const;
    std::uint64_t last_run_seq(std::string_view id) const;
    // When its last chunk was written (seconds since the epoch; 0: none).
    double last_chunk_time(std::string_view id) const;
    std::optional<boost::json::object> meta(std::string_view id) const;
    boost::system::error_code remove(std::string_view id);

    // Calls `chunk(compressed, payload)` for each stored chunk in order, the first
    // `max_chunks` of them. Unreadable chunk files are skipped and counted in the result.
    boost::system::result<std::size_t>
    replay(std::string_view id,
           const std::function<void(bool compressed, std::string_view payload)>& chunk,
           std::size_t max_chunks = SIZE_MAX) const;
    // The fleet store's backlog: a session marked pending may have samples ClickHouse has not
    // got (from when it opens until they are all found there).
    boost::system::error_code mark_fleet_pending(std::string_view id, bool pending) const;
    // The sessions marked pending, oldest first.
    std::vector<std::string> fleet_pending() const;
    // Every line of metrics.jsonl.
    std::vector<std::string> metrics(std::string_view id) const;
    // What write_kernel_symbols kept, if anything (at most max_kernel_symbols_text bytes).
    std::optional<std::string> kernel_symbols(std::string_view id) const;
    // The digest of the kernel symbols (ROOT/.kernels/DIGEST.txt) a session names, if any.
    std::optional<std::string> kernel_ref(std::string_view id) const;

private:
    std::shared_ptr<disk_account> disk_ = std::make_shared<disk_account>();
    std::filesystem::path root_;
};

} // namespace collector
