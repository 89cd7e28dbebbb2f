#include "agent/run.hpp"

#include "protocol/messages.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <fstream>
#include <iterator>
#include <map>
#include <random>
#include <sys/random.h>
#include <sys/statvfs.h>
#include <unistd.h>

namespace agent {

namespace {

namespace fs = std::filesystem;

// A spool file: this, the payload's length (8 bytes, big-endian), the payload.
constexpr std::string_view spool_magic = "PWSPOOL1";
constexpr std::size_t spool_header = 16;

// Writes all of `data` to `fd`; false on any failure.
bool write_all(int fd, std::string_view data) {
    while (!data.empty()) {
        const auto n = ::write(fd, data.data(), data.size());
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return false;
        data.remove_prefix(static_cast<std::size_t>(n));
    }
    return true;
}

std::optional<std::string> read_whole(const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    if (!in)
        return std::nullopt;
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (text.size() < spool_header || std::string_view(text).substr(0, 8) != spool_magic)
        return std::nullopt;
    std::uint64_t n = 0;
    for (std::size_t i = 8; i < spool_header; ++i)
        n = (n << 8) | static_cast<unsigned char>(text[i]);
    if (n != text.size() - spool_header)
        return std::nullopt; // cut short (a power loss): not whole
    return text.substr(spool_header);
}

} // namespace

std::variant<spool_dir, std::string> spool_dir::open(const fs::path& dir) {
    std::error_code ec;
    fs::create_directories(dir, ec);
    if (ec)
        return "cannot make the spool directory " + dir.string() + ": " + ec.message();
    if (::access(dir.c_str(), W_OK | X_OK) != 0)
        return "cannot write the spool directory " + dir.string() + ": " + std::strerror(errno);
    return spool_dir(dir);
}

fs::path spool_dir::file(std::string_view run, std::uint64_t seq) const {
    char number[24];
    std::snprintf(number, sizeof number, "%020llu", static_cast<unsigned long long>(seq));
    return dir_ / (std::string(run) + "." + number + ".chunk");
}

std::string spool_dir::put(std::string_view run, std::uint64_t seq, std::string_view chunk) const {
    // Never the device's last free space: a tenth of its filesystem (at least 32 MiB) stays.
    struct statvfs fs_info {};
    if (::statvfs(dir_.c_str(), &fs_info) == 0) {
        const auto free = static_cast<std::uint64_t>(fs_info.f_bavail) * fs_info.f_frsize;
        const auto total = static_cast<std::uint64_t>(fs_info.f_blocks) * fs_info.f_frsize;
        const auto floor = std::max<std::uint64_t>(total / 10, std::uint64_t{32} << 20);
        if (free < chunk.size() + spool_header + floor)
            return "its disk is down to the free space it keeps (a tenth, at least 32 MiB)";
    }
    const auto path = file(run, seq);
    const auto tmp = path.string() + ".tmp";
    const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0)
        return std::strerror(errno);
    std::string header(spool_magic);
    for (int i = 7; i >= 0; --i)
        header.push_back(static_cast<char>(static_cast<std::uint64_t>(chunk.size()) >> (8 * i)));
    const bool ok = write_all(fd, header) && write_all(fd, chunk) && ::fsync(fd) == 0;
    const int saved = errno;
    ::close(fd);
    if (!ok || ::rename(tmp.c_str(), path.c_str()) != 0) {
        const std::string why = std::strerror(ok ? errno : saved);
        ::unlink(tmp.c_str());
        return why;
    }
    return {};
}

std::optional<std::string> spool_dir::get(std::string_view run, std::uint64_t seq) const {
    return read_whole(file(run, seq));
}

void spool_dir::remove(std::string_view run, std::uint64_t seq) const {
    std::error_code ec;
    fs::remove(file(run, seq), ec);
}

