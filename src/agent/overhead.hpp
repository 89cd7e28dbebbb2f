// An overhead budget the device's owner sets (--max-overhead PCT of one core): what profiling
// costs the device — perf record, perf script and perf stat (the agent's children) and the
// agent itself — measured from the kernel's own accounting, and the sampling rate (and
// call-graph mode) it takes to stay within it.
//
//   cost_meter (CPU ns of the agent and its children, from /proc) ──cost %──▶ overhead_governor
//                                                                              │ a change: a rate
//                                                                              ▼ of the ladder
//                                      perf record holds is enabled (else the run restarts at it)
//
// The governor holds no I/O: given the cost of each interval at the rate in use (the first three
// after a start or a change not judged: perf's own start costs a third of a second or more), it
// answers with the rate to use next, from the readings at that rate (their mean, the median of
// the last five once there are three: a restart's tail and perf stat's starts make single intervals
// jump). A restart costs about what a minute at the budget allows, so it changes seldom: at the
// first rate down after two readings (one, when over twice the budget), after a change only after
// three (the tail of the restart is in the first), up only after six. Where perf record holds a
// ladder of rates (settings::rungs, asked × 0.8^k) a change along it restarts nothing: the rates
// chosen are the ladder's, and only the interval of the change goes unjudged. The cost is a part
// that grows with the rate (perf script names every sample; the agent compresses it) and a part
// that does not (perf stat, the agent's metrics): from one reading it takes all of it for the
// rate's; once it has read two rates it fits both parts (cost = fixed + per_hz × rate) and aims at
// the budget with them, at most half the proportional step further, and only while the fixed part
// leaves room under the aim (else two readings alike within their noise: the proportional step).
// Down when over by a tenth (by a fifth at a rate it chose: a restart for a
// reading just over the line costs more than it saves), with DWARF stacks given up for frame
// pointers first (their stack copies cost the most); back up, never past what was asked, only when
// under half the budget, a step at most doubling.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace agent {

class overhead_governor {
public:
    struct settings {
        double budget_pct = 1; // of one core
        int asked_hz = 99;     // the rate asked for: never more
        bool dwarf = false;    // DWARF call graphs asked for
        bool fp_works = true;  // frame pointers are there to fall back to
        int min_hz = 1;
        // Rates perf record holds at once (a ladder: asked × 0.8^k, this many): a change among
        // them costs no restart, so it is judged from the next interval on, and the rates
        // chosen are the ladder's (the highest at or under the aim). 0 or 1: any rate, each
        // change a restart.
        int rungs = 0;
    };
    struct change {
        int frequency;
        bool to_fp = false; // DWARF given up for frame pointers
        std::string why;    // for the session: what it cost, what it does now
    };

    // Intervals not judged after a start or a change: perf's start, and its symbol tables
    // loaded as the first samples name them, cost a third of a second or more, spread over the
    // first seconds.
    static constexpr int settle_intervals = 3;

    explicit overhead_governor(settings s);
    // The cost of the last interval (% of one core) at `hz`: a change to make, if any.
    std::optional<change> feed(double cost_pct, int hz);
    // The cost of the last interval at the rate it holds now; a change is taken as made.
    std::optional<change> feed(double cost_pct) {
        auto c = feed(cost_pct, hz_);
        if (c)
            hz_ = c->frequency;
        return c;
    }
    // The rate to sample at now, and whether DWARF stacks are still taken (what the run was
    // asked stays the run's: a next run starts from it).
    int hz() const noexcept { return hz_; }
    // The user set another rate (configure): asked and used from now, readings before forgotten.
    void ask(int hz) {
        s_.asked_hz = hz_ = std::max(1, hz);
        s_.min_hz = std::min(s_.min_hz, s_.asked_hz);
        before_.reset();
        at_ = {};
        skip_ = settle_intervals; // (the restart's)
        ladder_ = make_ladder(s_);
    }
    // The rates perf record is to hold at once, highest first (empty: one rate at a time).
    const std::vector<int>& ladder() const noexcept { return ladder_; }
    static constexpr double rung_ratio = 0.8;
    // The change answered last restarted perf after all (the ladder's rate could not be set):
    // its start is not judged.
    void restarted() noexcept { skip_ = settle_intervals; }
    bool dwarf() const noexcept { return dwarf_; }
    double last_cost() const noexcept { return last_cost_; }
    const settings& asked() const noexcept { return s_; }

private:
    settings s_;
    bool dwarf_;
    std::vector<int> ladder_;
    static std::vector<int> make_ladder(const settings& s);
    bool on_ladder(int hz) const;
    // `next` (between min_hz and the rate asked) as the ladder's highest rate at or under it,
    // where the ladder reaches so low.
    int rung_at_or_under(int next) const;
    // The rate to aim at for `budget` from the cost `cost` at `hz` (and the reading at the rate
    // before, when there is one).
    double aim(double cost, int hz, double budget) const;

    int skip_ = settle_intervals;
    double last_cost_ = 0;
    int hz_;
    struct at_rate {
        int hz = -1;
        std::vector<double> costs; // (the last five: a cost that drifts is followed within three)
        int n = 0;
    } at_; // the readings at the rate in use since it was set
    struct reading {
        int hz;
        double cost;
    };
    std::optional<reading> before_; // the last reading at the rate before this one
};

// The CPU the agent and its children (perf) used, in ns, from /proc/PID/task/*/schedstat
// (nanoseconds the kernel counted; utime+stime clock ticks where schedstat is missing).
class cost_meter {
public:
    explicit cost_meter(std::string proc_root = "/proc");
    // % of one core used since the last reading by this process and its children (nullopt at
    // the first reading). A child that began meanwhile counts from its start; one that ended
    // meanwhile, up to its end (note_child_exit).
    std::optional<double> read(double now_s);

private:
    std::string root_;
    std::map<int, std::uint64_t> seen_; // pid → CPU ns at the last reading
    std::optional<double> last_at_;
};

// A child's own CPU at its exit (ns; its descendants' not counted: a command perf record runs is
// the user's program, not profiling's cost), read while it is a zombie, before it is reaped —
// once reaped, /proc has nothing left to read, and a perf that a rate change restarted, or a perf
// stat that ran between two readings, would go uncounted. The last 256 are kept for the meter.
void note_child_exit(int pid, const std::string& proc_root = "/proc");

// The CPU `pid` used (every thread's, those ended included), ns; 0 when it is gone.
std::uint64_t cpu_ns_of(const std::string& proc_root, int pid);

} // namespace agent
