#include "collector/fleet/store.hpp"

#include "collector/log.hpp"

#include <boost/json/object.hpp>

#include <algorithm>
#include <sstream>

namespace collector {

fleet_store::fleet_store(clickhouse_client client, std::size_t max_backlog_bytes,
                         unsigned retention_days)
    : client_(std::move(client))
    , max_backlog_(max_backlog_bytes)
    , retention_days_(retention_days)
    , thread_([this] { run(); }) {}

fleet_store::~fleet_store() {
    stop();
}

void fleet_store::stop() {
    {
        std::lock_guard lock(m_);
        stopping_ = true;
    }
    wake_.notify_all();
    drained_.notify_all();
    if (thread_.joinable())
        thread_.join();
}

void fleet_store::add(fleet_batch b, bool paced) {
    if (!b.samples && b.stacks.empty() && b.frames.empty())
        return;
    {
        std::lock_guard lock(m_);
        if (b.clamped && !clamped_)
            log("fleet store", "samples whose device clock put them after their chunk came are "
                               "stored at its arrival (a clock that jumped, or a peer that "
                               "lies): counted in clamped_samples");
        clamped_ += b.clamped;
        auto bytes = b.bytes();
        if (!paced && queued_bytes_ + bytes > max_backlog_) {
            if (not_kept_ == 0)
                log("fleet store", "the batches waiting for ClickHouse reached " +
                                       std::to_string(max_backlog_ >> 20) +
                                       " MB: newer samples wait in the session folders, and "
                                       "are written from there when the sessions end");
            not_kept_ += b.samples;
            // The samples wait in the folders; the stacks and frames this batch is the first to
            // name are kept (the encoder sends each once: samples written later, live or from
            // the folder, may name them), within a bound of their own.
            b.days.clear();
            b.samples = 0;
            bytes = b.bytes();
            const std::size_t names_bound = std::max(2 * max_backlog_, std::size_t{16} << 20);
            if ((b.stacks.empty() && b.frames.empty()) || queued_bytes_ + bytes > names_bound)
                return;
        }
        b.accounted = bytes;
        queued_bytes_ += bytes;
        queued_samples_ += b.samples;
        ++added_;
        for (const auto& [id, n] : b.sessions)
            outstanding_[id] += n;
        queue_.push_back(std::move(b));
    }
    wake_.notify_one();
}

bool fleet_store::flush(std::chrono::milliseconds timeout) {
    std::unique_lock lock(m_);
    const auto target = added_;
    return drained_.wait_for(lock, timeout, [&] { return done_ >= target || stopping_; }) &&
           done_ >= target;
}

bool fleet_store::wait_room(std::chrono::milliseconds timeout) {
    std::unique_lock lock(m_);
    return drained_.wait_for(lock, timeout, [&] {
        return queued_bytes_ == 0 || queued_bytes_ < max_backlog_ / 2 || stopping_;
    }) && !stopping_;
}

bool fleet_store::writing(std::string_view session) const {
    std::lock_guard lock(m_);
    return outstanding_.find(session) != outstanding_.end();
}

boost::json::object fleet_store::status() const {
    std::lock_guard lock(m_);
    return {{"clickhouse", client_.where()},
            {"database", client_.config().database},
            {"schema", schema_},
            {"written_samples", written_},
            {"waiting_samples", queued_samples_},
            {"waiting_bytes", queued_bytes_},
            {"max_waiting_bytes", max_backlog_},
            {"not_kept_samples", not_kept_},
            {"clamped_samples", clamped_},
            {"retries", retries_},
            {"last_error", last_error_},
            {"retention_days", retention_days_},
            {"dropped_days", dropped_days_}};
}

bool fleet_store::pause(std::chrono::milliseconds d) {
    std::unique_lock lock(m_);
    return !wake_.wait_for(lock, d, [&] { return stopping_; });
}

bool fleet_store::ensure_schema() {
    for (const auto& sql : fleet_schema(client_.config().database)) {
        const bool creates_database = sql.starts_with("CREATE DATABASE");
        auto r = client_.run(sql, {}, 1 << 20, !creates_database);
        if (!r) {
            std::lock_guard lock(m_);
            last_error_ = r.error().message;
            return false;
        }
    }
    // A store made before `seen` gets it (ClickHouse 18.16 has no ADD COLUMN IF NOT EXISTS);
    // its rows count as written when first merged.
    const auto& db = client_.config().database;
    for (const char* table : {"frames", "stacks"}) {
        auto has = client_.run(
            "SELECT count() FROM system.columns WHERE database = " + clickhouse_quote(db) +
            " AND table = '" + table + "' AND name = 'seen' FORMAT TabSeparated");
        if (has && *has == "0\n")
            has = client_.run("ALTER TABLE " + db + "." + table +
                              " ADD COLUMN seen DateTime DEFAULT now()");
        if (!has) {
            std::lock_guard lock(m_);
            last_error_ = has.error().message;
            return false;
        }
    }
    std::lock_guard lock(m_);
    schema_ = true;
    return true;
}

bool fleet_store::expire() {
    const auto& db = client_.config().database;
    const auto cutoff = fleet_date(
        static_cast<std::uint16_t>(std::chrono::duration_cast<std::chrono::hours>(
                                       std::chrono::system_clock::now().time_since_epoch())
                                           .count() /
                                       24 -
                                   retention_days_));
    auto parts = client_.run(
        "SELECT DISTINCT partition FROM system.parts WHERE database = " + clickhouse_quote(db) +
        " AND table = 'samples' AND active FORMAT TabSeparated");
    if (!parts) {
        log("fleet store", "old days were not dropped: " + parts.error().message);
        return false;
    }
    std::istringstream in(*parts);
    std::string day;
    bool dropped = false;
    while (std::getline(in, day)) {
        // ("YYYY-MM-DD": older days sort first)
        if (day.size() != 10 || day >= cutoff)
            continue;
        if (auto r = client_.run("ALTER TABLE " + db + ".samples DROP PARTITION " +
                                 clickhouse_quote(day));
            !r) {
            log("fleet store", "the samples of " + day + " were not dropped: " + r.error().message);
            return false;
        }
        log("fleet store", "dropped the samples of " + day + " (older than " +
                               std::to_string(retention_days_) + " days)");
        dropped = true;
        std::lock_guard lock(m_);
        ++dropped_days_;
    }
    if (!dropped)
        return true;
    // Then the stacks no sample uses, and the frames no stack left uses, written more than two
    // days ago (a newer row may belong to samples on their way; one in use is written again
    // daily). ClickHouse deletes them in the background; on a sharded store (Distributed
    // tables) this is refused, and done on the shards (docs/fleet.md).
    const std::string unused_stack =
        "seen < now() - 172800 AND stack NOT IN (SELECT stack FROM " + db + ".samples)";
    for (const auto& sql : {"ALTER TABLE " + db +
                                ".frames DELETE WHERE seen < now() - 172800 AND frame NOT IN "
                                "(SELECT arrayJoin(frames) FROM " +
                                db + ".stacks WHERE NOT (" + unused_stack + "))",
                            "ALTER TABLE " + db + ".stacks DELETE WHERE " + unused_stack})
        if (auto r = client_.run(sql); !r) {
            log("fleet store",
                "the stacks and frames no sample uses were not dropped: " + r.error().message);
            return false;
        }
    log("fleet store", "asked ClickHouse to drop the stacks and frames no sample uses");
    return true;
}

// Frames and stacks first (written again harmlessly: their tables keep one row per id), then
// each day's samples. A day already written is dropped from the batch, so a retry goes on
// from where the last attempt stopped.
bool fleet_store::write(fleet_batch& b) {
    const auto& db = client_.config().database;
    const auto fail = [&](const failure& f) {
        std::lock_guard lock(m_);
        last_error_ = f.message;
        ++retries_;
        return false;
    };
    if (!b.frames.empty()) {
        if (auto r = client_.run("INSERT INTO " + db +
                                     ".frames (frame, symbol, module, build_id) FORMAT RowBinary",
                                 b.frames);
            !r)
            return fail(r.error());
        b.frames.clear();
    }
    if (!b.stacks.empty()) {
        if (auto r = client_.run("INSERT INTO " + db + ".stacks (stack, frames) FORMAT RowBinary",
                                 b.stacks);
            !r)
            return fail(r.error());
        b.stacks.clear();
    }
    while (!b.days.empty()) {
        auto it = b.days.begin();
        auto& [day, rows] = *it;
        if (rows.uncertain) {
            // The last INSERT of these rows may have landed before its answer was lost.
            auto counted =
                client_.run("SELECT count() FROM " + db +
                            ".samples WHERE session = " + clickhouse_quote(rows.probe_session) +
                            " AND collector = " + clickhouse_quote(rows.probe_collector) +
                            " AND chunk = " + std::to_string(rows.probe_chunk) +
                            " AND day = " + clickhouse_quote(fleet_date(day)));
            if (!counted)
                return fail(counted.error());
            const auto n = std::strtoull(counted->c_str(), nullptr, 10);
            if (n == rows.probe_count) {
                std::lock_guard lock(m_);
                written_ += rows.count;
                queued_samples_ -= rows.count;
                b.days.erase(it);
                continue;
            }
            if (n != 0)
                return fail(failure("clickhouse_error",
                                    "ClickHouse holds " + std::to_string(n) + " of the " +
                                        std::to_string(rows.probe_count) + " samples of chunk " +
                                        std::to_string(rows.probe_chunk) + " of " +
                                        rows.probe_session));
        }
        rows.uncertain = true; // from the moment the request may be sent
        if (auto r = client_.run("INSERT INTO " + db + ".samples FORMAT RowBinary", rows.rows);
            !r) {
            if (r.error().code == "clickhouse_error")
                rows.uncertain = false; // ClickHouse answered: it refused, nothing landed
            return fail(r.error());
        }
        std::lock_guard lock(m_);
        written_ += rows.count;
        queued_samples_ -= rows.count;
        b.days.erase(it);
    }
    return true;
}

void fleet_store::run() {
    auto backoff = std::chrono::milliseconds(500);
    bool failing = false;
    for (;;) {
        {
            std::unique_lock lock(m_);
            const auto until = retention_days_
                                   ? next_expiry_
                                   : std::chrono::steady_clock::now() + std::chrono::hours(24);
            wake_.wait_until(lock, until, [&] {
                return stopping_ || !queue_.empty() || !schema_ ||
                       (retention_days_ && std::chrono::steady_clock::now() >= next_expiry_);
            });
            if (stopping_)
                return;
        }
        const bool ok = [&] {
            if (!schema_ && !ensure_schema())
                return false;
            if (retention_days_ && std::chrono::steady_clock::now() >= next_expiry_) {
                // An hour to the next look whatever this one found: retention that fails (a
                // user without the right to ALTER) never holds up the samples.
                next_expiry_ = std::chrono::steady_clock::now() + std::chrono::hours(1);
                (void)expire();
            }
            std::unique_lock lock(m_);
            if (queue_.empty())
                return true;
            // What waits is written together: one INSERT a table and day for many chunks (at
            // most merge_samples rows, so an INSERT stays one block: one part, all or nothing).
            while (!queue_.front().started && queue_.size() > 1 &&
                   queue_[0].samples + queue_[1].samples <= merge_samples) {
                fleet_batch next = std::move(queue_[1]);
                queue_.erase(queue_.begin() + 1); // (invalidates references: none is held)
                queue_.front().merge(std::move(next));
            }
            // Only this thread erases: the reference stays valid (push_back keeps references).
            auto& b = queue_.front();
            b.started = true;
            lock.unlock();
            if (!write(b))
                return false;
            lock.lock();
            queued_bytes_ -= std::min(queued_bytes_, b.accounted);
            done_ += b.batches;
            for (const auto& [id, n] : b.sessions)
                if (const auto it = outstanding_.find(id);
                    it != outstanding_.end() && (it->second -= std::min(it->second, n)) == 0)
                    outstanding_.erase(it);
            queue_.pop_front();
            return true;
        }();
        if (ok) {
            if (std::exchange(failing, false)) {
                log("fleet store", "writing to ClickHouse at " + client_.where() + " again");
                std::lock_guard lock(m_);
                last_error_.clear();
            }
            backoff = std::chrono::milliseconds(500);
            drained_.notify_all();
            continue;
        }
        if (!std::exchange(failing, true)) {
            std::lock_guard lock(m_);
            log("fleet store", last_error_ + "; the samples wait and are written when it answers");
        }
        if (!pause(backoff))
            return;
        backoff = std::min(backoff * 2, std::chrono::milliseconds(30000));
    }
}

} // namespace collector
