#include "agent/collection.hpp"

#include "agent/procfs.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/json/value_from.hpp>

#include <algorithm>
#include <array>
#include <csignal>
#include <cstring>
#include <fcntl.h>
#include <unistd.h>

namespace agent {
using namespace asio::experimental::awaitable_operators;
constexpr auto use_nothrow = asio::as_tuple(asio::use_awaitable);

namespace {

// Output of `perf record -o - | perf script -i -`, bounded by `timeout`.
struct pipeline_output {
    std::string script_out, record_err, script_err;
    bool started = false;
};

asio::awaitable<pipeline_output> run_pipeline(const std::string& perf,
                                              const std::vector<std::string>& record,
                                              const std::vector<std::string>& script,
                                              std::chrono::milliseconds timeout) {
    pipeline_output r;
    auto ex = co_await asio::this_coro::executor;
    std::array<int, 2> fds{};
    if (::pipe2(fds.data(), O_CLOEXEC) < 0)
        co_return r;
    auto rec = child::start(ex, perf, record, {.out = fds[1]});
    auto scr = child::start(ex, perf, script, {.in = fds[0]});
    ::close(fds[0]);
    ::close(fds[1]);
    if (!rec || !scr)
        co_return r;
    r.started = true;
    auto& rc = **rec;
    auto& sc = **scr;
    asio::steady_timer deadline(ex, timeout);
    auto all = read_all(sc.out(), 4 << 20) && read_all(rc.err()) && read_all(sc.err());
    auto outcome = co_await (std::move(all) || deadline.async_wait(use_nothrow));
    if (outcome.index() == 0) {
        auto& [out, rerr, serr] = std::get<0>(outcome);
        r.script_out = std::move(out);
        r.record_err = std::move(rerr);
        r.script_err = std::move(serr);
    }
    co_await rc.stop(std::chrono::milliseconds(500));
    co_await sc.stop(std::chrono::milliseconds(500));
    co_return r;
}

bool mentions_bad_field(std::string_view err) {
    return err.find("Invalid field") != std::string_view::npos ||
           err.find("unknown field") != std::string_view::npos;
}

// Built outside the coroutines: GCC 12 mis-compiles braced lists of string literals inside
// a coroutine ("array used as initializer").
std::vector<std::string> sleep_for_probe() {
    return {"sleep", "0.25"};
}
std::vector<std::string> version_args() {
    return {"--version"};
}
record_settings probe_settings(const std::string& event, const std::string& callgraph,
                               std::optional<int> pid) {
    return record_settings{{event}, 999, callgraph, pid};
}
std::vector<std::string> probe_script(bool fields) {
    return script_args("-", fields, false);
}

} // namespace

boost::json::object capabilities::to_json() const {
    boost::json::object o;
    o["record_events"] = boost::json::value_from(record_events);
    o["stat_only_events"] = boost::json::value_from(stat_only_events);
    o["callgraph_method"] =
        callgraph.empty() ? boost::json::value(nullptr) : boost::json::value(callgraph);
    o["callgraph_modes"] = boost::json::value_from(callgraph_modes);
    o["script_fields"] = script_fields;
    o["pipe_mode"] = pipe_mode;
    o["perf_event_paranoid"] = perf_event_paranoid;
    o["perf_version"] = perf_version;
    o["warnings"] = boost::json::value_from(warnings);
    o["probe_seconds"] = probe_seconds;
    return o;
}

int read_perf_event_paranoid(const std::string& proc_root) {
    const auto text = procfs::read_file(proc_root + "/sys/kernel/perf_event_paranoid");
    return text ? std::atoi(text->c_str()) : 2;
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

    std::vector<std::string> asked = candidate_events;
    asked.insert(asked.end(), software_clocks.begin(), software_clocks.end());
    const auto to = std::chrono::milliseconds(5000);

    // perf stat tells which events count at all; one run covers every candidate. The
    // call-graph checks on the software clock run alongside, fp and dwarf: which modes this
    // perf and kernel can record at all, for the user to choose from. (lbr needs a hardware
    // event: it is tried below on the sampling event, when that is one.)
    const record_settings clock_fp = probe_settings(software_clocks.front(), "fp", pid);
    const record_settings clock_dwarf = probe_settings(software_clocks.front(), "dwarf", pid);
    auto [version, stat, clock_run, dwarf_run] = co_await (
        run_command(perf, version_args(), to) &&
        run_command(perf, stat_args(asked, pid, sleep_for_probe()), to) &&
        run_pipeline(perf, record_args(clock_fp, "-", sleep_for_probe()), probe_script(true), to) &&
        run_pipeline(perf, record_args(clock_dwarf, "-", sleep_for_probe()), probe_script(true),
                     to));
    caps.perf_version = perf_version_line(version.out);
    const auto counted = counted_events(stat.err, asked);

    for (const auto& ev : sampling_preference)
        if (std::find(counted.begin(), counted.end(), ev) != counted.end()) {
            caps.record_events = {ev};
            break;
        }
    if (caps.record_events.empty()) {
        caps.warnings.push_back("perf stat counted no usable event: " +
                                std::string(stat.err.substr(0, 300)));
        caps.record_events = {"cpu-clock"};
    }
    for (const auto& ev : counted)
        if (ev != caps.record_events.front())
            caps.stat_only_events.push_back(ev);

    caps.pipe_mode = clock_run.started && clock_run.record_err.find("rror") == std::string::npos;
    if (mentions_bad_field(clock_run.script_err)) {
        caps.script_fields = false;
        auto [c, d] = co_await (run_pipeline(perf, record_args(clock_fp, "-", sleep_for_probe()),
                                             probe_script(false), to) &&
                                run_pipeline(perf, record_args(clock_dwarf, "-", sleep_for_probe()),
                                             probe_script(false), to));
        clock_run = std::move(c);
        dwarf_run = std::move(d);
    }
    const bool clock_stacks = has_call_chains(clock_run.script_out);
    bool dwarf_stacks = has_call_chains(dwarf_run.script_out), lbr_stacks = false;

    // Frame pointers first; dwarf and lbr only when fp gave no stacks.
    const std::string& primary = caps.record_events.front();
    pipeline_output fp_run = std::move(clock_run);
    if (primary != clock_fp.events.front()) { // a hardware event: lbr may work too
        auto [f, l] = co_await (
            run_pipeline(perf,
                         record_args(probe_settings(primary, "fp", pid), "-", sleep_for_probe()),
                         probe_script(caps.script_fields), to) &&
            run_pipeline(perf,
                         record_args(probe_settings(primary, "lbr", pid), "-", sleep_for_probe()),
                         probe_script(caps.script_fields), to));
        fp_run = std::move(f);
        lbr_stacks = has_call_chains(l.script_out);
    }
    const bool any_samples = fp_run.script_out.find('\n') != std::string::npos;
    if (has_call_chains(fp_run.script_out) || !any_samples) {
        caps.callgraph = "fp";
        if (!any_samples)
            caps.warnings.push_back("the target ran too little during the probe to check call "
                                    "graphs; assuming frame pointers");
    } else {
        record_settings dwarf{{primary}, 999, "dwarf", pid};
        record_settings lbr{{primary}, 999, "lbr", pid};
        auto [d, l] = co_await (run_pipeline(perf, record_args(dwarf, "-", sleep_for_probe()),
                                             probe_script(caps.script_fields), to) &&
                                run_pipeline(perf, record_args(lbr, "-", sleep_for_probe()),
                                             probe_script(caps.script_fields), to));
        dwarf_stacks = dwarf_stacks || has_call_chains(d.script_out);
        lbr_stacks = lbr_stacks || has_call_chains(l.script_out);
        if (has_call_chains(d.script_out))
            caps.callgraph = "dwarf";
        else if (has_call_chains(l.script_out))
            caps.callgraph = "lbr";
        else {
            caps.callgraph = "fp";
            caps.warnings.push_back("no call-graph mode yielded stacks; build the target with "
                                    "-fno-omit-frame-pointer for full stacks");
        }
    }
    // The modes that can be chosen: those that gave stacks, and always the default.
    for (const auto& [mode, works] : {std::pair<std::string, bool>{"fp", clock_stacks},
                                      {"dwarf", dwarf_stacks},
                                      {"lbr", lbr_stacks}})
        if (works || mode == caps.callgraph)
            caps.callgraph_modes.push_back(mode);
    caps.probe_seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    co_return caps;
}

collection::collection(std::string perf, collection_settings settings, chunk_handler on_chunk)
    : perf_(std::move(perf))
    , settings_(std::move(settings))
    , on_chunk_(std::move(on_chunk))
    , chunker_(settings_.encoding) {}

void collection::start_stat(asio::any_io_executor ex) {
    if (settings_.stat_events.empty())
        return;
    auto started = child::start(ex, perf_, stat_args(settings_.stat_events, settings_.record.pid),
                                {.discard_out = true});
    if (started)
        stat_ = std::move(*started);
}

asio::awaitable<void> collection::run() {
    if (settings_.rounds)
        co_await run_rounds();
    else
        co_await run_continuous();
}

asio::awaitable<void> collection::run_continuous() {
    auto ex = co_await asio::this_coro::executor;
    std::array<int, 2> fds{};
    if (::pipe2(fds.data(), O_CLOEXEC) < 0) {
        error_ = "pipe: " + std::string(std::strerror(errno));
        co_return;
    }
    auto rec = child::start(ex, perf_, record_args(settings_.record, "-"), {.out = fds[1]});
    auto scr =
        child::start(ex, perf_, script_args("-", settings_.script_fields, !settings_.record.pid),
                     {.in = fds[0]});
    ::close(fds[0]);
    ::close(fds[1]);
    if (!rec || !scr) {
        error_ = "cannot run " + perf_ + ": " + (rec ? scr.error() : rec.error()).message();
        co_return;
    }
    record_ = std::move(*rec);
    script_ = std::move(*scr);
    cut_timer_ = std::make_unique<asio::steady_timer>(ex);
    stop_timer_ = std::make_unique<asio::steady_timer>(ex, asio::steady_timer::time_point::max());
    start_stat(ex);
    if (stop_requested_) {
        stop_requested_ = false;
        request_stop();
    }

    // Void operands first: Asio 1.26's tuple-and-void operator&& does not compile.
    auto [record_err, script_err] =
        co_await ((read_script(*script_) && cut_loop() && watchdog()) &&
                  read_all(record_->err(), 64 << 10) && read_all(script_->err(), 64 << 10));
    record_err_ = std::move(record_err);
    record_status_ = co_await record_->wait();
    co_await script_->wait();
    if (chunks_ == 0 && !stop_requested_) {
        // perf gave up before producing anything: say why.
        const std::string& why = record_err_.empty() ? script_err : record_err_;
        error_ = why.substr(0, why.find("\n", 200));
    }
}

asio::awaitable<void> collection::read_script_output(child& script) {
    std::vector<char> buf(64 << 10);
    for (;;) {
        auto [ec, n] = co_await script.out().async_read_some(asio::buffer(buf), use_nothrow);
        if (n > 0) {
            chunker_.append(std::string_view(buf.data(), n));
            if (chunker_.chunk_bytes() >= settings_.chunk_max_text) {
                if (!settings_.rounds) {
                    request_cut();
                } else if (auto payload = chunker_.cut()) { // a huge round: send it in parts
                    ++chunks_;
                    on_chunk_(std::move(*payload));
                }
            }
        }
        if (ec)
            break;
    }
}

asio::awaitable<void> collection::read_script(child& script) {
    co_await read_script_output(script);
    reading_done_ = true;
    cut_timer_->cancel();
    stop_timer_->cancel();
}

asio::awaitable<void> collection::cut_loop() {
    while (!reading_done_) {
        if (!cut_requested_) {
            cut_timer_->expires_after(settings_.chunk_duration);
            co_await cut_timer_->async_wait(use_nothrow);
        }
        if (reading_done_)
            break;
        const bool timed = !cut_requested_;
        cut_requested_ = false;
        if (timed && settings_.periods && ++periods_ >= settings_.periods) {
            request_stop(); // the last period: its chunk is the final cut, after the drain
            continue;
        }
        co_await cut(false);
    }
    co_await cut(true);
}

asio::awaitable<void> collection::cut(bool final) {
    std::string stat_text;
    if (stat_) {
        auto done = std::move(stat_);
        if (!final)
            start_stat(co_await asio::this_coro::executor); // next chunk's counts start now
        co_await done->stop(std::chrono::milliseconds(1000));
        stat_text = co_await read_all(done->err(), 256 << 10);
    }
    if (auto payload = chunker_.cut(stat_text, final)) {
        ++chunks_;
        on_chunk_(std::move(*payload));
    }
}

asio::awaitable<void> collection::run_rounds() {
    auto ex = co_await asio::this_coro::executor;
    std::string dir_template = "/tmp/perfwire-rounds-XXXXXX";
    if (!::mkdtemp(dir_template.data())) {
        error_ = "mkdtemp: " + std::string(std::strerror(errno));
        co_return;
    }
    const std::string dir = dir_template;
    cut_timer_ = std::make_unique<asio::steady_timer>(ex);
    stop_timer_ = std::make_unique<asio::steady_timer>(ex, asio::steady_timer::time_point::max());
    const auto round_seconds = std::chrono::duration<double>(settings_.chunk_duration).count();
    const std::vector<std::string> bound = {"sleep", std::to_string(round_seconds)};

    std::optional<std::string> previous_file;
    std::string previous_stat;
    for (int round = 0;; ++round) {
        const std::string file = dir + "/round" + std::to_string(round) + ".data";
        auto rec = child::start(ex, perf_, record_args(settings_.record, file, bound),
                                {.discard_out = true});
        if (!rec) {
            error_ = "cannot run " + perf_ + ": " + rec.error().message();
            break;
        }
        record_ = std::move(*rec);
        start_stat(ex);
        if (stop_requested_)
            record_->signal(SIGINT);
        const auto started = std::chrono::steady_clock::now();

        // This round records while the previous one is turned into text.
        auto recording = [](child& r) -> asio::awaitable<std::string> {
            auto [err, code] = co_await (read_all(r.err(), 64 << 10) && r.wait());
            (void)code;
            co_return err;
        };
        std::string record_err;
        if (previous_file) {
            record_err =
                co_await (script_round(*previous_file, previous_stat) && recording(*record_));
        } else {
            record_err = co_await recording(*record_);
        }
        record_err_ = record_err;
        previous_stat.clear();
        if (stat_) {
            auto done = std::move(stat_);
            co_await done->stop(std::chrono::milliseconds(1000));
            previous_stat = co_await read_all(done->err(), 256 << 10);
        }
        previous_file = file;
        const bool cut_short = std::chrono::steady_clock::now() - started <
                               settings_.chunk_duration - std::chrono::milliseconds(200);
        if (stop_requested_ || cut_short)
            break; // stopped, or the target went away
    }
    if (previous_file)
        co_await script_round(*previous_file, previous_stat);
    reading_done_ = true;
    if (chunks_ == 0 && !stop_requested_ && error_.empty())
        error_ = record_err_.substr(0, record_err_.find('\n', 200));
    ::rmdir(dir.c_str());
}

asio::awaitable<void> collection::script_round(std::string file, std::string stat_text) {
    auto ex = co_await asio::this_coro::executor;
    auto scr = child::start(ex, perf_,
                            script_args(file, settings_.script_fields, !settings_.record.pid), {});
    if (scr) {
        script_ = std::move(*scr);
        co_await (read_script_output(*script_) && read_all(script_->err()));
        co_await script_->wait();
    }
    if (auto payload = chunker_.cut(stat_text, true)) {
        ++chunks_;
        on_chunk_(std::move(*payload));
    }
    std::remove(file.c_str());
}

void collection::request_cut() {
    cut_requested_ = true;
    if (cut_timer_)
        cut_timer_->cancel();
}

void collection::request_stop() {
    if (stop_requested_)
        return;
    stop_requested_ = true;
    if (!record_)
        return; // run() has not started perf yet; it checks the flag
    record_->signal(SIGINT);
    stop_timer_->expires_after(std::chrono::seconds(3)); // wakes the watchdog
}

asio::awaitable<void> collection::watchdog() {
    // Sleeps until a stop is requested; kills perf if it has not drained 3 s later.
    for (;;) {
        auto [ec] = co_await stop_timer_->async_wait(use_nothrow);
        if (reading_done_)
            co_return;
        if (!ec) {
            record_->signal(SIGKILL);
            script_->signal(SIGKILL);
            co_return;
        }
    }
}

} // namespace agent