std::vector<spool_dir::found> spool_dir::recover(std::uint64_t& broken) const {
    struct entry {
        found f;
        fs::file_time_type made;
    };
    std::vector<entry> all;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(dir_, ec)) {
        const auto name = e.path().filename().string();
        const bool tmp = name.size() > 4 && name.compare(name.size() - 4, 4, ".tmp") == 0;
        // <32 hex>.<20 digits>.chunk
        const bool ours = name.size() == 32 + 1 + 20 + 6 && name.compare(53, 6, ".chunk") == 0 &&
                          protocol::valid_run_id(name.substr(0, 32)) &&
                          name.find_first_not_of("0123456789", 33) == 53;
        if (tmp) { // a write a stop cut short
            fs::remove(e.path(), ec);
            ++broken;
            continue;
        }
        if (!ours)
            continue; // not the spool's: left alone
        const auto payload = read_whole(e.path());
        if (!payload) {
            fs::remove(e.path(), ec);
            ++broken;
            continue;
        }
        all.push_back({{name.substr(0, 32), std::stoull(name.substr(33, 20)), payload->size()},
                       e.last_write_time(ec)});
    }
    // Runs in the order they began (their first chunk's time), each in its numbers' order.
    std::map<std::string, fs::file_time_type> began;
    for (const auto& a : all) {
        auto [it, fresh] = began.emplace(a.f.run, a.made);
        if (!fresh)
            it->second = std::min(it->second, a.made);
    }
    std::sort(all.begin(), all.end(), [&](const entry& x, const entry& y) {
        if (x.f.run != y.f.run)
            return began[x.f.run] != began[y.f.run] ? began[x.f.run] < began[y.f.run]
                                                    : x.f.run < y.f.run;
        return x.f.seq < y.f.seq;
    });
    std::vector<found> out;
    for (auto& a : all)
        out.push_back(std::move(a.f));
    return out;
}

outbox::outbox(std::size_t memory_cap, std::optional<spool_dir> spool, std::uint64_t spool_cap)
    : memory_cap_(memory_cap)
    , spool_(std::move(spool))
    , spool_cap_(spool_cap) {}

void outbox::recover() {
    if (!spool_)
        return;
    for (auto& f : spool_->recover(broken_)) {
        held_.push_back({next_pos_++, f.run, f.seq, {}, f.size, true, added_});
        added_ += f.size;
        spooled_bytes_ += f.size;
        last_run_ = f.run;
        last_seq_ = f.seq;
    }
    fit();
}

std::uint64_t outbox::add(const std::string& run, std::string chunk) {
    last_seq_ = run == last_run_ ? last_seq_ + 1 : 1;
    last_run_ = run;
    const auto size = chunk.size();
    held_.push_back({next_pos_++, run, last_seq_, std::move(chunk), size, false, added_});
    added_ += size;
    memory_bytes_ += size;
    fit();
    return last_seq_;
}

void outbox::fit() {
    // Memory first: its oldest chunks go to the spool, or are dropped without one.
    for (auto it = held_.begin(); memory_bytes_ > memory_cap_ && it != held_.end(); ++it) {
        if (it->spooled || std::next(it) == held_.end())
            continue;
        bool kept = false;
        if (spool_ && spool_cap_ >= it->size) {
            // Room in the spool: its oldest go first.
            while (spooled_bytes_ + it->size > spool_cap_ && held_.front().spooled)
                let_go_front(true);
            if (spooled_bytes_ + it->size <= spool_cap_) {
                auto why = spool_->put(it->run, it->seq, it->chunk);
                kept = why.empty();
                if (!kept)
                    spool_error_ = std::move(why);
            }
        }
        memory_bytes_ -= it->size;
        // Its memory given back (assigning an empty string would keep the buffer).
        std::string().swap(it->chunk);
        it->spooled = true;
        if (kept) {
            spooled_bytes_ += it->size;
        } else { // dropped where it is (nothing on disk: payload() finds none, the link skips it)
            ++dropped_chunks_;
            dropped_bytes_ += it->size;
            it->size = 0;
        }
    }
    // Dropped chunks at the front are no longer held.
    while (!held_.empty() && held_.front().spooled && held_.front().size == 0 && held_.size() > 1)
        held_.pop_front();
    while (spool_ && spooled_bytes_ > spool_cap_ && !held_.empty() && held_.front().spooled)
        let_go_front(true);
}

