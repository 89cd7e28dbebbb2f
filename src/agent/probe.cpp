#include "agent/probe.hpp"

#include "agent/perf_commands.hpp"
#include "agent/procfs.hpp"
#include "protocol/use_nothrow.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/writable_pipe.hpp>
#include <boost/asio/write.hpp>
#include <boost/json/value_from.hpp>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <dirent.h>
#include <fcntl.h>
#include <filesystem>
#include <functional>
#include <sys/stat.h>
#include <unistd.h>

namespace agent {
using namespace asio::experimental::awaitable_operators;
namespace json = boost::json;
using protocol::use_nothrow;

namespace {

// Each perf run of the probe is bounded: perf on a small board can take seconds to start (it
// reads kallsyms and the binaries' symbols), so the bound is generous; a hung perf costs this.
constexpr auto run_timeout = std::chrono::milliseconds(8000);
// How many sampling events are tried with perf record before the probe gives up.
constexpr std::size_t max_record_candidates = 3;

std::string shell_words(const std::vector<std::string>& args) {
    std::string out = "perf";
    for (const auto& a : args)
        out += " " + a;
    return out;
}

// Built outside the coroutines: GCC 12 mis-compiles braced lists of string literals inside
// a coroutine ("array used as initializer").
std::vector<std::string> sleep_for_probe() {
    return {sleep_program(), "0.25"};
}
std::vector<std::string> all_candidates() {
    std::vector<std::string> asked = candidate_events;
    asked.insert(asked.end(), software_clocks.begin(), software_clocks.end());
    return asked;
}
const std::vector<std::string>& callgraph_order() {
    return callgraph_modes; // fp, dwarf, lbr
}
using runs_asked = std::vector<std::pair<std::string, std::string>>; // (event, call graph)

// `event` with each of `modes`, space-separated ("flat": no call graph).
runs_asked runs_of(const std::string& event, std::string_view modes) {
    runs_asked out;
    while (!modes.empty()) {
        const auto sp = modes.find(' ');
        const auto m = modes.substr(0, sp);
        out.emplace_back(event, m == "flat" ? std::string() : std::string(m));
        modes.remove_prefix(sp == std::string_view::npos ? modes.size() : sp + 1);
    }
    return out;
}

std::vector<std::string> fallback_events(const std::string& clock) {
    return {"cycles", clock, software_clocks.back()};
}

bool is_hardware(const std::string& event) {
    return event == "cycles" || event == "instructions" || event.starts_with("cache-") ||
           event.starts_with("branch-");
}

void fill_from_script(probe_step& step, std::string_view out) {
    step.samples = sample_count(out);
    step.stacks = has_call_chains(out);
}

bool mentions_bad_field(std::string_view err) {
    return err.find("Invalid field") != std::string_view::npos ||
           err.find("unknown field") != std::string_view::npos;
}

// Runs every task at once and returns when all have finished.
asio::awaitable<void> all_of(std::vector<asio::awaitable<void>> tasks) {
    auto ex = co_await asio::this_coro::executor;
    auto left = std::make_shared<std::size_t>(tasks.size());
    auto done = std::make_shared<asio::steady_timer>(ex, asio::steady_timer::time_point::max());
    for (auto& t : tasks)
        asio::co_spawn(ex, std::move(t), [left, done](std::exception_ptr) {
            if (--*left == 0)
                done->cancel();
        });
    if (*left > 0)
        co_await done->async_wait(use_nothrow);
}

// perf record of `s` for a quarter of a second, into a pipe or a file, then perf script of
// what it wrote. A pipe run relays record's output to perf script through the agent, so the
// bytes perf record produced are counted, whatever its messages say.
struct record_run {
    probe_step step;
    int script_status = -1;
    std::string script_err;
    bool worked() const { return step.status == 0 && step.bytes > 0 && script_status == 0; }
    // perf record wrote perf.data into the pipe, even if perf script did not finish naming
    // the samples in time (a busy device): the pipe works; a timeout alone proves nothing.
    bool streamed() const { return worked() || (step.timed_out && step.bytes > 0); }
};

// Copies `from` into `to` until `from` ends, counting in `bytes` (read even if cut short).
asio::awaitable<void> relay(asio::readable_pipe& from, asio::writable_pipe& to,
                            std::uint64_t& bytes) {
    bool writing = true;
    std::vector<char> buf(64 << 10);
    for (;;) {
        auto [ec, n] = co_await from.async_read_some(asio::buffer(buf), use_nothrow);
        bytes += n;
        if (n > 0 && writing) {
            auto [wec, written] =
                co_await asio::async_write(to, asio::buffer(buf.data(), n), use_nothrow);
            (void)written;
            writing = !wec; // perf script gave up: keep draining perf record regardless
        }
        if (ec)
            break;
    }
    boost::system::error_code ignored;
    to.close(ignored);
}

asio::awaitable<record_run> run_record_pipe(const std::string& perf, const record_settings& s,
                                            bool fields) {
    record_run r;
    auto ex = co_await asio::this_coro::executor;
    const auto args = record_args(s, "-", sleep_for_probe());
    r.step.command = shell_words(args) + " | perf script";
    std::array<int, 2> fds{};
    if (::pipe2(fds.data(), O_CLOEXEC) < 0)
        co_return r;
    asio::writable_pipe to_script(ex, fds[1]);
    auto scr = child::start(ex, perf, script_args("-", fields, false), {.in = fds[0]});
    ::close(fds[0]);
    auto rec = child::start(ex, perf, args, {});
    if (!rec || !scr) {
        r.step.complaint = "cannot run " + perf;
        co_return r;
    }
    auto& rc = **rec;
    auto& sc = **scr;
    asio::steady_timer deadline(ex, run_timeout);
    std::uint64_t relayed = 0;
    auto all = (relay(rc.out(), to_script, relayed) && read_all(sc.out(), 4 << 20) &&
                read_all(rc.err(), 64 << 10) && read_all(sc.err(), 64 << 10));
    auto outcome = co_await (std::move(all) || deadline.async_wait(use_nothrow));
    if (outcome.index() == 0) {
        auto& [out, rerr, serr] = std::get<0>(outcome);
        fill_from_script(r.step, out);
        r.step.complaint = perf_complaint(rerr);
        r.script_err = std::move(serr);
    } else {
        r.step.timed_out = true;
    }
    r.step.bytes = relayed;
    r.step.status = co_await rc.stop(std::chrono::milliseconds(500));
    r.script_status = co_await sc.stop(std::chrono::milliseconds(500));
    if (r.step.complaint.empty() && r.script_status != 0)
        r.step.complaint = "perf script: " + perf_complaint(r.script_err);
    co_return r;
}

asio::awaitable<record_run> run_record_file(const std::string& perf, const record_settings& s,
                                            bool fields, std::string file) {
    record_run r;
    const auto args = record_args(s, file, sleep_for_probe());
    r.step.command = shell_words(args) + " && perf script -i " + file;
    auto rec = co_await run_command(perf, args, run_timeout);
    r.step.status = rec.exit_code;
    r.step.timed_out = rec.timed_out;
    r.step.complaint = rec.error.empty() ? perf_complaint(rec.err) : rec.error;
    std::error_code ec;
    r.step.bytes = std::filesystem::file_size(file, ec);
    if (ec)
        r.step.bytes = 0;
    if (r.step.status == 0 && r.step.bytes > 0) {
        auto scr = co_await run_command(perf, script_args(file, fields, false), run_timeout);
        r.script_status = scr.exit_code;
        r.script_err = std::move(scr.err);
        fill_from_script(r.step, scr.out);
        if (r.script_status != 0 && r.step.complaint.empty())
            r.step.complaint = "perf script: " + perf_complaint(r.script_err);
    }
    std::filesystem::remove(file, ec);
    co_return r;
}

// What the probe knows so far; runs are kept by what they asked, so none is made twice.
struct prober {
    prober(std::string perf_, std::optional<int> pid_, capabilities& caps_, std::string dir_)
        : perf(std::move(perf_))
        , pid(pid_)
        , caps(caps_)
        , dir(std::move(dir_)) {}

