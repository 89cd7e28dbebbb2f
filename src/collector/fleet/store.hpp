// The fleet store: every sample a live session takes, written to ClickHouse in batches by a
// thread of its own, so that neither the I/O thread nor a session's strand ever waits for it.
//
// The schema is made when missing. A batch is written frames, stacks, then its samples one day
// (one partition) at a time, each INSERT one part, there whole or not at all. When ClickHouse
// is down or slow the batches wait, in order, up to a bound in bytes (`/api/status` `fleet`),
// and are written when it is back; a batch whose INSERT may have landed before its answer was
// lost is counted in ClickHouse first, so a retry never writes it twice. Past the bound the
// newest batches are not kept, and counted (the session folders still hold every chunk).
#pragma once

#include "collector/fleet/clickhouse.hpp"
#include "collector/fleet/rows.hpp"

#include <boost/json/fwd.hpp>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <thread>

namespace collector {

class fleet_store {
public:
    fleet_store(clickhouse_client client, std::size_t max_backlog_bytes = std::size_t{256} << 20);
    ~fleet_store();
    fleet_store(const fleet_store&) = delete;
    fleet_store& operator=(const fleet_store&) = delete;

    // Any thread: queues a batch (or counts it as not kept, past the bound).
    void add(fleet_batch b);
    // Waits until every batch queued now is written, at most `timeout`; whether it was.
    bool flush(std::chrono::milliseconds timeout);
    // {"clickhouse", "database", "schema", "written_samples", "waiting_samples",
    //  "waiting_bytes", "max_waiting_bytes", "not_kept_samples", "retries", "last_error"}
    boost::json::object status() const;
    const clickhouse_client& client() const noexcept { return client_; }
    // Stops the thread; what is still waiting stays unwritten.
    void stop();

private:
    static constexpr std::uint64_t merge_samples = 200'000;
    void run();
    bool ensure_schema();
    bool write(fleet_batch& b);
    // Sleeps for the back-off after a failure; false once stopping.
    bool pause(std::chrono::milliseconds d);

    clickhouse_client client_;
    const std::size_t max_backlog_;

    mutable std::mutex m_;
    std::condition_variable wake_, drained_;
    std::deque<fleet_batch> queue_;
    std::size_t queued_bytes_ = 0;
    std::uint64_t queued_samples_ = 0, written_ = 0, not_kept_ = 0, retries_ = 0;
    std::uint64_t added_ = 0, done_ = 0; // batches
    std::string last_error_;
    bool schema_ = false, stopping_ = false;
    std::thread thread_;
};

} // namespace collector
