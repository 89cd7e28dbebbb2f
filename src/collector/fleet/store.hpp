// The fleet store: every sample a live session takes, written to ClickHouse in batches by a
// thread of its own, so that neither the I/O thread nor a session's strand ever waits for it.
//
// The schema is made when missing. A batch is written frames, stacks, then its samples one day
// (one partition) at a time, each INSERT one part, there whole or not at all. When ClickHouse
// is down or slow the batches wait, in order, up to a bound in bytes (`/api/status` `fleet`),
// and are written when it is back; a batch whose INSERT may have landed before its answer was
// lost is counted in ClickHouse first, so a retry never writes it twice. Past the bound the
// newest batches are not kept, and counted: the session folders still hold every chunk, and
// the backlog (fleet/backlog.hpp) writes what ClickHouse lacks from them.
#pragma once

#include "collector/fleet/clickhouse.hpp"
#include "collector/fleet/rows.hpp"

#include <boost/json/fwd.hpp>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>

namespace collector {

class fleet_store {
public:
    // `retention_days`: the samples of days older than that are dropped (whole partitions,
    // looked for at start and every hour); 0 keeps them all.
    fleet_store(clickhouse_client client, std::size_t max_backlog_bytes = std::size_t{256} << 20,
                unsigned retention_days = 0);
    ~fleet_store();
    fleet_store(const fleet_store&) = delete;
    fleet_store& operator=(const fleet_store&) = delete;

    // Any thread: queues a batch (or counts it as not kept, past the bound). `paced`: queued
    // whatever the bound (its caller waited for room: the backlog).
    void add(fleet_batch b, bool paced = false);
    // Waits until every batch queued now is written, at most `timeout`; whether it was.
    bool flush(std::chrono::milliseconds timeout);
    // Waits (at most `timeout`) until what waits is under half the bound, or nothing waits:
    // whether it is.
    bool wait_room(std::chrono::milliseconds timeout);
    // Whether batches of this session wait to be written.
    bool writing(std::string_view session) const;
    // {"clickhouse", "database", "schema", "written_samples", "waiting_samples",
    //  "waiting_bytes", "max_waiting_bytes", "not_kept_samples", "clamped_samples", "retries",
    //  "last_error",
    //  "retention_days", "dropped_days"}
    boost::json::object status() const;
    const clickhouse_client& client() const noexcept { return client_; }
    // Stops the thread; what is still waiting stays unwritten.
    void stop();

private:
    static constexpr std::uint64_t merge_samples = 200'000;
    void run();
    bool ensure_schema();
    // Drops the samples' partitions (days) older than the retention.
    bool expire();
    bool write(fleet_batch& b);
    // Sleeps for the back-off after a failure; false once stopping.
    bool pause(std::chrono::milliseconds d);

    clickhouse_client client_;
    const std::size_t max_backlog_;
    const unsigned retention_days_;
    std::chrono::steady_clock::time_point next_expiry_{}; // (the first: once the schema is made)
    std::uint64_t dropped_days_ = 0;

    mutable std::mutex m_;
    std::condition_variable wake_, drained_;
    std::deque<fleet_batch> queue_;
    std::size_t queued_bytes_ = 0;
    std::uint64_t queued_samples_ = 0, written_ = 0, not_kept_ = 0, retries_ = 0, clamped_ = 0;
    std::uint64_t added_ = 0, done_ = 0;                            // batches
    std::map<std::string, std::uint64_t, std::less<>> outstanding_; // batches a session has queued
    std::string last_error_;
    bool schema_ = false, stopping_ = false;
    std::thread thread_;
};

} // namespace collector
