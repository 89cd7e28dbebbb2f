// What a live session's samples become in the fleet store (ClickHouse): rows of the samples
// table, and the stacks and frames they name. A frame is identified by a hash of its symbol,
// module and build-id, a stack by a hash of its frames (leaf first), so every collector gives
// the same stack the same id and each is stored once however many write it. Encoded in
// ClickHouse's RowBinary format. No I/O here.
#pragma once

#include "collector/model/profile.hpp"

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

namespace collector {

// The tables, in the order they are written (frames, then stacks, then samples: a sample
// never names a stack the store has not got). Kept to SQL ClickHouse 18.16 accepts.
std::vector<std::string> fleet_schema(std::string_view database);
// A sharded store (docs/fleet.md): on every shard of `cluster`, the same tables named
// TABLE_local; on the servers collectors write to, a Distributed table of each name over them
// (samples spread evenly, a stack or frame on the shard its id chooses, so each is stored once).
// The collector then finds its tables there and writes and asks as it would of one server.
std::vector<std::string> fleet_shard_schema(std::string_view database);
std::vector<std::string> fleet_distributed_schema(std::string_view database,
                                                  std::string_view cluster);

// One chunk's rows. The samples are split by day (the table's partition), so that each INSERT
// makes one part: it is there whole or not at all, and a retry can ask whether it is.
struct fleet_batch {
    struct day_rows {
        std::string rows; // RowBinary, the samples table's columns in order
        std::uint64_t count = 0;
        bool uncertain = false; // sent once without an answer: ask ClickHouse before again
        // One chunk's rows among them, by which ClickHouse is asked whether an INSERT whose
        // answer was lost landed (it landed whole or not at all: one INSERT, one part).
        std::string probe_session, probe_collector;
        std::uint32_t probe_chunk = 0;
        std::uint64_t probe_count = 0;
    };
    std::map<std::uint16_t, day_rows> days; // by day since the epoch
    std::string stacks, frames;             // RowBinary rows not sent before by this session
    std::vector<std::uint64_t> stack_ids, frame_ids; // of those rows, in order
    std::uint64_t samples = 0;
    // Of them, samples whose perf time claimed a moment after the chunk came: put at its arrival.
    std::uint64_t clamped = 0;
    std::size_t bytes() const noexcept;
    std::size_t accounted = 0; // bytes() when queued (the store's count of what waits)
    std::uint64_t batches = 1; // chunks merged into it (the store writes several at once)
    std::map<std::string, std::uint64_t> sessions; // the chunks of each session in it
    bool started = false;                          // being written: nothing more is merged into it

    // Appends `o`'s rows to these (one INSERT per table and day for both).
    void merge(fleet_batch&& o);
};

// A day since the epoch as ClickHouse writes a Date: "2026-11-27".
std::string fleet_date(std::uint16_t day);

// Per session: what its samples are called in the store, and the ids of the stacks and frames
// it has made rows for already. Lives beside the session's model (the same node and frame ids).
class fleet_encoder {
public:
    struct origin {
        std::string collector; // which collector wrote it (several may share the store)
        std::string device;    // the agent's hostname
        std::string session;
        // Wall-clock time, by the collector's clock, of the session's start, in ns since the
        // epoch: a sample's time in the store is this plus its distance from the session's
        // first sample (the profile's first_time(), the same in a model made again).
        std::uint64_t wall_start_ns = 0;
    };
    explicit fleet_encoder(origin o)
        : origin_(std::move(o)) {}

    // The samples [from, to) of `p` (kept whole: call before the model folds them), with the
    // device's build-ids by module, as chunk `chunk`'s rows. `received_ns`: when the chunk
    // came, by the collector's clock. The device's perf clock only spaces the samples: one
    // that claims a time after the chunk came (a broken or hostile clock: samples a day apart
    // in one chunk would make a partition per day) is put at the chunk's arrival and counted
    // (fleet_batch::clamped), so a chunk's rows span at most the session's real time.
    fleet_batch encode(const profile& p, std::size_t from, std::size_t to, std::uint32_t chunk,
                       const std::map<std::string, std::string>& build_ids,
                       std::uint64_t received_ns);

    static std::uint64_t frame_id(std::string_view symbol, std::string_view module,
                                  std::string_view build_id);

private:
    std::uint64_t node_id(const profile& p, std::uint32_t node, fleet_batch& b,
                          const std::map<std::string, std::string>& build_ids);
    std::uint64_t frame_of(const profile& p, std::uint32_t frame, fleet_batch& b,
                           const std::map<std::string, std::string>& build_ids);

    origin origin_;
    std::vector<std::uint64_t> node_ids_, frame_ids_; // 0: not made yet
    std::vector<std::string> frame_builds_;           // the build-id each frame was named with
    std::size_t builds_known_ = 0;                    // build_ids.size() at the last encode
    std::uint64_t sent_since_ns_ = 0; // when the ids above were last forgotten (once a day)
};

} // namespace collector
