#include "agent/triggers.hpp"

#include "agent/procfs.hpp"

#include <cerrno>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <limits>

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace agent {

namespace {

constexpr double max_cpu_level = 100.0 * 4096; // % of a core, for the most cores Linux runs
constexpr double max_load_level = 100000;

std::string threshold_problem(const std::string& spec, const char* flag, double max_level) {
    if (spec.empty())
        return {};
    const auto r = parse_threshold(spec, max_level);
    return std::holds_alternative<std::string>(r)
               ? std::string(flag) + ": " + std::get<std::string>(r)
               : std::string();
}

std::optional<threshold_trigger> threshold_of(const std::string& spec, double max_level) {
    if (spec.empty())
        return std::nullopt;
    const auto r = parse_threshold(spec, max_level);
    if (!std::holds_alternative<threshold_spec>(r))
        return std::nullopt;
    const auto& s = std::get<threshold_spec>(r);
    return threshold_trigger(s.level, s.hold);
}

// A path the owner named: absolute, in a directory that is there.
std::string path_problem(const std::string& path, const char* flag) {
    if (path.empty() || path.front() != '/')
        return std::string(flag) + " takes an absolute path: '" + path + "'";
    const auto dir = path.substr(0, std::max<std::size_t>(path.rfind('/'), 1));
    struct stat st {};
    if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
        return std::string(flag) + ": no directory " + dir;
    return {};
}

// A line of a log, fit to be said: its first bytes, control characters as '?'.
std::string line_said(std::string_view line) {
    std::string out(line.substr(0, 160));
    for (auto& c : out)
        if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f)
            c = '?';
    return line.size() > 160 ? out + "…" : out;
}

std::string printed(const char* format, ...) __attribute__((format(printf, 1, 2)));
std::string printed(const char* format, ...) {
    char out[256];
    va_list args;
    va_start(args, format);
    std::vsnprintf(out, sizeof out, format, args);
    va_end(args);
    return out;
}

double seconds(flight_clock::duration d) {
    return std::chrono::duration<double>(d).count();
}

} // namespace

std::optional<std::pair<std::string, std::string>> split_log_trigger(const std::string& spec) {
    const auto colon = spec.find(':');
    if (colon == std::string::npos)
        return std::nullopt;
    return std::pair{spec.substr(0, colon), spec.substr(colon + 1)};
}

bool valid_process_name(std::string_view name) {
    if (name.empty() || name.size() > 15)
        return false;
    for (const unsigned char c : name)
        if (c < 0x20 || c == 0x7f || c == '/')
            return false;
    return true;
}

std::string check_triggers(const trigger_settings& t, bool has_pid) {
    if (auto why = threshold_problem(t.cpu, "--trigger-cpu", max_cpu_level); !why.empty())
        return why;
    if (!t.cpu.empty() && !has_pid)
        return "--trigger-cpu needs --pid: the process whose CPU it watches";
    if (auto why = threshold_problem(t.memory, "--trigger-memory", 100); !why.empty())
        return why;
    if (auto why = threshold_problem(t.load, "--trigger-load", max_load_level); !why.empty())
        return why;
    if (!t.log.empty()) {
        const auto parts = split_log_trigger(t.log);
        if (!parts)
            return "--trigger-log takes FILE:REGEX (a ':' between the log and the pattern)";
        if (auto why = path_problem(parts->first, "--trigger-log"); !why.empty())
            return why;
        const auto compiled = line_pattern::compile(parts->second);
        if (std::holds_alternative<std::string>(compiled))
            return "--trigger-log: " + std::get<std::string>(compiled);
    }
    if (!t.process.empty() && !valid_process_name(t.process))
        return "--trigger-process takes a process name as ps shows it (1-15 bytes, no '/'): '" +
               t.process + "'";
    if (!t.file.empty())
        return path_problem(t.file, "--trigger-file");
    return {};
}

// ---------------------------------------------------------------------------------- log_tail

log_tail::log_tail(std::string path)
    : path_(std::move(path)) {}

log_tail::~log_tail() {
    close_file();
}

void log_tail::close_file() {
    if (fd_ >= 0)
        ::close(fd_);
    fd_ = -1;
    partial_.clear();
    skipping_ = false;
}

