#include "agent/overhead.hpp"

#include "agent/procfs.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <limits>
#include <mutex>
#include <vector>

#include <dirent.h>
#include <unistd.h>

namespace agent {

overhead_governor::overhead_governor(settings s)
    : s_(s)
    , dwarf_(s.dwarf)
    , hz_(s.asked_hz) {
    s_.min_hz = std::max(1, std::min(s_.min_hz, s_.asked_hz));
    ladder_ = make_ladder(s_);
}

std::vector<int> overhead_governor::make_ladder(const settings& s) {
    std::vector<int> out;
    if (s.rungs < 2)
        return out;
    double hz = s.asked_hz;
    for (int k = 0; k < s.rungs; ++k, hz *= rung_ratio) {
        const int r = static_cast<int>(std::lround(hz));
        if (r < s.min_hz || (!out.empty() && r >= out.back()))
            break;
        out.push_back(r);
    }
    if (out.size() < 2)
        out.clear();
    return out;
}

bool overhead_governor::on_ladder(int hz) const {
    return std::find(ladder_.begin(), ladder_.end(), hz) != ladder_.end();
}

int overhead_governor::rung_at_or_under(int next) const {
    if (ladder_.empty() || next < ladder_.back())
        return next; // (under the ladder: a restart at the rate itself)
    for (const int r : ladder_)
        if (r <= next)
            return r;
    return next;
}

double overhead_governor::aim(double cost, int hz, double budget) const {
    const double proportional = cost > 0 ? hz * budget / cost : 2.0 * hz;
    if (before_ && before_->hz != hz) {
        // Two rates read: the part that grows with the rate, and the part that does not. The fit
        // is trusted only where it leaves the rate room: a fixed part at or over the aim is
        // likelier two readings alike within their noise than a cost no rate can meet (the
        // proportional step then: a fixed part truly over the budget still walks the rate down,
        // step by step), and it never goes under half the proportional step at once.
        const double per_hz = (cost - before_->cost) / (hz - before_->hz);
        const double fixed = cost - per_hz * hz;
        if (per_hz > 0 && fixed >= 0 && fixed < budget)
            return std::max((budget - fixed) / per_hz, proportional / 2);
    }
    return proportional;
}

std::optional<overhead_governor::change> overhead_governor::feed(double cost_pct, int hz) {
    last_cost_ = cost_pct;
    if (skip_ > 0) {
        --skip_;
        return std::nullopt; // (the intervals of a start or restart: its own cost, not the rate's)
    }
    if (!(cost_pct >= 0) || hz <= 0)
        return std::nullopt;
    // The readings at this rate: their mean, the median of the last five from three on — one
    // noisy interval moves nothing the others deny, a cost that drifts is followed.
    if (at_.hz != hz)
        at_ = {hz, {}, 0};
    at_.costs.push_back(cost_pct);
    if (at_.costs.size() > 5)
        at_.costs.erase(at_.costs.begin());
    ++at_.n;
    std::vector<double> sorted = at_.costs;
    std::sort(sorted.begin(), sorted.end());
    const std::size_t k = sorted.size();
    double cost = 0;
    if (k >= 3)
        cost = k % 2 ? sorted[k / 2] : (sorted[k / 2 - 1] + sorted[k / 2]) / 2;
    else
        for (const double c : sorted)
            cost += c / static_cast<double>(k);
    // After a change, three readings (the restart's tail is in the first ones); at the first
    // rate two, or one far over.
    const bool first_rate = !before_;
    const auto changed = [&](int next) {
        // Along the ladder perf record holds, nothing restarts: the next interval is the
        // rate's alone (the one of the change holds both rates).
        skip_ = on_ladder(hz) && on_ladder(next) && next != hz ? 1 : settle_intervals;
        before_ = reading{hz, cost};
        at_ = {};
        return next;
    };
    char why[200];
    const double budget = s_.budget_pct;
    // Down when over by a tenth at the first rate, by a fifth at one the governor chose: a rate
    // read just over the line would otherwise restart perf (its own cost) for almost nothing.
    if (cost > budget * (first_rate ? 1.1 : 1.2) &&
        (first_rate ? at_.n >= 2 || cost > budget * 2 : at_.n >= 3)) {
        if (dwarf_ && s_.fp_works) {
            dwarf_ = false;
            changed(hz);
            before_.reset(); // (another call-graph mode: another cost per Hz)
            std::snprintf(why, sizeof why,
                          "profiling cost %.2f %% of a core, over --max-overhead %.2f %%: "
                          "frame-pointer call graphs instead of DWARF",
                          cost, budget);
            return change{hz, true, why};
        }
        // Aim a little under the budget.
        const int next = rung_at_or_under(
            static_cast<int>(std::clamp(std::floor(aim(cost, hz, budget * 0.9)),
                                        static_cast<double>(s_.min_hz), static_cast<double>(hz))));
        if (next == hz)
            return std::nullopt; // already as low as it goes
        changed(next);
        std::snprintf(why, sizeof why,
                      "profiling cost %.2f %% of a core at %d Hz, over --max-overhead %.2f %%: "
                      "sampling at %d Hz",
                      cost, hz, budget, next);
        return change{next, false, why};
    }
    // Up when six readings say it costs under half the budget (a restart costs: a rate must be
    // worth it); along the ladder, where nothing restarts, one rate up as soon as three say its
    // cost, grown with the rate, stays under the aim.
    int next = 0;
    if (at_.n >= 6 && cost < budget * 0.5 && hz < s_.asked_hz)
        next = rung_at_or_under(static_cast<int>(
            std::clamp(std::floor(std::min(aim(cost, hz, budget * 0.9), 2.0 * hz)),
                       static_cast<double>(hz), static_cast<double>(s_.asked_hz))));
    else if (at_.n >= 3 && on_ladder(hz) && hz != ladder_.front()) {
        const int above = *(std::find(ladder_.begin(), ladder_.end(), hz) - 1);
        if (cost * above / hz < budget * 0.9)
            next = above;
    }
    if (next > hz) {
        changed(next);
        std::snprintf(why, sizeof why,
                      "profiling cost %.2f %% of a core at %d Hz, under --max-overhead %.2f %%: "
                      "sampling at %d Hz (asked: %d)",
                      cost, hz, budget, next, s_.asked_hz);
        return change{next, false, why};
    }
    return std::nullopt;
}

cost_meter::cost_meter(std::string proc_root)
    : root_(std::move(proc_root)) {}

namespace {

// Children that exited: pid and own CPU ns at the end, until the meter takes them.
std::mutex exits_mutex;
std::deque<std::pair<int, std::uint64_t>> exits;

std::uint64_t stat_cpu_ns(const std::string& base) {
    // utime + stime of the whole thread group, its ended threads included (clock ticks).
    const auto text = procfs::read_file(base + "/stat");
    const auto st = text ? procfs::parse_pid_stat(*text) : std::nullopt;
    static const double tick_ns = 1e9 / static_cast<double>(std::max(1L, ::sysconf(_SC_CLK_TCK)));
    return st ? static_cast<std::uint64_t>(static_cast<double>(st->utime + st->stime) * tick_ns)
              : 0;
}

} // namespace

void note_child_exit(int pid, const std::string& proc_root) {
    // A zombie has no threads left to read schedstat from: its stat still sums them all.
    const auto ns = stat_cpu_ns(proc_root + "/" + std::to_string(pid));
    const std::lock_guard lock(exits_mutex);
    exits.emplace_back(pid, ns);
    if (exits.size() > 256)
        exits.pop_front();
}

std::uint64_t cpu_ns_of(const std::string& root, int pid) {
    // Every thread's on-CPU nanoseconds (the first field of schedstat).
    const auto base = root + "/" + std::to_string(pid);
    std::uint64_t ns = 0;
    bool any = false;
    if (DIR* d = ::opendir((base + "/task").c_str())) {
        while (const dirent* e = ::readdir(d)) {
            if (e->d_name[0] < '0' || e->d_name[0] > '9')
                continue;
            if (const auto text = procfs::read_file(base + "/task/" + e->d_name + "/schedstat")) {
                ns += std::strtoull(text->c_str(), nullptr, 10);
                any = true;
            }
        }
        ::closedir(d);
    }
    // No schedstat (a kernel without CONFIG_SCHED_INFO): the clock ticks of stat.
    return any ? ns : stat_cpu_ns(base);
}

std::optional<double> cost_meter::read(double now_s) {
    std::deque<std::pair<int, std::uint64_t>> ended;
    {
        const std::lock_guard lock(exits_mutex);
        ended.swap(exits);
    }
    const int self = static_cast<int>(::getpid());
    std::vector<int> pids{self};
    std::vector<int> zombies; // (their end is noted as they are reaped)
    if (DIR* d = ::opendir(root_.c_str())) {
        while (const dirent* e = ::readdir(d)) {
            char* end = nullptr;
            const long pid = std::strtol(e->d_name, &end, 10);
            if (pid <= 0 || *end || pid == self || pid > std::numeric_limits<int>::max())
                continue;
            // The parent's pid: the second field after the command's closing parenthesis.
            const auto text = procfs::read_file(root_ + "/" + e->d_name + "/stat");
            const auto close = text ? text->rfind(')') : std::string::npos;
            if (close == std::string::npos || close + 4 >= text->size())
                continue;
            if (std::atoi(text->c_str() + close + 4) == self)
                ((*text)[close + 2] == 'Z' ? zombies : pids).push_back(static_cast<int>(pid));
        }
        ::closedir(d);
    }
    std::map<int, std::uint64_t> now;
    std::uint64_t used = 0;
    const auto since = [&](int pid, std::uint64_t ns) {
        const auto before = seen_.find(pid);
        return before == seen_.end() ? ns : ns - std::min(ns, before->second);
    };
    // Those that ended since the last reading (taken before the children were listed): what they
    // used up to their end. A pid among them that is listed again is another child's, from 0.
    for (const auto& [pid, ns] : ended) {
        used += since(pid, ns);
        seen_.erase(pid);
    }
    for (const int pid : zombies)
        if (const auto before = seen_.find(pid); before != seen_.end())
            now[pid] = before->second;
    for (const int pid : pids) {
        const auto ns = cpu_ns_of(root_, pid);
        const auto before = seen_.find(pid);
        if (ns == 0 && before != seen_.end()) {
            now[pid] = before->second; // (ended while listed: its end is counted from here)
            continue;
        }
        now[pid] = ns;
        used += since(pid, ns);
    }
    seen_ = std::move(now);
    const auto before = std::exchange(last_at_, now_s);
    if (!before || now_s <= *before)
        return std::nullopt;
    return 100.0 * static_cast<double>(used) / 1e9 / (now_s - *before);
}

} // namespace agent
