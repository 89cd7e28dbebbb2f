#include "agent/metrics.hpp"

#include "protocol/build_id.hpp"

#include <algorithm>
#include <charconv>
#include <filesystem>
#include <unistd.h>

namespace agent {
namespace fs = std::filesystem;

namespace {

std::uint64_t to_u64(std::string_view s) {
    std::uint64_t v = 0;
    const auto start = s.find_first_not_of(" \t\n");
    if (start != std::string_view::npos)
        std::from_chars(s.data() + start, s.data() + s.size(), v);
    return v;
}

bool is_number(std::string_view s) {
    return !s.empty() &&
           std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

} // namespace

metrics_sampler::metrics_sampler(std::string proc_root, std::string sys_root)
    : proc_(std::move(proc_root))
    , sys_(std::move(sys_root))
    , clk_tck_(::sysconf(_SC_CLK_TCK)) {
    if (clk_tck_ <= 0)
        clk_tck_ = 100;
}

std::string metrics_sampler::read(const std::string& relative) const {
    return procfs::read_file(proc_ + "/" + relative).value_or(std::string());
}

protocol::system_metrics metrics_sampler::system(double ts) {
    protocol::system_metrics m;
    m.ts = ts;
    const auto stat = procfs::parse_stat(read("stat"));
    const procfs::stat_info zero{{}, std::vector<procfs::cpu_times>(stat.per_core.size()), 0, 0, 0,
                                 0};
    const auto& before =
        last_stat_ && last_stat_->per_core.size() == stat.per_core.size() ? *last_stat_ : zero;
    m.cpu.overall_pct = procfs::busy_pct(before.all, stat.all);
    for (std::size_t i = 0; i < stat.per_core.size(); ++i)
        m.cpu.per_core.push_back(procfs::busy_pct(before.per_core[i], stat.per_core[i]));
    m.cpu.num_cores = static_cast<int>(stat.per_core.size());
    last_stat_ = stat;

    std::vector<double> freq;
    for (int i = 0; i < m.cpu.num_cores; ++i) {
        const auto khz = procfs::read_file(sys_ + "/devices/system/cpu/cpu" + std::to_string(i) +
                                           "/cpufreq/scaling_cur_freq");
        if (!khz)
            break;
        freq.push_back(static_cast<double>(to_u64(*khz)) / 1000.0);
    }
    if (!freq.empty() && static_cast<int>(freq.size()) == m.cpu.num_cores)
        m.cpu.freq_mhz = std::move(freq);

    m.mem = procfs::parse_meminfo(read("meminfo"));
    m.load = procfs::parse_loadavg(read("loadavg"));
    m.uptime_sec = procfs::parse_uptime(read("uptime"));
    m.context_switches = stat.context_switches;
    m.interrupts = stat.interrupts;
    m.procs_running = stat.procs_running;
    m.procs_blocked = stat.procs_blocked;