void outbox::spool_all() {
    if (!spool_)
        return;
    const auto cap = memory_cap_;
    memory_cap_ = 0;
    // fit() keeps the newest in memory: it goes too.
    held_.push_back({next_pos_, last_run_, 0, {}, 0, true, added_}); // (a stand-in, removed)
    fit();
    held_.pop_back();
    memory_cap_ = cap;
}

void outbox::let_go_front(bool dropped) {
    auto& f = held_.front();
    if (dropped && f.size) { // (a chunk dropped earlier in place was counted then)
        ++dropped_chunks_;
        dropped_bytes_ += f.size;
    }
    if (f.spooled) {
        spooled_bytes_ -= f.size;
        if (spool_ && f.size)
            spool_->remove(f.run, f.seq);
    } else {
        memory_bytes_ -= f.size;
    }
    held_.pop_front();
}

std::optional<std::string> outbox::payload(const held& h) {
    if (!h.spooled)
        return h.chunk;
    if (h.size && spool_)
        if (auto p = spool_->get(h.run, h.seq))
            return p;
    if (h.size) { // lost on the device's disk
        ++dropped_chunks_;
        dropped_bytes_ += h.size;
    }
    return std::nullopt;
}

std::uint64_t outbox::stored(std::string_view run, std::uint64_t seq) {
    // Only when that run is held: an answer about a run long gone lets nothing go.
    const auto it =
        std::find_if(held_.begin(), held_.end(), [&](const held& h) { return h.run == run; });
    if (it != held_.end()) {
        bool reached = false; // the chunks of `run`: older runs' before them go too
        while (!held_.empty()) {
            const auto& f = held_.front();
            if (f.run != run && reached)
                break;
            if (f.run == run) {
                reached = true;
                if (f.seq > seq)
                    break;
            }
            let_go_front();
        }
    }
    return held_.empty() ? last_pos() : held_.front().pos - 1;
}

const outbox::held* outbox::after(std::uint64_t pos) const {
    if (held_.empty() || pos >= held_.back().pos)
        return nullptr;
    if (pos < held_.front().pos)
        return &held_.front();
    return &held_[static_cast<std::size_t>(pos + 1 - held_.front().pos)];
}

std::uint64_t outbox::bytes_after(std::uint64_t pos) const {
    const auto* next = after(pos);
    return next ? added_ - next->bytes_before : 0;
}

std::string make_run_id() {
    unsigned char bytes[16];
    if (::getrandom(bytes, sizeof bytes, 0) != static_cast<ssize_t>(sizeof bytes)) {
        std::random_device rd; // (getrandom is there since Linux 3.17)
        for (auto& b : bytes)
            b = static_cast<unsigned char>(rd());
    }
    static constexpr char hex[] = "0123456789abcdef";
    std::string id;
    for (const auto b : bytes) {
        id.push_back(hex[b >> 4]);
        id.push_back(hex[b & 0xf]);
    }
    return id;
}

namespace {
std::atomic<bool> signalled{false}; // (constant-initialized: safe to set from a handler)
} // namespace

std::atomic<bool>& flight_signalled() noexcept {
    return signalled;
}

flight_state::flight_state(const flight_settings& s, std::optional<int> pid)
    : settings(s)
    , ring(s.window, s.memory_bytes, flight_clock::now())
    , plan({s.after, s.min_gap, std::chrono::minutes(10)})
    , watch(s.triggers, pid) {}

} // namespace agent
