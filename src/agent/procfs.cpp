#include "agent/procfs.hpp"

#include <algorithm>
#include <charconv>
#include <fcntl.h>
#include <unistd.h>

namespace agent::procfs {
namespace {

// Splits on spaces/tabs/colons-as-told; tiny, allocation-free tokenizer over one line.
class fields {
public:
    explicit fields(std::string_view line)
        : rest_(line) {}

    std::string_view next() {
        const auto start = rest_.find_first_not_of(" \t");
        if (start == std::string_view::npos) {
            rest_ = {};
            return {};
        }
        rest_.remove_prefix(start);
        const auto end = std::min(rest_.find_first_of(" \t"), rest_.size());
        const auto token = rest_.substr(0, end);
        rest_.remove_prefix(end);
        return token;
    }
    std::uint64_t next_u64() { return to_u64(next()); }
    std::string_view rest() const { return rest_; }

    static std::uint64_t to_u64(std::string_view s) {
        std::uint64_t v = 0;
        std::from_chars(s.data(), s.data() + s.size(), v);
        return v;
    }

private:
    std::string_view rest_;
};

template <class F>
void for_each_line(std::string_view text, F f) {
    while (!text.empty()) {
        const auto nl = text.find('\n');
        f(text.substr(0, nl));
        if (nl == std::string_view::npos)
            break;
        text.remove_prefix(nl + 1);
    }
}

double to_double(std::string_view s) {
    double v = 0;
    std::from_chars(s.data(), s.data() + s.size(), v);
    return v;
}

cpu_times parse_cpu_line(fields& f) {
    // user nice system idle iowait irq softirq steal [guest guest_nice: already in user/nice]
    std::uint64_t v[8] = {};
    for (auto& x : v)
        x = f.next_u64();
    cpu_times t;
    t.total = v[0] + v[1] + v[2] + v[3] + v[4] + v[5] + v[6] + v[7];
    t.busy = t.total - v[3] - v[4];
    return t;
}

} // namespace

stat_info parse_stat(std::string_view text) {
    stat_info s;
    for_each_line(text, [&](std::string_view line) {
        fields f(line);
        const auto key = f.next();
        if (key == "cpu")
            s.all = parse_cpu_line(f);
        else if (key.size() > 3 && key.substr(0, 3) == "cpu")
            s.per_core.push_back(parse_cpu_line(f));
        else if (key == "ctxt")
            s.context_switches = f.next_u64();
        else if (key == "intr")
            s.interrupts = f.next_u64(); // first number is the total
        else if (key == "procs_running")
            s.procs_running = f.next_u64();
        else if (key == "procs_blocked")
            s.procs_blocked = f.next_u64();
    });
    return s;
}

protocol::memory_stats parse_meminfo(std::string_view text) {
    std::map<std::string_view, std::uint64_t> kb;
    for_each_line(text, [&](std::string_view line) {
        const auto colon = line.find(':');
        if (colon == std::string_view::npos)
            return;
        fields f(line.substr(colon + 1));
        kb[line.substr(0, colon)] = f.next_u64();
    });
    protocol::memory_stats m;
    m.total_kb = kb["MemTotal"];
    m.available_kb = kb.count("MemAvailable") ? kb["MemAvailable"] : kb["MemFree"];
    m.buffers_kb = kb["Buffers"];
    m.cached_kb = kb["Cached"] + kb["SReclaimable"];
    m.used_kb = m.total_kb > m.available_kb ? m.total_kb - m.available_kb : 0;
    m.swap_total_kb = kb["SwapTotal"];
    m.swap_used_kb = m.swap_total_kb > kb["SwapFree"] ? m.swap_total_kb - kb["SwapFree"] : 0;
    m.used_pct =
        m.total_kb ? 100.0 * static_cast<double>(m.used_kb) / static_cast<double>(m.total_kb) : 0;
    return m;
}

protocol::load_stats parse_loadavg(std::string_view text) {
    fields f(text);
    protocol::load_stats l;
    l.avg_1m = to_double(f.next());
    l.avg_5m = to_double(f.next());
    l.avg_15m = to_double(f.next());
    return l;
}

double parse_uptime(std::string_view text) {
    fields f(text);
    return to_double(f.next());
}

std::map<std::string, protocol::interface_stats> parse_net_dev(std::string_view text) {
    std::map<std::string, protocol::interface_stats> out;
    for_each_line(text, [&](std::string_view line) {
        const auto colon = line.find(':');
        if (colon == std::string_view::npos)
            return; // the two header lines have '|' but no ':'
        fields name_field(line.substr(0, colon));
        const auto name = name_field.next();
        if (name.empty() || name == "lo")
            return;
        fields f(line.substr(colon + 1));
        std::uint64_t v[16] = {};
        for (auto& x : v)
            x = f.next_u64();
        out[std::string(name)] = {v[0], v[1], v[2], v[3], v[8], v[9], v[10]};
    });
    return out;
}

std::map<std::string, protocol::disk_stats> parse_diskstats(std::string_view text) {
    std::map<std::string, protocol::disk_stats> out;
    for_each_line(text, [&](std::string_view line) {
        fields f(line);
        f.next(); // major
        f.next(); // minor
        const auto name = f.next();
        if (name.empty() || name.starts_with("loop") || name.starts_with("ram") ||
            name.starts_with("zram"))
            return;
        // reads merged sectors_read ms_reading writes merged sectors_written ms_writing ...
        std::uint64_t v[8] = {};
        for (auto& x : v)
            x = f.next_u64();
        out[std::string(name)] = {v[0], v[2] * 512, v[4], v[6] * 512, v[3], v[7]};
    });
    return out;
}

std::optional<pid_stat> parse_pid_stat(std::string_view text) {
    const auto open = text.find('(');
    const auto close = text.rfind(')');
    if (open == std::string_view::npos || close == std::string_view::npos || close < open)
        return std::nullopt;
    pid_stat s;
    s.pid = static_cast<int>(fields::to_u64(text.substr(0, open)));
    s.comm = std::string(text.substr(open + 1, close - open - 1));
    fields f(text.substr(close + 1));
    // Field numbers from proc(5); field 3 (state) is the first after the comm.
    std::string_view v[22];
    for (auto& x : v)
        x = f.next();
    if (v[21].empty())
        return std::nullopt;
    s.state = v[0].empty() ? '?' : v[0][0];
    s.minor_faults = fields::to_u64(v[7]); // 10
    s.major_faults = fields::to_u64(v[9]); // 12
    s.utime = fields::to_u64(v[11]);       // 14
    s.stime = fields::to_u64(v[12]);       // 15
    s.threads = fields::to_u64(v[17]);     // 20
    s.start_time = fields::to_u64(v[19]);  // 22
    s.vsize_bytes = fields::to_u64(v[20]); // 23
    s.rss_pages = fields::to_u64(v[21]);   // 24
    return s;
}

std::optional<process_identity> running_process(int pid, const std::string& proc_root) {
    if (pid <= 0)
        return std::nullopt;
    const auto text = read_file(proc_root + "/" + std::to_string(pid) + "/stat");
    const auto stat = text ? parse_pid_stat(*text) : std::nullopt;
    if (!stat || stat->state == 'Z' || stat->state == 'X')
        return std::nullopt;
    return process_identity{pid, stat->start_time};
}

bool has_exited(const process_identity& p, const std::string& proc_root) {
    const auto now = running_process(p.pid, proc_root);
    return !now || now->start_time != p.start_time;
}

pid_status parse_pid_status(std::string_view text) {
    pid_status s;
    for_each_line(text, [&](std::string_view line) {
        const auto colon = line.find(':');
        if (colon == std::string_view::npos)
            return;
        const auto key = line.substr(0, colon);
        fields f(line.substr(colon + 1));
        if (key == "voluntary_ctxt_switches")
            s.voluntary_csw = f.next_u64();
        else if (key == "nonvoluntary_ctxt_switches")
            s.involuntary_csw = f.next_u64();
        else if (key == "VmRSS")
            s.rss_kb = f.next_u64();
    });
    return s;
}

std::vector<std::string> parse_maps_executables(std::string_view text) {
    std::vector<std::string> out;
    for_each_line(text, [&](std::string_view line) {
        fields f(line);
        f.next(); // address range
        const auto perms = f.next();
        f.next(); // offset
        f.next(); // device
        f.next(); // inode
        auto path = f.rest();
        path.remove_prefix(std::min(path.find_first_not_of(" \t"), path.size()));
        constexpr std::string_view deleted = " (deleted)";
        if (perms.size() < 4 || perms[2] != 'x' || path.empty() || path.front() != '/' ||
            (path.size() >= deleted.size() && path.substr(path.size() - deleted.size()) == deleted))
            return;
        out.emplace_back(path);
    });
    std::sort(out.begin(), out.end());
    out.erase(std::unique(out.begin(), out.end()), out.end());
    return out;
}

double busy_pct(const cpu_times& before, const cpu_times& after) {
    if (after.total <= before.total || after.busy < before.busy)
        return 0;
    return 100.0 * static_cast<double>(after.busy - before.busy) /
           static_cast<double>(after.total - before.total);
}

std::optional<std::string> read_file(const std::string& path) {
    // /proc files report size 0, so read until EOF rather than trusting stat().
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return std::nullopt;
    std::string out;
    char buf[8192];
    for (;;) {
        const ssize_t n = ::read(fd, buf, sizeof buf);
        if (n < 0) {
            ::close(fd);
            return std::nullopt;
        }
        if (n == 0)
            break;
        out.append(buf, static_cast<std::size_t>(n));
    }
    ::close(fd);
    return out;
}

std::string parse_kallsyms(std::string_view text) {
    std::string out;
    bool any_address = false;
    while (!text.empty()) {
        const auto nl = text.find('\n');
        auto line = text.substr(0, nl);
        text.remove_prefix(nl == std::string_view::npos ? text.size() : nl + 1);
        // "ffffffff81000000 T _text", "ffffffffc0a01000 t foo\t[nf_tables]"
        const auto a = line.find(' ');
        if (a == std::string_view::npos || a + 3 >= line.size() || line[a + 2] != ' ')
            continue;
        const char type = line[a + 1];
        if (type != 't' && type != 'T' && type != 'w' && type != 'W')
            continue;
        auto name = line.substr(a + 3);
        name = name.substr(0, name.find('\t'));
        const auto address = line.substr(0, a);
        if (address.find_first_not_of('0') == std::string_view::npos)
            continue;
        any_address = true;
        out.append(address).append(" ").append(name).append("\n");
    }
    return any_address ? out : std::string();
}

double cpu_pct(std::uint64_t ticks_before, std::uint64_t ticks_now, double seconds) {
    static const double hz = static_cast<double>(std::max(1L, ::sysconf(_SC_CLK_TCK)));
    if (!(seconds > 0))
        return 0;
    return 100.0 * static_cast<double>(ticks_now - std::min(ticks_now, ticks_before)) / hz /
           seconds;
}

} // namespace agent::procfs