void log_tail::read_into(std::vector<std::string>& out, std::size_t& budget) {
    char buf[65536];
    while (budget > 0) {
        const auto n = ::pread(fd_, buf, std::min(sizeof buf, budget), offset_);
        if (n <= 0)
            return; // (the end, or an error: tried again next poll)
        offset_ += n;
        budget -= static_cast<std::size_t>(n);
        std::string_view got(buf, static_cast<std::size_t>(n));
        while (!got.empty()) {
            const auto nl = got.find('\n');
            const auto piece = got.substr(0, nl);
            if (!skipping_) {
                const auto room = line_pattern::max_line - partial_.size();
                partial_.append(piece.substr(0, room));
                skipping_ = piece.size() > room; // the rest of a long line is let go
            }
            if (nl == std::string_view::npos)
                break;
            out.push_back(std::move(partial_));
            partial_.clear();
            skipping_ = false;
            got.remove_prefix(nl + 1);
        }
    }
}

std::vector<std::string> log_tail::poll() {
    std::vector<std::string> out;
    std::size_t budget = max_read;
    struct stat st {};
    if (::stat(path_.c_str(), &st) != 0) {
        const int err = errno;
        if (fd_ >= 0) { // gone (rotated away, deleted): its last lines first
            read_into(out, budget);
            close_file();
        }
        first_open_ = false; // (one that appears later is read from its start)
        problem_ = err == ENOENT ? "no file " + path_ + " (waiting for it)"
                                 : "cannot see " + path_ + ": " + std::strerror(err);
        return out;
    }
    if (fd_ >= 0 && (st.st_dev != dev_ || st.st_ino != ino_)) {
        read_into(out, budget); // rotated: the old file's last lines, then the new from its start
        close_file();
    }
    if (fd_ < 0) {
        if (!S_ISREG(st.st_mode)) {
            problem_ = path_ + " is not a regular file";
            first_open_ = false;
            return out;
        }
        // A link in a directory anyone may write to (/tmp) could be anyone's, to any file this
        // agent (root) may read: not followed.
        struct stat link {
        }, dir{};
        const auto slash = path_.rfind('/');
        if (::lstat(path_.c_str(), &link) == 0 && S_ISLNK(link.st_mode) &&
            ::stat(path_.substr(0, std::max<std::size_t>(slash, 1)).c_str(), &dir) == 0 &&
            (dir.st_mode & S_IWOTH) && link.st_uid != 0) {
            problem_ = path_ + " is a link in a directory anyone may write to: not followed";
            first_open_ = false;
            return out;
        }
        fd_ = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
        struct stat opened {};
        if (fd_ < 0 || ::fstat(fd_, &opened) != 0 || !S_ISREG(opened.st_mode)) {
            problem_ = "cannot read " + path_ + ": " +
                       (fd_ < 0 ? std::strerror(errno) : "not a regular file");
            close_file();
            first_open_ = false;
            return out;
        }
        dev_ = opened.st_dev;
        ino_ = opened.st_ino;
        offset_ = first_open_ ? opened.st_size : 0; // what a log held at the start is old news
        first_open_ = false;
        problem_.clear();
    } else if (struct stat now{}; ::fstat(fd_, &now) == 0 && now.st_size < offset_) {
        offset_ = 0; // cut short (copytruncate): from its start again
        partial_.clear();
        skipping_ = false;
    }
    read_into(out, budget);
    return out;
}

// ----------------------------------------------------------------------------- process_watch

process_watch::process_watch(std::string name, std::string proc_root)
    : name_(std::move(name))
    , root_(std::move(proc_root)) {}

std::vector<process_watch::change> process_watch::poll() {
    std::map<int, std::uint64_t> now;
    if (DIR* d = ::opendir(root_.c_str())) {
        while (const dirent* e = ::readdir(d)) {
            char* end = nullptr;
            const long pid = std::strtol(e->d_name, &end, 10);
            if (pid <= 0 || *end != '\0' || pid > std::numeric_limits<int>::max())
                continue;
            const auto base = root_ + "/" + e->d_name;
            auto comm = procfs::read_file(base + "/comm");
            if (!comm)
                continue;
            if (!comm->empty() && comm->back() == '\n')
                comm->pop_back();
            if (*comm != name_)
                continue;
            const auto text = procfs::read_file(base + "/stat");
            const auto st = text ? procfs::parse_pid_stat(*text) : std::nullopt;
            if (st && st->state != 'Z') // a zombie has exited
                now[static_cast<int>(pid)] = st->start_time;
        }
        ::closedir(d);
    }
    std::vector<change> out;
    if (!std::exchange(first_, false)) {
        for (const auto& [pid, start] : seen_)
            if (const auto it = now.find(pid); it == now.end() || it->second != start)
                out.push_back({pid, false});
        for (const auto& [pid, start] : now)
            if (const auto it = seen_.find(pid); it == seen_.end() || it->second != start)
                out.push_back({pid, true});
    }
    seen_ = std::move(now);
    return out;
}

// -------------------------------------------------------------------------------- file_watch

