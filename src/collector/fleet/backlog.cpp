#include "collector/fleet/backlog.hpp"

#include "collector/fleet/store.hpp"
#include "collector/log.hpp"
#include "collector/sessions.hpp"
#include "collector/store/session_store.hpp"

#include <algorithm>
#include <chrono>
#include <map>
#include <sstream>
#include <vector>

namespace collector {

std::string fleet_device(const boost::json::object& meta, std::string_view agent) {
    const auto text = [&](const char* key) {
        const auto* v = meta.if_contains(key);
        return v && v->is_string() ? std::string(v->as_string()) : std::string();
    };
    auto name = text("hostname");
    if (name.empty())
        name = agent;
    // '/' is the label's alone: no agent names itself into a labelled token's devices.
    std::replace(name.begin(), name.end(), '/', '_');
    const auto label = text("enrolled_as");
    return label.empty() ? name : label + "/" + name;
}
namespace json = boost::json;

namespace {

// How long the thread rests between checks of what is marked when nothing wakes it, and after
// ClickHouse failed.
constexpr auto rest = std::chrono::seconds(30);

std::uint64_t number_of(const json::object& o, const char* key, std::uint64_t otherwise) {
    const auto* v = o.if_contains(key);
    if (!v || !v->is_number())
        return otherwise;
    return v->is_double() ? static_cast<std::uint64_t>(std::max(0.0, v->as_double()))
                          : v->to_number<std::uint64_t>();
}

// The chunks of a session ClickHouse holds (written by this collector), with their samples;
// TabSeparated "chunk\tcount".
result<std::map<std::uint32_t, std::uint64_t>> chunks_held(const clickhouse_client& ch,
                                                           const fleet_encoder::origin& o) {
    auto answer = ch.run("SELECT chunk, count() FROM " + ch.config().database +
                         ".samples WHERE device = " + clickhouse_quote(o.device) +
                         " AND session = " + clickhouse_quote(o.session) + " AND collector = " +
                         clickhouse_quote(o.collector) + " GROUP BY chunk FORMAT TabSeparated");
    if (!answer)
        return answer.error();
    std::map<std::uint32_t, std::uint64_t> held;
    std::istringstream in(*answer);
    std::uint64_t chunk = 0, n = 0;
    while (in >> chunk >> n)
        held[static_cast<std::uint32_t>(chunk)] = n;
    return held;
}

std::uint64_t sum(const std::map<std::uint32_t, std::uint64_t>& held) {
    std::uint64_t n = 0;
    for (const auto& [chunk, count] : held)
        n += count;
    return n;
}

} // namespace

fleet_backlog::fleet_backlog(const session_store& sessions, fleet_store& fleet, symbolizer* names,
                             std::string collector, std::size_t allowance)
    : sessions_(sessions)
    , fleet_(fleet)
    , names_(names)
    , collector_(std::move(collector))
    , allowance_(allowance)
    , marked_(sessions.fleet_pending().size()) // (what /api/status says before the first look)
    , thread_([this] { run(); }) {}

fleet_backlog::~fleet_backlog() {
    stop();
}

void fleet_backlog::stop() {
    {
        std::lock_guard lock(m_);
        stopping_ = true;
    }
    wake_.notify_all();
    if (thread_.joinable())
        thread_.join();
}

void fleet_backlog::opened(const std::string& id) {
    {
        std::lock_guard lock(m_); // live before marked: a look never takes it for an ended one
        live_.insert(id);
    }
    (void)sessions_.mark_fleet_pending(id, true);
}

void fleet_backlog::ended(const std::string& id) {
    {
        std::lock_guard lock(m_);
        live_.erase(id);
        due_.insert(id);
        woken_ = true;
    }
    wake_.notify_all();
}

void fleet_backlog::added(const std::string& id) {
    (void)sessions_.mark_fleet_pending(id, true);
    ended(id);
}

json::object fleet_backlog::status() const {
    std::lock_guard lock(m_);
    return {{"sessions", marked_ + due_.size()},
            {"writing", writing_},
            {"written_samples", written_},
            {"last_error", last_error_}};
}

void fleet_backlog::run() {
    std::chrono::milliseconds pause = rest;
    for (;;) {
        {
            std::unique_lock lock(m_);
            wake_.wait_for(lock, pause, [&] { return stopping_ || woken_; });
            if (stopping_)
                return;
            woken_ = false;
        }
        auto marked = sessions_.fleet_pending();
        {
            std::lock_guard lock(m_);
            std::erase_if(marked, [&](const std::string& id) { return live_.count(id) != 0; });
            marked_ = marked.size();
            due_.clear();
        }
        bool failed = false, queued = false;
        for (const auto& id : marked) {
            if (std::lock_guard lock(m_); stopping_)
                return;
            if (fleet_.writing(id)) // (a session that just ended: its last chunks)
                queued = true;
            else if (failed || !settle(id))
                failed = true; // ClickHouse failed: the rest another time
            else if (std::lock_guard lock(m_); marked_)
                --marked_;
        }
        std::lock_guard lock(m_);
        // A session whose batches were still queued: again in a moment. After a failure, or
        // with nothing left: when woken, or in a while.
        pause = queued && !failed ? std::chrono::milliseconds(1000) : rest;
    }
}

bool fleet_backlog::settle(const std::string& id) {
    const auto meta = sessions_.meta(id);
    if (!meta) { // deleted meanwhile
        (void)sessions_.mark_fleet_pending(id, false);
        return true;
    }
    const auto text = [&](const char* key) {
        const auto* v = meta->if_contains(key);
        return v && v->is_string() ? std::string(v->as_string()) : std::string();
    };
    // Named as the live session named its rows (live_session::open).
    fleet_encoder::origin o;
    o.collector = collector_;
    o.device = fleet_device(*meta, text("agent"));
    o.session = id;
    const auto* started = meta->if_contains("started_at");
    o.wall_start_ns = static_cast<std::uint64_t>(
        std::max(started && started->is_number() ? started->to_number<double>() : 0.0, 0.0) * 1e9);
    // No sample came after the session ended (or, for one whose collector stopped mid-session,
    // after now): its rows span at most its real time, whatever the device's clock said.
    const auto* ended = meta->if_contains("ended_at");
    const double now =
        std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
    const auto received_ns = static_cast<std::uint64_t>(
        std::clamp(ended && ended->is_number() ? ended->to_number<double>() : now, 0.0, now) * 1e9);
    const auto fail = [&](const std::string& why) {
        std::lock_guard lock(m_);
        writing_.clear();
        last_error_ = why;
        return false;
    };
    const auto& ch = fleet_.client();
    auto held = chunks_held(ch, o);
    if (!held)
        return fail(held.error().message);
    const auto expected = number_of(*meta, "samples", UINT64_MAX);
    if (sum(*held) == expected) {
        (void)sessions_.mark_fleet_pending(id, false);
        return true;
    }
    // Read again from its folder; the chunks ClickHouse lacks are written as they come.
    {
        std::lock_guard lock(m_);
        writing_ = id;
    }
    fleet_encoder encoder(o);
    std::uint64_t queued = 0;
    std::map<std::uint32_t, std::uint64_t> wrote; // chunk → samples queued
    std::vector<std::string> partial;             // chunks ClickHouse holds in part
    bool stopped = false;
    (void)build_model(
        sessions_, id, names_, allowance_, {}, SIZE_MAX,
        [&](session_model& m, std::size_t from, std::size_t to) {
            const auto chunk = static_cast<std::uint32_t>(m.chunks - 1);
            if (stopped)
                return;
            if (const auto it = held->find(chunk); it != held->end()) {
                // (an INSERT cut short between two days, or on some shards only: left as it
                // is, never written twice)
                if (it->second != to - from)
                    partial.push_back(std::to_string(chunk) + " (" + std::to_string(it->second) +
                                      " of " + std::to_string(to - from) + ")");
                return;
            }
            while (!fleet_.wait_room(std::chrono::seconds(1)))
                if (std::lock_guard lock(m_); stopping_) {
                    stopped = true;
                    return;
                }
            fleet_.add(encoder.encode(m.prof, from, to, chunk, m.device_build_ids, received_ns),
                       true);
            wrote[chunk] = to - from;
            queued += to - from;
        });
    if (stopped)
        return fail("stopped while writing " + id);
    while (fleet_.writing(id))
        if (!fleet_.flush(std::chrono::seconds(1)))
            if (std::lock_guard lock(m_); stopping_)
                return fail("stopped while writing " + id);
    auto now_held = chunks_held(ch, o);
    if (!now_held)
        return fail(now_held.error().message);
    for (const auto& [chunk, n] : wrote)
        if (const auto it = now_held->find(chunk); it == now_held->end() || it->second != n)
            return fail("ClickHouse holds " +
                        std::to_string(it == now_held->end() ? 0 : it->second) + " of the " +
                        std::to_string(n) + " samples of chunk " + std::to_string(chunk) + " of " +
                        id + " just written");
    if (!partial.empty()) {
        std::string list;
        for (const auto& p : partial)
            list += (list.empty() ? "" : ", ") + p;
        log("fleet store", "ClickHouse holds only part of chunks " + list + " of session " + id +
                               ": left as they are");
    }
    if (queued)
        log("fleet store",
            "wrote " + std::to_string(queued) + " samples of session " + id + " from its folder");
    (void)sessions_.mark_fleet_pending(id, false);
    std::lock_guard lock(m_);
    written_ += queued;
    writing_.clear();
    return true;
}

} // namespace collector
