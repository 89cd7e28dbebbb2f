#include "collector/fleet/rows.hpp"

#include <chrono>
#include <cstdio>
#include <cstring>

namespace collector {

namespace {

// 64-bit FNV-1a, finished with splitmix64's mix: the same on every collector and machine.
struct hasher {
    std::uint64_t h = 0xcbf29ce484222325ULL;
    void bytes(std::string_view s) {
        for (const unsigned char c : s) {
            h ^= c;
            h *= 0x100000001b3ULL;
        }
        h ^= 0xff; // a separator no UTF-8 byte sequence ends a field with
        h *= 0x100000001b3ULL;
    }
    void number(std::uint64_t v) {
        for (int i = 0; i < 8; ++i) {
            h ^= (v >> (8 * i)) & 0xff;
            h *= 0x100000001b3ULL;
        }
    }
    std::uint64_t done() const {
        std::uint64_t z = h + 0x9e3779b97f4a7c15ULL;
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
        z ^= z >> 31;
        return z ? z : 1; // 0 means "not made yet" in the encoder's tables
    }
};

// RowBinary: little-endian integers, strings and arrays as a LEB128 length and their items.
template <class T>
void put(std::string& out, T v) {
    for (std::size_t i = 0; i < sizeof(T); ++i)
        out += static_cast<char>((static_cast<std::uint64_t>(v) >> (8 * i)) & 0xff);
}
void put_length(std::string& out, std::uint64_t n) {
    do {
        std::uint8_t b = n & 0x7f;
        n >>= 7;
        if (n)
            b |= 0x80;
        out += static_cast<char>(b);
    } while (n);
}
void put_string(std::string& out, std::string_view s) {
    put_length(out, s.size());
    out.append(s);
}

constexpr std::uint64_t ns_per_day = 86'400'000'000'000ULL;

} // namespace

std::vector<std::string> fleet_schema(std::string_view database) {
    const std::string db(database);
    return {
        "CREATE DATABASE IF NOT EXISTS " + db,
        // `seen`: when the row was written (retention drops the stacks and frames no sample
        // uses once they are old: a row written now may belong to samples still on their way).
        "CREATE TABLE IF NOT EXISTS " + db +
            ".frames (frame UInt64, symbol String, module String, build_id String, "
            "seen DateTime DEFAULT now()) "
            "ENGINE = ReplacingMergeTree() ORDER BY frame",
        "CREATE TABLE IF NOT EXISTS " + db +
            ".stacks (stack UInt64, frames Array(UInt64), seen DateTime DEFAULT now()) "
            "ENGINE = ReplacingMergeTree() ORDER BY stack",
        "CREATE TABLE IF NOT EXISTS " + db +
            ".samples (day Date, time DateTime, collector String, device String, session String, "
            "chunk UInt32, pid UInt32, tid UInt32, comm String, event String, period UInt64, "
            "stack UInt64, build_id String) "
            "ENGINE = MergeTree() PARTITION BY day ORDER BY (device, event, tid, time, stack)",
    };
}

std::vector<std::string> fleet_shard_schema(std::string_view database) {
    auto sql = fleet_schema(database);
    const std::string db(database);
    for (auto& s : sql)
        for (const char* table : {".frames ", ".stacks ", ".samples "})
            if (const auto at = s.find(db + table); at != std::string::npos)
                s.insert(at + db.size() + std::strlen(table) - 1, "_local");
    return sql;
}

std::vector<std::string> fleet_distributed_schema(std::string_view database,
                                                  std::string_view cluster) {
    const std::string db(database), c(cluster);
    const auto over = [&](const std::string& table, const std::string& key) {
        return "CREATE TABLE IF NOT EXISTS " + db + "." + table + " AS " + db + "." + table +
               "_local ENGINE = Distributed(" + c + ", " + db + ", " + table + "_local, " + key +
               ")";
    };
    return {over("frames", "frame"), over("stacks", "stack"), over("samples", "rand()")};
}

std::string fleet_date(std::uint16_t day) {
    const std::chrono::year_month_day ymd{std::chrono::sys_days(std::chrono::days(day))};
    char text[16];
    std::snprintf(text, sizeof text, "%04d-%02u-%02u", static_cast<int>(ymd.year()),
                  static_cast<unsigned>(ymd.month()), static_cast<unsigned>(ymd.day()));
    return text;
}

std::size_t fleet_batch::bytes() const noexcept {
    std::size_t n = stacks.size() + frames.size() + (stack_ids.size() + frame_ids.size()) * 8;
    for (const auto& [day, r] : days)
        n += r.rows.size();
    return n;
}

void fleet_batch::merge(fleet_batch&& o) {
    stacks += o.stacks;
    frames += o.frames;
    stack_ids.insert(stack_ids.end(), o.stack_ids.begin(), o.stack_ids.end());
    frame_ids.insert(frame_ids.end(), o.frame_ids.begin(), o.frame_ids.end());
    for (auto& [day, r] : o.days) {
        auto& mine = days[day];
        if (!mine.count) {
            mine.probe_session = std::move(r.probe_session);
            mine.probe_collector = std::move(r.probe_collector);
            mine.probe_chunk = r.probe_chunk;
            mine.probe_count = r.probe_count;
        }
        mine.rows += r.rows;
        mine.count += r.count;
    }
    samples += o.samples;
    clamped += o.clamped;
    accounted += o.accounted;
    batches += o.batches;
    for (const auto& [id, n] : o.sessions)
        sessions[id] += n;
}

std::uint64_t fleet_encoder::frame_id(std::string_view symbol, std::string_view module,
                                      std::string_view build_id) {
    hasher h;
    h.bytes(symbol);
    h.bytes(module);
    h.bytes(build_id);
    return h.done();
}

std::uint64_t fleet_encoder::frame_of(const profile& p, std::uint32_t frame, fleet_batch& b,
                                      const std::map<std::string, std::string>& build_ids) {
    if (frame >= frame_ids_.size()) {
        frame_ids_.resize(p.frame_count(), 0);
        frame_builds_.resize(p.frame_count());
    }
    if (frame_ids_[frame])
        return frame_ids_[frame];
    const auto module = p.module(frame);
    const auto it = build_ids.find(std::string(module));
    std::string build = it == build_ids.end() ? std::string() : it->second;
    const auto id = frame_id(p.symbol(frame), module, build);
    put(b.frames, id);
    put_string(b.frames, p.symbol(frame));
    put_string(b.frames, module);
    put_string(b.frames, build);
    b.frame_ids.push_back(id);
    frame_ids_[frame] = id;
    frame_builds_[frame] = std::move(build);
    return id;
}

std::uint64_t fleet_encoder::node_id(const profile& p, std::uint32_t node, fleet_batch& b,
                                     const std::map<std::string, std::string>& build_ids) {
    if (node >= node_ids_.size())
        node_ids_.resize(p.node_count(), 0);
    if (node_ids_[node])
        return node_ids_[node];
    std::vector<std::uint64_t> frames;
    for (auto n = node; n != profile::root; n = p.node_parent(n))
        frames.push_back(frame_of(p, p.node_frame(n), b, build_ids));
    hasher h;
    for (const auto f : frames)
        h.number(f);
    const auto id = h.done();
    put(b.stacks, id);
    put_length(b.stacks, frames.size());
    for (const auto f : frames)
        put(b.stacks, f);
    b.stack_ids.push_back(id);
    node_ids_[node] = id;
    return id;
}

fleet_batch fleet_encoder::encode(const profile& p, std::size_t from, std::size_t to,
                                  std::uint32_t chunk,
                                  const std::map<std::string, std::string>& build_ids,
                                  std::uint64_t received_ns) {
    fleet_batch b;
    b.sessions[origin_.session] = 1;
    // Once a day every stack and frame is written again when next used: retention drops those
    // no sample uses that were not written for two days, so one a session keeps using is
    // never dropped from under it.
    if (received_ns >= sent_since_ns_ && received_ns - sent_since_ns_ >= ns_per_day) {
        sent_since_ns_ = received_ns;
        std::fill(frame_ids_.begin(), frame_ids_.end(), 0);
        std::fill(node_ids_.begin(), node_ids_.end(), 0);
    }
    // A build-id that came after frames of its module were written without one (the device's
    // binaries metrics trail its first samples): those frames are written again with it, and
    // the stacks made of them too, so that the samples from now on carry their build.
    if (build_ids.size() != builds_known_) {
        builds_known_ = build_ids.size();
        bool renamed = false;
        for (std::uint32_t f = 0; f < frame_ids_.size(); ++f)
            if (frame_ids_[f] && frame_builds_[f].empty())
                if (const auto it = build_ids.find(std::string(p.module(f)));
                    it != build_ids.end() && !it->second.empty()) {
                    frame_ids_[f] = 0;
                    renamed = true;
                }
        if (renamed)
            std::fill(node_ids_.begin(), node_ids_.end(), 0);
    }
    if (from < p.raw_begin())
        from = p.raw_begin(); // (folded already: the caller encodes before the model folds)
    std::uint32_t last_tid = UINT32_MAX, pid = 0;
    std::string_view comm;
    const std::uint64_t span =
        received_ns > origin_.wall_start_ns ? received_ns - origin_.wall_start_ns : 0;
    for (std::size_t i = from; i < to; ++i) {
        const auto t = p.sample_time(i);
        std::uint64_t offset = t >= p.first_time() ? t - p.first_time() : 0;
        if (offset > span) {
            offset = span;
            ++b.clamped;
        }
        const std::uint64_t wall = origin_.wall_start_ns + offset;
        const auto day = static_cast<std::uint16_t>(wall / ns_per_day);
        const auto node = p.sample_node(i);
        const auto stack = node_id(p, node, b, build_ids);
        const auto tid = p.sample_tid(i);
        if (tid != last_tid) { // a chunk's samples come in runs of one thread's
            last_tid = tid;
            const auto th = p.threads().find(tid);
            pid = th == p.threads().end() ? 0 : th->second.pid;
            comm = th == p.threads().end() ? std::string_view() : p.strings()[th->second.comm];
        }
        const auto leaf = node == profile::root ? profile::no_frame : p.node_frame(node);
        auto& d = b.days[day];
        if (!d.count) {
            d.probe_session = origin_.session;
            d.probe_collector = origin_.collector;
            d.probe_chunk = chunk;
        }
        ++d.probe_count;
        std::string& out = d.rows;
        put<std::uint16_t>(out, day);
        // Seconds: the store's precision (a session keeps every sample's ns; the fleet asks
        // about minutes and days, and whole seconds sort a thread's samples by stack).
        put<std::uint32_t>(out, static_cast<std::uint32_t>(wall / 1'000'000'000));
        put_string(out, origin_.collector);
        put_string(out, origin_.device);
        put_string(out, origin_.session);
        put<std::uint32_t>(out, chunk);
        put<std::uint32_t>(out, pid);
        put<std::uint32_t>(out, tid);
        put_string(out, comm);
        put_string(out, p.event_name(p.sample_event(i)));
        put<std::uint64_t>(out, p.sample_period(i));
        put<std::uint64_t>(out, stack);
        put_string(out, leaf == profile::no_frame ? std::string_view() : frame_builds_[leaf]);
        ++d.count;
        ++b.samples;
    }
    return b;
}

} // namespace collector
