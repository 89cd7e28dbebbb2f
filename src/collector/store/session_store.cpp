#include "collector/store/session_store.hpp"

#include "collector/symbols/kernel_symbols.hpp"
#include "protocol/digest.hpp"

#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fcntl.h>
#include <fstream>
#include <sstream>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

namespace collector {
namespace fs = std::filesystem;
namespace json = boost::json;
using boost::system::error_code;

namespace {

error_code last_error() {
    return {errno, boost::system::system_category()};
}

// Writes all of `data` to `path` (created or truncated), then syncs the file.
error_code write_file_synced(const fs::path& path, std::string_view data, bool append = false) {
    const int flags = O_WRONLY | O_CREAT | O_CLOEXEC | (append ? O_APPEND : O_TRUNC);
    const int fd = ::open(path.c_str(), flags, 0644);
    if (fd < 0)
        return last_error();
    // An append that fails half way is undone: the file never holds half a line.
    const off_t start = append ? ::lseek(fd, 0, SEEK_END) : 0;
    while (!data.empty()) {
        const ssize_t n = ::write(fd, data.data(), data.size());
        if (n < 0) {
            if (errno == EINTR)
                continue;
            const auto ec = last_error();
            if (append && start >= 0)
                (void)::ftruncate(fd, start);
            ::close(fd);
            return ec;
        }
        data.remove_prefix(static_cast<std::size_t>(n));
    }
    if (!append && ::fdatasync(fd) != 0) {
        const auto ec = last_error();
        ::close(fd);
        return ec;
    }
    if (::close(fd) != 0)
        return last_error();
    return {};
}

std::optional<std::string> read_file(const fs::path& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in)
        return std::nullopt;
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

std::string safe_name(std::string_view s) {
    std::string out;
    for (char c : s.substr(0, 48))
        out.push_back((std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '.') ? c
                                                                                            : '_');
    if (out.empty() || out.front() == '.')
        out.insert(out.begin(), 'x');
    return out;
}

std::vector<fs::path> chunk_files(const fs::path& dir) {
    std::vector<fs::path> files;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(dir / "chunks", ec)) {
        const auto ext = e.path().extension();
        if (ext == ".zst" || ext == ".txt")
            files.push_back(e.path());
    }
    // In the order written: numbered 000001, 000002, …, past 999999 with more digits (a run's
    // chunk has its number in the run after the first dot: 000001.s42.zst).
    const auto number = [](const fs::path& p) {
        const auto name = p.filename().string();
        return name.substr(0, name.find('.'));
    };
    std::sort(files.begin(), files.end(), [&](const fs::path& a, const fs::path& b) {
        const auto x = number(a), y = number(b);
        return x.size() != y.size() ? x.size() < y.size() : x < y;
    });
    return files;
}

// A run's chunk number in a chunk file's name (000001.s42.zst), or 0.
std::uint64_t run_seq_of(const fs::path& p) {
    const auto name = p.filename().string();
    const auto dot = name.find(".s");
    if (dot == std::string::npos)
        return 0;
    std::uint64_t seq = 0;
    for (auto i = dot + 2; i < name.size() && name[i] >= '0' && name[i] <= '9'; ++i) {
        if (seq > (UINT64_MAX - 9) / 10)
            return 0;
        seq = seq * 10 + static_cast<std::uint64_t>(name[i] - '0');
    }
    return seq;
}

} // namespace