    std::string perf;
    std::optional<int> pid;
    capabilities& caps;
    std::string dir; // for file runs
    std::map<std::string, record_run> runs;
    int files = 0;

    static std::string key(const std::string& event, const std::string& cg, bool pipe) {
        return event + "|" + (cg.empty() ? "-" : cg) + (pipe ? "|pipe" : "|file");
    }

    record_settings settings(const std::string& event, const std::string& cg) const {
        return record_settings{{event}, 999, cg, pid};
    }

    asio::awaitable<void> run_one(std::string k, record_settings s, bool pipe, std::string file) {
        if (pipe) // (not a ?: of two co_awaits: GCC 12 destroys the result twice)
            runs[k] = co_await run_record_pipe(perf, s, caps.script_fields);
        else
            runs[k] = co_await run_record_file(perf, s, caps.script_fields, std::move(file));
    }

    // Runs those of `asked` (event, call graph) not run yet, all at once.
    asio::awaitable<void> ensure(const runs_asked& asked, bool pipe) {
        std::vector<asio::awaitable<void>> tasks;
        std::vector<std::string> order;
        for (const auto& [event, cg] : asked) {
            const auto k = key(event, cg, pipe);
            if (runs.contains(k) || std::find(order.begin(), order.end(), k) != order.end())
                continue;
            order.push_back(k);
            const std::string file = dir + "/probe" + std::to_string(files++) + ".data";
            tasks.push_back(run_one(k, settings(event, cg), pipe, file));
        }
        co_await all_of(std::move(tasks));
        for (const auto& k : order)
            caps.tried.push_back(runs[k].step);
    }