file_watch::file_watch(std::string path)
    : path_(std::move(path)) {}

bool file_watch::poll() {
    struct stat st {};
    std::optional<std::pair<std::int64_t, std::int64_t>> now;
    if (::stat(path_.c_str(), &st) == 0)
        now = std::pair<std::int64_t, std::int64_t>{st.st_mtim.tv_sec, st.st_mtim.tv_nsec};
    const bool changed = !std::exchange(first_, false) && now && now != seen_;
    seen_ = now;
    return changed;
}

// ----------------------------------------------------------------------------- trigger_watch

trigger_watch::trigger_watch(const trigger_settings& settings, std::optional<int> pid)
    : s_(settings)
    , pid_(pid)
    , cpu_(threshold_of(settings.cpu, max_cpu_level))
    , memory_(threshold_of(settings.memory, 100))
    , load_trigger_(threshold_of(settings.load, max_load_level))
    , cpu_pct_(std::nan(""))
    , memory_pct_(std::nan(""))
    , load_(std::nan("")) {
    if (const auto parts = split_log_trigger(settings.log)) {
        auto compiled = line_pattern::compile(parts->second);
        if (auto* p = std::get_if<line_pattern>(&compiled)) {
            pattern_ = std::move(*p);
            log_ = std::make_unique<log_tail>(parts->first);
            (void)log_->poll(); // from here on: what the log holds now is old news
        }
    }
    if (!settings.process.empty()) {
        processes_ = std::make_unique<process_watch>(settings.process);
        (void)processes_->poll(); // those running now
    }
    if (!settings.file.empty()) {
        file_ = std::make_unique<file_watch>(settings.file);
        (void)file_->poll();
    }
}

trigger_watch::~trigger_watch() = default;

trigger_watch::reading trigger_watch::poll(flight_clock::time_point now) {
    reading r;
    const auto level = [&](std::optional<threshold_trigger>& t, double value, auto say) {
        if (t->feed(now, value))
            r.fired.push_back(say(value, seconds(t->hold())));
        else if (t->above())
            r.holding = true; // a spike that lasts: so does its capture
    };
    if (cpu_ && pid_) {
        const auto text = procfs::read_file("/proc/" + std::to_string(*pid_) + "/stat");
        const auto st = text ? procfs::parse_pid_stat(*text) : std::nullopt;
        const auto ticks = st ? st->utime + st->stime : 0;
        const auto before =
            st ? std::exchange(cpu_seen_, std::pair{ticks, now}) : std::optional<cpu_reading>();
        if (before && now > before->second) {
            cpu_pct_ = procfs::cpu_pct(before->first, ticks, seconds(now - before->second));
            level(cpu_, cpu_pct_, [&](double v, double hold) {
                return printed("process %d at %.0f %% of a core for %.1f s (--trigger-cpu %s)",
                               *pid_, v, hold, s_.cpu.c_str());
            });
        }
    }
    if (memory_)
        if (const auto text = procfs::read_file("/proc/meminfo")) {
            memory_pct_ = procfs::parse_meminfo(*text).used_pct;
            level(memory_, memory_pct_, [&](double v, double hold) {
                return printed("memory in use at %.0f %% for %.1f s (--trigger-memory %s)", v, hold,
                               s_.memory.c_str());
            });
        }
    if (load_trigger_)
        if (const auto text = procfs::read_file("/proc/loadavg")) {
            load_ = procfs::parse_loadavg(*text).avg_1m;
            level(load_trigger_, load_, [&](double v, double hold) {
                return printed("load average %.2f for %.1f s (--trigger-load %s)", v, hold,
                               s_.load.c_str());
            });
        }
    if (log_)
        for (const auto& line : log_->poll())
            if (pattern_->matches(line)) {
                r.fired.push_back("log " + split_log_trigger(s_.log)->first + ": " +
                                  line_said(line));
                break; // (one capture: the first line that matched says why)
            }
    if (processes_ && now >= next_process_scan_) {
        next_process_scan_ = now + std::chrono::seconds(1); // every process read: once a second
        for (const auto& c : processes_->poll())
            r.fired.push_back("process " + s_.process + (c.started ? " started" : " exited") +
                              " (pid " + std::to_string(c.pid) + ")");
    }
    if (file_ && file_->poll())
        r.fired.push_back(s_.file + " touched (--trigger-file)");
    return r;
}

void trigger_watch::refused() {
    for (auto* t : {&cpu_, &memory_, &load_trigger_})
        if (*t)
            (*t)->unlatch();
}

std::string trigger_watch::log_problem() const {
    return log_ ? log_->problem() : std::string();
}

} // namespace agent