namespace {

class disk_category_impl final : public boost::system::error_category {
public:
    const char* name() const noexcept override { return "perfwire disk budget"; }
    std::string message(int ev) const override {
        switch (ev) {
        case 1:
            return "the sessions folder holds its --disk-budget: delete sessions to make room";
        case 2:
            return "the disk of the sessions folder is down to the free space it keeps "
                   "(--disk-floor-mb)";
        case 3:
            return "this session holds what one session may (--session-disk-mb)";
        default:
            return "disk budget";
        }
    }
};

std::uint64_t folder_bytes(const fs::path& dir) {
    std::uint64_t n = 0;
    std::error_code ec;
    for (fs::recursive_directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
        if (it->is_regular_file(ec))
            n += it->file_size(ec);
    return n;
}

} // namespace

const boost::system::error_category& disk_category() noexcept {
    static const disk_category_impl category;
    return category;
}

error_code disk_account::admit(std::uint64_t bytes, std::uint64_t session_bytes) const {
    if (limits.per_session && session_bytes + bytes > limits.per_session)
        return {3, disk_category()};
    if (limits.budget && used.load() + bytes > limits.budget)
        return {1, disk_category()};
    if (limits.floor) {
        struct statvfs fs_info {};
        if (::statvfs(root.c_str(), &fs_info) == 0 &&
            static_cast<std::uint64_t>(fs_info.f_bavail) * fs_info.f_frsize < limits.floor + bytes)
            return {2, disk_category()};
    }
    return {};
}

session_writer::session_writer(fs::path dir, std::string id, std::uint64_t chunks,
                               std::shared_ptr<disk_account> disk)
    : dir_(std::move(dir))
    , id_(std::move(id))
    , chunks_(chunks)
    , disk_(std::move(disk)) {}

error_code session_writer::write_chunk(bool compressed, std::string_view payload,
                                       std::uint64_t seq) {
    if (disk_)
        if (auto refused = disk_->admit(payload.size(), chunk_bytes_))
            return refused;
    char name[64];
    if (seq)
        std::snprintf(name, sizeof name, "%06llu.s%llu.%s",
                      static_cast<unsigned long long>(chunks_ + 1),
                      static_cast<unsigned long long>(seq), compressed ? "zst" : "txt");
    else
        std::snprintf(name, sizeof name, "%06llu.%s", static_cast<unsigned long long>(chunks_ + 1),
                      compressed ? "zst" : "txt");
    const fs::path final_path = dir_ / "chunks" / name;
    const fs::path tmp = final_path.string() + ".tmp";
    if (auto ec = write_file_synced(tmp, payload)) {
        std::error_code ignored;
        fs::remove(tmp, ignored);
        return ec;
    }
    std::error_code ec;
    fs::rename(tmp, final_path, ec);
    if (ec)
        return {ec.value(), boost::system::system_category()};
    ++chunks_;
    chunk_bytes_ += payload.size();
    if (disk_)
        disk_->used += payload.size();
    return {};
}

error_code session_writer::append_metrics(std::string_view json_line) {
    std::string line(json_line);
    line.push_back('\n');
    return write_file_synced(dir_ / "metrics.jsonl", line, true);
}

// A kernel's symbols are kept once, however many sessions of its devices there are: in
// ROOT/.kernels/SHA256.txt (named by the text's digest, never by a peer's word), the session
// naming it in kallsyms.ref. A session folder of an earlier collector keeps its kallsyms.txt.
error_code session_writer::write_kernel_symbols(std::string_view text) {
    const auto digest = protocol::sha256_hex(text);
    const fs::path kernels = dir_.parent_path() / ".kernels";
    const fs::path shared = kernels / (digest + ".txt");
    std::error_code ec;
    if (!fs::exists(shared, ec)) {
        fs::create_directories(kernels, ec);
        const fs::path tmp = kernels / (digest + ".tmp." + dir_.filename().string());
        if (auto werr = write_file_synced(tmp, text))
            return werr;
        fs::rename(tmp, shared, ec);
        if (ec)
            return error_code(ec.value(), boost::system::system_category());
    }
    const fs::path tmp = dir_ / "kallsyms.ref.tmp";
    if (auto werr = write_file_synced(tmp, digest))
        return werr;
    fs::rename(tmp, dir_ / "kallsyms.ref", ec);
    return ec ? error_code(ec.value(), boost::system::system_category()) : error_code();
}

error_code session_writer::write_meta(const json::object& meta) {
    const fs::path tmp = dir_ / "meta.json.tmp";
    if (auto ec = write_file_synced(tmp, json::serialize(meta)))
        return ec;
    std::error_code ec;
    fs::rename(tmp, dir_ / "meta.json", ec);
    return ec ? error_code(ec.value(), boost::system::system_category()) : error_code();
}

void session_store::set_disk_limits(disk_limits limits) {
    if (limits.floor == UINT64_MAX) {
        struct statvfs fs_info {};
        const std::uint64_t size =
            ::statvfs(root_.c_str(), &fs_info) == 0
                ? static_cast<std::uint64_t>(fs_info.f_blocks) * fs_info.f_frsize
                : 0;
        limits.floor = std::min<std::uint64_t>(std::uint64_t{1} << 30, size / 20);
    }
    disk_->limits = limits;
    disk_->root = root_;
    disk_->used = limits.budget ? folder_bytes(root_) : 0;
}

session_store::session_store(fs::path root)
    : root_(std::move(root)) {
    std::error_code ec;
    fs::create_directories(root_, ec);
    // Imports that never finished and removals cut short (the collector stopped mid-way)
    // leave hidden folders.
    for (const auto& e : fs::directory_iterator(root_, ec)) {
        const auto name = e.path().filename().string();
        if (name.rfind(".staging-", 0) == 0 || name.rfind(".removed-", 0) == 0)
            fs::remove_all(e.path(), ec);
    }
}

bool session_store::valid_id(std::string_view id) noexcept {
    if (id.empty() || id.size() > 128 || id.front() == '.')
        return false;
    return std::all_of(id.begin(), id.end(), [](char c) {
        return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.';
    });
}

namespace {

// "<YYYYmmdd_HHMMSS>_<agent>", with "_N" added while the name is taken: `claim(id)` makes the
// folder and says whether it got it (false: taken), or fails.
template <class Claim>
boost::system::result<std::string> free_id(std::string_view agent_name, Claim claim) {
    const std::time_t now = std::time(nullptr);
    std::tm tm{};
    ::localtime_r(&now, &tm);
    char stamp[32];
    std::strftime(stamp, sizeof stamp, "%Y%m%d_%H%M%S", &tm);
    const std::string base = std::string(stamp) + "_" + safe_name(agent_name);
    for (int n = 0; n < 1000; ++n) {
        const std::string id = n == 0 ? base : base + "_" + std::to_string(n + 1);
        std::error_code ec;
        if (claim(id, ec))
            return id;
        if (ec)
            return error_code(ec.value(), boost::system::system_category());
    }
    return error_code(EEXIST, boost::system::system_category());
}

} // namespace

boost::system::result<session_writer> session_store::create(std::string_view agent_name,
                                                            const json::object& meta) {
    auto id = free_id(agent_name, [&](const std::string& name, std::error_code& ec) {
        return fs::create_directory(root_ / name, ec); // false without ec: two in one second
    });
    if (!id)
        return id.error();
    std::error_code ec;
    fs::create_directory(root_ / *id / "chunks", ec);
    if (ec)
        return error_code(ec.value(), boost::system::system_category());
    session_writer w(root_ / *id, *id, 0, disk_);
    json::object m = meta;
    m["id"] = *id;
    if (auto werr = w.write_meta(m))
        return werr;
    return w;
}

boost::system::result<session_writer> session_store::reopen(std::string_view id) {
    auto m = meta(id);
    if (!m)
        return error_code(ENOENT, boost::system::system_category());
    const fs::path dir = root_ / std::string(id);
    session_writer w(dir, std::string(id), chunk_files(dir).size(), disk_);
    m->erase("ended_at");
    m->erase("run_open");
    m->erase("chunks");
    (*m)["live"] = true;
    if (auto werr = w.write_meta(*m))
        return werr;
    return w;
}

boost::system::result<session_writer> session_store::create_staged() {
    std::string dir = (root_ / ".staging-XXXXXX").string();
    if (!::mkdtemp(dir.data()))
        return last_error();
    std::error_code ec;
    fs::create_directory(fs::path(dir) / "chunks", ec);
    if (ec)
        return error_code(ec.value(), boost::system::system_category());
    return session_writer(dir, {}, 0, disk_);
}

error_code session_store::publish(session_writer& w, std::string_view agent_name,
                                  const json::object& meta) {
    {
        // The mark goes in before the folder is a session: it never exists unmarked.
        std::ofstream mark(w.dir() / "owner-import");
        mark << "imported by the collector's owner\n";
        if (!mark.flush())
            return last_error();
    }
    auto id = free_id(agent_name, [&](const std::string& name, std::error_code& ec) {
        // Never over anything, not even an empty folder (which rename() would replace): an
        // agent's session whose folder was just made under the same name keeps it.
        const auto to = root_ / name;
        if (::renameat2(AT_FDCWD, w.dir().c_str(), AT_FDCWD, to.c_str(), RENAME_NOREPLACE) == 0)
            return true;
        if (errno == EEXIST || errno == ENOTEMPTY)
            return false;
        if (errno == EINVAL) {
            // A file system without RENAME_NOREPLACE: rename() refuses a non-empty target.
            fs::rename(w.dir(), to, ec);
            if (ec == std::errc::directory_not_empty || ec == std::errc::file_exists) {
                ec.clear();
                return false;
            }
            return !ec;
        }
        ec = std::error_code(errno, std::generic_category());
        return false;
    });
    if (!id)
        return id.error();
    w = session_writer(root_ / *id, *id, w.chunks_written(), disk_);
    json::object m = meta;
    m["id"] = *id;
    return w.write_meta(m);
}

void session_store::discard(const session_writer& w) {
    std::error_code ec;
    if (w.id().empty() && w.dir().parent_path() == root_)
        fs::remove_all(w.dir(), ec);
}

std::optional<json::object> session_store::meta(std::string_view id) const {
    if (!valid_id(id))
        return std::nullopt;
    const fs::path dir = root_ / std::string(id);
    const auto text = read_file(dir / "meta.json");
    if (!text)
        return std::nullopt;
    boost::system::error_code ec;
    auto v = json::parse(*text, ec);
    json::object m = !ec && v.is_object() ? std::move(v.as_object()) : json::object();
    m["id"] = std::string(id);
    m["chunks"] = chunk_files(dir).size();
    if (!m.contains("ended_at"))
        m["ended_at"] = nullptr; // still receiving, or the collector stopped mid-session
    return m;
}

std::vector<json::object> session_store::list() const {
    std::vector<json::object> out;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(root_, ec)) {
        const auto name = e.path().filename().string();
        if (e.is_directory() && valid_id(name))
            if (auto m = meta(name)) {
                (*m)["imported"] = owner_import(name);
                out.push_back(std::move(*m));
            }
    }
    std::sort(out.begin(), out.end(), [](const json::object& a, const json::object& b) {
        return a.at("id").as_string() > b.at("id").as_string();
    });
    return out;
}