    // The hottest thermal zone, in °C.
    std::error_code ec;
    for (const auto& zone : fs::directory_iterator(sys_ + "/class/thermal", ec)) {
        if (!zone.path().filename().string().starts_with("thermal_zone"))
            continue;
        if (const auto milli = procfs::read_file((zone.path() / "temp").string())) {
            const double c = static_cast<double>(to_u64(*milli)) / 1000.0;
            if (!m.temp_c || c > *m.temp_c)
                m.temp_c = c;
        }
    }
    return m;
}

std::optional<protocol::process_metrics> metrics_sampler::process(int pid, double ts) {
    const std::string dir = std::to_string(pid) + "/";
    const auto stat = procfs::parse_pid_stat(read(dir + "stat"));
    if (!stat)
        return std::nullopt;
    const auto status = procfs::parse_pid_status(read(dir + "status"));
    protocol::process_metrics m;
    m.ts = ts;
    m.pid = pid;
    m.comm = stat->comm;
    m.state = std::string(1, stat->state);
    const std::uint64_t ticks = stat->utime + stat->stime;
    const double hz = static_cast<double>(clk_tck_);
    if (last_process_ && last_process_->pid == pid && ts > last_process_->ts) {
        m.cpu_pct = procfs::cpu_pct(last_process_->ticks, ticks, ts - last_process_->ts);
    } else {
        // First sample: the average since the process started.
        const double alive =
            procfs::parse_uptime(read("uptime")) - static_cast<double>(stat->start_time) / hz;
        m.cpu_pct = alive > 0 ? 100.0 * static_cast<double>(ticks) / hz / alive : 0;
    }
    last_process_ = process_mark{pid, ticks, ts};
    m.rss_kb = status.rss_kb ? status.rss_kb
                             : stat->rss_pages * static_cast<std::uint64_t>(::getpagesize()) / 1024;
    m.vsize_kb = stat->vsize_bytes / 1024;
    m.threads = stat->threads;
    std::error_code ec;
    for (auto it = fs::directory_iterator(proc_ + "/" + dir + "fd", ec);
         !ec && it != fs::directory_iterator(); it.increment(ec))
        ++m.fds;
    m.voluntary_csw = status.voluntary_csw;
    m.involuntary_csw = status.involuntary_csw;
    m.minor_faults = stat->minor_faults;
    m.major_faults = stat->major_faults;
    m.oom_score = static_cast<int>(to_u64(read(dir + "oom_score")));
    return m;
}

protocol::network_metrics metrics_sampler::network(double ts) {
    return {ts, procfs::parse_net_dev(read("net/dev"))};
}

protocol::disk_metrics metrics_sampler::disk(double ts) {
    return {ts, procfs::parse_diskstats(read("diskstats"))};
}

std::optional<protocol::threads_metrics> metrics_sampler::threads(int pid, double ts) {
    const std::string task_dir = proc_ + "/" + std::to_string(pid) + "/task";
    std::error_code ec;
    fs::directory_iterator it(task_dir, ec);
    if (ec)
        return std::nullopt;
    protocol::threads_metrics m;
    m.ts = ts;
    m.pid = pid;
    m.clk_tck = static_cast<int>(clk_tck_);
    for (; !ec && it != fs::directory_iterator(); it.increment(ec)) {
        const auto stat = procfs::read_file((it->path() / "stat").string());
        if (!stat)
            continue; // thread exited between listing and reading
        if (const auto s = procfs::parse_pid_stat(*stat))
            m.threads.push_back({s->pid, s->comm, std::string(1, s->state), s->utime + s->stime});
    }
    std::sort(m.threads.begin(), m.threads.end(),
              [](const auto& a, const auto& b) { return a.tid < b.tid; });
    return m;
}

std::optional<protocol::binaries_metrics> metrics_sampler::binaries(int pid, double ts) {
    const std::string dir = proc_ + "/" + std::to_string(pid);
    const auto maps = procfs::read_file(dir + "/maps");
    if (!maps)
        return std::nullopt;
    auto paths = procfs::parse_maps_executables(*maps);
    if (last_binaries_.first == pid && last_binaries_.second == paths)
        return std::nullopt;
    auto m = binaries_record(pid, ts, paths);
    last_binaries_ = {pid, std::move(paths)};
    return m;
}

std::vector<protocol::binaries_metrics> metrics_sampler::busiest_binaries(double ts,
                                                                          std::size_t n) {
    auto now = snapshot_processes(proc_);
    std::vector<std::pair<std::uint64_t, int>> busy; // CPU ticks since the last call, pid
    for (const auto& [pid, p] : now)
        if (const auto it = last_processes_.find(pid);
            it != last_processes_.end() && p.second > it->second.second)
            busy.emplace_back(p.second - it->second.second, pid);
    last_processes_ = std::move(now);
    std::sort(busy.begin(), busy.end(), std::greater<>());
    if (sent_binaries_.size() > 4096)
        sent_binaries_.clear(); // (pids come and go: bound what is remembered)
    std::vector<protocol::binaries_metrics> out;
    std::size_t looked = 0; // processes that map files (kernel threads map none: not counted)
    for (const auto& [ticks, pid] : busy) {
        if (looked == n)
            break;
        const auto maps = procfs::read_file(proc_ + "/" + std::to_string(pid) + "/maps");
        if (!maps)
            continue;
        auto paths = procfs::parse_maps_executables(*maps);
        if (paths.empty())
            continue;
        ++looked;
        auto& sent = sent_binaries_[pid];
        if (sent == paths)
            continue;
        out.push_back(binaries_record(pid, ts, paths));
        sent = std::move(paths);
    }
    return out;
}

protocol::binaries_metrics metrics_sampler::binaries_record(int pid, double ts,
                                                            const std::vector<std::string>& paths) {
    const std::string dir = proc_ + "/" + std::to_string(pid);
    if (build_ids_.size() > 4096)
        build_ids_.clear(); // a process that maps ever new files: bound the cache
    protocol::binaries_metrics m;
    m.ts = ts;
    m.pid = pid;
    for (const auto& path : paths) {
        auto it = build_ids_.find(path);
        if (it == build_ids_.end()) {
            // Through the target's root, so a process in a container names its own files.
            auto id = protocol::read_build_id(dir + "/root" + path);
            if (!id)
                id = protocol::read_build_id(path);
            it = build_ids_.emplace(path, id.value_or("")).first;
        }
        m.binaries.push_back({path, it->second});
    }
    return m;
}

std::map<int, std::pair<std::string, std::uint64_t>>
snapshot_processes(const std::string& proc_root) {
    std::map<int, std::pair<std::string, std::uint64_t>> out;
    std::error_code ec;
    for (fs::directory_iterator it(proc_root, ec); !ec && it != fs::directory_iterator();
         it.increment(ec)) {
        const auto name = it->path().filename().string();
        if (!is_number(name))
            continue;
        const auto text = procfs::read_file(it->path().string() + "/stat");
        if (!text)
            continue;
        if (const auto s = procfs::parse_pid_stat(*text))
            out[s->pid] = {s->comm, s->utime + s->stime};
    }
    return out;
}

std::string read_cmdline(int pid, const std::string& proc_root) {
    auto text = procfs::read_file(proc_root + "/" + std::to_string(pid) + "/cmdline");
    if (!text)
        return {};
    while (!text->empty() && text->back() == '\0')
        text->pop_back();
    std::replace(text->begin(), text->end(), '\0', ' ');
    return *text;
}

std::vector<process_row>
top_processes(const std::map<int, std::pair<std::string, std::uint64_t>>& before,
              const std::map<int, std::pair<std::string, std::uint64_t>>& after, double seconds,
              std::size_t limit, const std::string& proc_root) {
    const double hz = static_cast<double>(std::max(1L, ::sysconf(_SC_CLK_TCK)));
    std::vector<process_row> rows;
    rows.reserve(after.size());
    for (const auto& [pid, entry] : after) {
        const auto prev = before.find(pid);
        const std::uint64_t base = prev == before.end() ? entry.second : prev->second.second;
        const double cpu =
            seconds > 0 ? 100.0 * static_cast<double>(entry.second - std::min(entry.second, base)) /
                              hz / seconds
                        : 0;
        rows.push_back({pid, entry.first, {}, cpu});
    }
    std::stable_sort(rows.begin(), rows.end(),
                     [](const auto& a, const auto& b) { return a.cpu > b.cpu; });
    if (rows.size() > limit)
        rows.resize(limit);
    for (auto& r : rows)
        r.cmdline = read_cmdline(r.pid, proc_root);
    return rows;
}

} // namespace agent