    const record_run& get(const std::string& event, const std::string& cg, bool pipe) {
        return runs[key(event, cg, pipe)];
    }

    // perf stat over `events`; a perf that refuses the whole list for one name is asked
    // again with each half, down to single events.
    asio::awaitable<void> count(std::vector<std::string> events, std::vector<std::string>& counted,
                                int depth) {
        auto r = co_await run_command(perf, stat_args(events, pid, sleep_for_probe()), run_timeout);
        probe_step step;
        step.command = shell_words(stat_args(events, pid, sleep_for_probe()));
        step.status = r.exit_code;
        step.timed_out = r.timed_out;
        if (r.exit_code != 0) // (a counting perf's stderr is its table)
            step.complaint = r.error.empty() ? perf_complaint(r.err) : r.error;
        caps.tried.push_back(step);
        if (r.exit_code == 0) {
            for (const auto& e : counted_events(r.err, events))
                counted.push_back(e);
            co_return;
        }
        if (events.size() == 1 || depth >= 6) {
            for (const auto& e : events)
                caps.rejected_events[e] =
                    "perf stat: " + (step.complaint.empty()
                                         ? "exit status " + std::to_string(step.status)
                                         : step.complaint);
            co_return;
        }
        const auto half = events.begin() + static_cast<std::ptrdiff_t>(events.size() / 2);
        std::vector<std::string> a(events.begin(), half), b(half, events.end());
        std::vector<std::string> ca, cb;
        co_await (count(std::move(a), ca, depth + 1) && count(std::move(b), cb, depth + 1));
        counted.insert(counted.end(), ca.begin(), ca.end());
        counted.insert(counted.end(), cb.begin(), cb.end());
    }
};

std::string why_failed(const probe_step& s) {
    if (s.timed_out)
        return "no answer within " + std::to_string(run_timeout.count() / 1000) + " s";
    if (s.status == 0 && s.bytes == 0)
        return "it exited 0 but wrote no data";
    std::string why = s.status < 0 ? "could not run" : "exit status " + std::to_string(s.status);
    if (!s.complaint.empty())
        why += ": " + s.complaint;
    return why;
}

std::string join(const std::vector<std::string>& items, const char* sep) {
    std::string out;
    for (const auto& s : items)
        out += (out.empty() ? "" : sep) + s;
    return out;
}

} // namespace

json::object probe_step::to_json() const {
    json::object o;
    o["command"] = command;
    o["status"] = status;
    if (timed_out)
        o["timed_out"] = true;
    o["bytes"] = bytes;
    o["samples"] = samples;
    o["stacks"] = stacks;
    o["complaint"] = complaint;
    return o;
}

json::object capabilities::to_json() const {
    json::object o;
    o["record_events"] = json::value_from(record_events);
    o["stat_only_events"] = json::value_from(stat_only_events);
    o["callgraph_method"] = callgraph.empty() ? json::value(nullptr) : json::value(callgraph);
    o["callgraph_modes"] = json::value_from(callgraph_modes);
    o["script_fields"] = script_fields;
    o["pipe_mode"] = pipe_mode;
    o["perf_event_paranoid"] = perf_event_paranoid;
    o["perf_version"] = perf_version;
    o["warnings"] = json::value_from(warnings);
    o["cannot"] = json::value_from(cannot);
    json::object rejected;
    for (const auto& [e, why] : rejected_events)
        rejected[e] = why;
    o["rejected_events"] = std::move(rejected);
    json::array steps;
    for (const auto& s : tried)
        steps.push_back(s.to_json());
    o["tried"] = std::move(steps);
    o["probe_seconds"] = probe_seconds;
    return o;
}

std::string capabilities::why_not_event(const std::string& event) const {
    std::string why = "unknown event: " + event;
    if (const auto it = rejected_events.find(event); it != rejected_events.end())
        why = event + " cannot be used with this perf (" + it->second + ")";
    if (record_events.empty()) // and why, as the probe found it
        return why + "; this perf samples no event" +
               (cannot.empty() ? std::string() : " (cannot " + join(cannot, "; cannot ") + ")");
    return why + " (this device samples " + join(record_events, ", ") + ")";
}

std::string capabilities::why_not_callgraph(const std::string& mode) const {
    std::string why = "callgraph must be one this device records: none";
    for (const auto& m : callgraph_modes)
        why += ", " + m;
    if (const auto it = unusable_callgraph.find(mode); it != unusable_callgraph.end())
        why += " (" + mode + ": " + it->second + ")";
    return why;
}

int read_perf_event_paranoid(const std::string& proc_root) {
    const auto text = procfs::read_file(proc_root + "/sys/kernel/perf_event_paranoid");
    return text ? std::atoi(text->c_str()) : 2;
}

std::string off_cpu_problem(const std::string& proc_root, const std::string& sys_root) {
    if (const int paranoid = read_perf_event_paranoid(proc_root); ::geteuid() != 0 && paranoid > -1)
        return "off-CPU needs root, or perf_event_paranoid -1 for a tracepoint (it is " +
               std::to_string(paranoid) + ")";
    for (const char* tracing : {"/kernel/tracing", "/kernel/debug/tracing"})
        if (::access((sys_root + tracing + "/events/sched/sched_switch/format").c_str(), R_OK) == 0)
            return {};
    return "off-CPU needs the sched:sched_switch tracepoint, which this kernel does not show "
           "(tracefs is not mounted at " +
           sys_root + "/kernel/tracing)";
}

std::string off_cpu_problem(const std::vector<std::string>& events) {
    auto why = off_cpu_problem();
    return why.empty() ? off_cpu_events_problem(events) : why;
}

void sweep_probe_dirs(const std::string& tmp, std::chrono::seconds older_than) {
    // Only directories this user made as mkdtemp does (0700, its own): nobody else can have put
    // anything in one, so its files go without a look at what they are (unlink never follows a
    // link), and nothing deeper is entered.
    DIR* d = ::opendir(tmp.c_str());
    if (!d)
        return;
    const auto now = ::time(nullptr);
    while (const dirent* e = ::readdir(d)) {
        const std::string_view name = e->d_name;
        struct stat st {};
        if (!name.starts_with("perfwire-probe-") ||
            ::fstatat(::dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 ||
            !S_ISDIR(st.st_mode) || st.st_uid != ::geteuid() || (st.st_mode & 077) != 0 ||
            now - st.st_mtime < older_than.count())
            continue;
        const int fd = ::openat(::dirfd(d), e->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW);
        if (fd < 0)
            continue;
        if (DIR* inner = ::fdopendir(fd)) {
            while (const dirent* f = ::readdir(inner))
                if (std::string_view(f->d_name) != "." && std::string_view(f->d_name) != "..")
                    ::unlinkat(fd, f->d_name, 0);
            ::closedir(inner); // (closes fd)
        } else {
            ::close(fd);
        }
        ::unlinkat(::dirfd(d), e->d_name, AT_REMOVEDIR);
    }
    ::closedir(d);
}

asio::awaitable<capabilities> probe(const std::string& perf, std::optional<int> pid) {
    const auto started = std::chrono::steady_clock::now();
    capabilities caps;
    caps.perf_event_paranoid = read_perf_event_paranoid();
    if (caps.perf_event_paranoid > 1 && ::geteuid() != 0)
        caps.warnings.push_back("perf_event_paranoid is " +
                                std::to_string(caps.perf_event_paranoid) +
                                ": profiling other users' processes and the kernel needs root "
                                "or a value of 1 or less");
    // An agent killed while it probed left its scratch directory: gone at the next probe.
    sweep_probe_dirs("/tmp", std::chrono::minutes(10));
    std::string dir_template = "/tmp/perfwire-probe-XXXXXX";
    if (!::mkdtemp(dir_template.data()))
        dir_template = "/tmp";
    prober p(perf, pid, caps, dir_template);
    const std::string clock = software_clocks.front();

    // First round, at once: perf's version; perf stat over every candidate (which events count
    // at all); and, betting on the common case, the software clock recorded through the pipe
    // with frame pointers and with dwarf.
    const auto asked = all_candidates();
    std::vector<std::string> counted;
    const auto clock_runs = runs_of(clock, "fp dwarf");
    // (Void operands first: Asio 1.26's operator&& takes them so.)
    auto version = co_await ((p.count(asked, counted, 0) && p.ensure(clock_runs, true)) &&
                             run_command(perf, perf_version_args(), run_timeout));
    caps.perf_version = perf_version_line(version.out);
    if (mentions_bad_field(p.get(clock, "fp", true).script_err)) {
        caps.script_fields = false; // an old perf script without -F: again in its own format
        p.runs.clear();
        co_await p.ensure(clock_runs, true);
    }
    for (const auto& e : asked) // <not supported> on this machine (no PMU, a VM)
        if (std::find(counted.begin(), counted.end(), e) == counted.end() &&
            !caps.rejected_events.contains(e))
            caps.rejected_events[e] = "not supported here";

    // Sampling events in order of preference, each proved by perf record.
    std::vector<std::string> candidates;
    for (const auto& e : sampling_preference)
        if (std::find(counted.begin(), counted.end(), e) != counted.end())
            candidates.push_back(e);
    for (const auto& e : counted)
        if (std::find(candidates.begin(), candidates.end(), e) == candidates.end())
            candidates.push_back(e);
    if (counted.empty()) // perf stat told nothing: let perf record decide
        for (const auto& e : fallback_events(clock))
            if (!caps.rejected_events.contains(e) ||
                caps.rejected_events[e] == "not supported here")
                candidates.push_back(e);
    if (candidates.size() > max_record_candidates)
        candidates.resize(max_record_candidates);

    std::string event;
    bool pipe = true, flat = false; // flat: records, but not with any call graph
    for (const auto& ev : candidates) {
        const auto graphs = runs_of(ev, is_hardware(ev) ? "fp dwarf lbr" : "fp dwarf");
        co_await p.ensure(graphs, true);
        bool any = false;
        for (const auto& [e, cg] : graphs)
            any = any || p.get(e, cg, true).streamed();
        if (any) {
            event = ev;
            break;
        }
        // Nothing through the pipe: the pipe, the call graphs or the event itself?
        const auto plain = runs_of(ev, "flat");
        const auto fp_file = runs_of(ev, "fp flat");
        co_await (p.ensure(plain, true) && p.ensure(fp_file, false));
        if (p.get(ev, "", true).worked()) {
            event = ev;
            flat = true;
        } else if (p.get(ev, "fp", false).worked() || p.get(ev, "", false).worked()) {
            event = ev;
            pipe = false;
            flat = !p.get(ev, "fp", false).worked();
            if (!flat) {
                const auto more = runs_of(ev, is_hardware(ev) ? "dwarf lbr" : "dwarf");
                co_await p.ensure(more, false);
            }
        } else {
            caps.rejected_events[ev] = "perf record: " + why_failed(p.get(ev, "", false).step);
            continue;
        }
        if (!pipe)
            caps.pipe_problem = why_failed(p.get(ev, "fp", true).step);
        break;
    }
    ::rmdir(dir_template.c_str());

    if (event.empty()) {
        caps.pipe_mode = false;
        caps.callgraph.clear();
        std::string why;
        for (const auto& ev : candidates)
            why += (why.empty() ? "" : "; ") + ev + ": " + caps.rejected_events[ev];
        caps.cannot.push_back("sample any event (" + (why.empty() ? "none counted" : why) + ")");
    } else {
        caps.record_events.assign(1, event);
        caps.pipe_mode = pipe;
        if (!pipe)
            caps.cannot.push_back("write perf.data to a pipe (perf record -o -: " +
                                  caps.pipe_problem + "); it records in rounds of files");
        // The call graph: the first mode that gave stacks.
        for (const auto& mode : callgraph_order()) {
            const auto k = prober::key(event, mode, pipe);
            if (!p.runs.contains(k))
                continue;
            const auto& r = p.runs[k];
            if (r.worked() && r.step.stacks) {
                caps.callgraph_modes.push_back(mode);
                if (caps.callgraph.empty())
                    caps.callgraph = mode;
            } else if (r.step.timed_out && !flat) {
                // Slow (dwarf unwinding on a busy device) is not unusable: a start may ask
                // for it, and its own run shows whether stacks come.
                caps.callgraph_modes.push_back(mode);
                caps.warnings.push_back("--call-graph=" + mode + " not checked (" +
                                        why_failed(r.step) + "); a start may still choose it");
            } else if (!r.worked()) {
                caps.unusable_callgraph[mode] = why_failed(r.step);
            } else {
                caps.unusable_callgraph[mode] =
                    "no stacks in " + std::to_string(r.step.samples) + " samples";
            }
        }
        const auto& fp = p.get(event, flat ? "" : "fp", pipe);
        caps.judged = fp.step.samples > 0;
        if (flat) {
            caps.cannot.push_back("record call graphs (--call-graph=fp: " +
                                  caps.unusable_callgraph["fp"] + "); samples have no stacks");
        } else if (caps.callgraph.empty() && fp.worked()) {
            caps.callgraph = "fp"; // records, but gave no stack to judge by
            caps.callgraph_modes.insert(caps.callgraph_modes.begin(), "fp");
            caps.warnings.push_back(fp.step.samples == 0
                                        ? "the target ran too little during the probe to check "
                                          "call graphs; assuming frame pointers"
                                        : "no call-graph mode yielded stacks; build the target "
                                          "with -fno-omit-frame-pointer for full stacks");
        } else if (caps.callgraph.empty()) {
            // fp fails but another mode records: take it even without stacks seen.
            for (const auto& mode : callgraph_order())
                if (p.runs.contains(prober::key(event, mode, pipe)) &&
                    p.get(event, mode, pipe).worked()) {
                    caps.callgraph = mode;
                    caps.callgraph_modes.push_back(mode);
                    break;
                }
            // Nothing finished in time, but perf record streamed: the first mode not checked.
            if (caps.callgraph.empty() && !caps.callgraph_modes.empty())
                caps.callgraph = caps.callgraph_modes.front();
        }
    }
    for (const auto& [e, why] : caps.rejected_events)
        if (why.starts_with("perf stat"))
            caps.cannot.push_back("count " + e + " (" + why + ")");
    for (const auto& e : counted)
        if (caps.record_events.empty() || e != caps.record_events.front())
            caps.stat_only_events.push_back(e);
    caps.probe_seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    co_return caps;
}

} // namespace agent