bool session_store::owner_import(std::string_view id) const {
    if (!valid_id(id))
        return false;
    std::error_code ec;
    return fs::is_regular_file(fs::symlink_status(root_ / std::string(id) / "owner-import", ec));
}

std::size_t session_store::count() const {
    std::size_t n = 0;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(root_, ec)) {
        std::error_code exists_ec;
        if (e.is_directory() && valid_id(e.path().filename().string()) &&
            fs::exists(e.path() / "meta.json", exists_ec))
            ++n;
    }
    return n;
}

std::size_t session_store::chunk_count(std::string_view id) const {
    if (!valid_id(id))
        return 0;
    return chunk_files(root_ / std::string(id)).size();
}

double session_store::last_chunk_time(std::string_view id) const {
    if (!valid_id(id))
        return 0;
    const auto files = chunk_files(root_ / std::string(id));
    if (files.empty())
        return 0;
    struct stat st {};
    if (::stat(files.back().c_str(), &st) != 0)
        return 0;
    return static_cast<double>(st.st_mtim.tv_sec) + static_cast<double>(st.st_mtim.tv_nsec) / 1e9;
}

std::uint64_t session_store::last_run_seq(std::string_view id) const {
    if (!valid_id(id))
        return 0;
    std::uint64_t last = 0;
    for (const auto& f : chunk_files(root_ / std::string(id)))
        last = std::max(last, run_seq_of(f));
    return last;
}

error_code session_store::mark_fleet_pending(std::string_view id, bool pending) const {
    if (!valid_id(id))
        return {EINVAL, boost::system::system_category()};
    const auto mark = root_ / std::string(id) / "fleet-pending";
    std::error_code ec;
    if (!pending) {
        fs::remove(mark, ec);
        return ec ? error_code(ec.value(), boost::system::system_category()) : error_code();
    }
    std::ofstream out(mark);
    out << "samples of this session may be missing from the fleet store\n";
    return out.flush() ? error_code() : last_error();
}

std::vector<std::string> session_store::fleet_pending() const {
    std::vector<std::string> out;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(root_, ec)) {
        const auto name = e.path().filename().string();
        std::error_code marked_ec;
        if (valid_id(name) &&
            fs::is_regular_file(fs::symlink_status(e.path() / "fleet-pending", marked_ec)))
            out.push_back(name);
    }
    std::sort(out.begin(), out.end());
    return out;
}

std::optional<std::string> session_store::kernel_ref(std::string_view id) const {
    std::ifstream in(root_ / std::string(id) / "kallsyms.ref");
    std::string digest;
    if (!(in >> digest) || digest.size() != 64 ||
        digest.find_first_not_of("0123456789abcdef") != std::string::npos)
        return std::nullopt;
    return digest;
}

error_code session_store::remove(std::string_view id) {
    if (!valid_id(id))
        return {EINVAL, boost::system::system_category()};
    const fs::path dir = root_ / std::string(id);
    std::error_code ec;
    if (!fs::exists(dir / "meta.json", ec))
        return {ENOENT, boost::system::system_category()};
    // Its kernel's symbols go with the last session that names them.
    if (const auto digest = kernel_ref(id)) {
        bool named = false;
        for (const auto& e : fs::directory_iterator(root_, ec)) {
            const auto other = e.path().filename().string();
            named = named || (other != id && valid_id(other) && kernel_ref(other) == digest);
        }
        if (!named)
            fs::remove(root_ / ".kernels" / (*digest + ".txt"), ec);
    }
    if (disk_->limits.budget) {
        const auto bytes = folder_bytes(dir);
        disk_->used -= std::min(bytes, disk_->used.load());
    }
    // One rename takes the session out of sight at once; a listing never sees it half gone
    // (remove_all alone deletes meta.json before the folder).
    std::string hidden = (root_ / ".removed-XXXXXX").string();
    if (!::mkdtemp(hidden.data()))
        return last_error();
    fs::rename(dir, fs::path(hidden) / "session", ec);
    if (ec) {
        std::error_code ignored;
        fs::remove(hidden, ignored);
        return error_code(ec.value(), boost::system::system_category());
    }
    // Gone from the listing now; what cannot be deleted (yet) is cleared at the next start.
    fs::remove_all(hidden, ec);
    return {};
}

boost::system::result<std::size_t>
session_store::replay(std::string_view id,
                      const std::function<void(bool compressed, std::string_view payload)>& chunk,
                      std::size_t max_chunks) const {
    if (!valid_id(id) || !fs::exists(root_ / std::string(id) / "meta.json"))
        return error_code(ENOENT, boost::system::system_category());
    std::size_t unreadable = 0;
    auto files = chunk_files(root_ / std::string(id));
    if (files.size() > max_chunks)
        files.resize(max_chunks);
    for (const auto& path : files) {
        const auto data = read_file(path);
        if (!data) {
            ++unreadable;
            continue;
        }
        chunk(path.extension() == ".zst", *data);
    }
    return unreadable;
}

std::vector<std::string> session_store::metrics(std::string_view id) const {
    std::vector<std::string> lines;
    if (!valid_id(id))
        return lines;
    std::ifstream in(root_ / std::string(id) / "metrics.jsonl");
    std::string line;
    while (std::getline(in, line))
        if (!line.empty())
            lines.push_back(std::move(line));
    return lines;
}

std::optional<std::string> session_store::kernel_symbols(std::string_view id) const {
    if (!valid_id(id))
        return std::nullopt;
    fs::path path = root_ / std::string(id) / "kallsyms.txt";
    if (const auto digest = kernel_ref(id))
        path = root_ / ".kernels" / (*digest + ".txt");
    std::error_code ec;
    const auto size = fs::file_size(path, ec);
    if (ec || size > max_kernel_symbols_text)
        return std::nullopt;
    std::ifstream in(path, std::ios::binary);
    std::string text(size, '\0');
    if (!in.read(text.data(), static_cast<std::streamsize>(size)))
        return std::nullopt;
    return text;
}

} // namespace collector
