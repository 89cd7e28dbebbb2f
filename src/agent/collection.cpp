#include "agent/collection.hpp"

#include "agent/procfs.hpp"
#include "protocol/use_nothrow.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/json/value_from.hpp>

#include <algorithm>
#include <array>
#include <climits>
#include <csignal>
#include <cstring>
#include <fcntl.h>
#include <unistd.h>

namespace agent {

namespace {

// How long past the end of its workload a perf record may run before it is stopped as a stop
// would stop it: generous, since a perf on a slow or busy device takes seconds to start.
constexpr std::chrono::seconds overrun_grace{10};

} // namespace
using namespace asio::experimental::awaitable_operators;
using protocol::use_nothrow;

collection::collection(std::string perf, collection_settings settings, chunk_handler on_chunk,
                       flush_gate may_flush)
    : perf_(std::move(perf))
    , settings_(std::move(settings))
    , on_chunk_(std::move(on_chunk))
    , may_flush_(std::move(may_flush))
    , chunker_(settings_.encoding) {
    if (settings_.record.off_cpu)
        chunker_.fold_waits({settings_.record.off_cpu_min_ns});
    if (settings_.rounds) // (a round's perf has no one to listen to: one rate)
        settings_.record.ladder.clear();
}

collection::~collection() {
    if (control_ >= 0)
        ::close(control_);
}

bool collection::set_rate(int hz) {
    const auto& ladder = settings_.record.ladder;
    if (control_ < 0 || std::find(ladder.begin(), ladder.end(), hz) == ladder.end())
        return false;
    if (hz == rate_)
        return true;
    // A few lines, under PIPE_BUF: written whole or not at all (a perf that stopped reading).
    const auto text = rung_commands(settings_.record, rate_, hz);
    if (text.size() > PIPE_BUF ||
        ::write(control_, text.data(), text.size()) != static_cast<ssize_t>(text.size()))
        return false;
    rate_ = hz;
    return true;
}

void collection::start_stat(asio::any_io_executor ex) {
    if (settings_.stat_events.empty())
        return;
    auto started = child::start(ex, perf_, stat_args(settings_.stat_events, settings_.record.pid),
                                {.discard_out = true});
    if (started)
        stat_ = std::move(*started);
}

void collection::note_record_end(int status) {
    record_status_ = status;
    if (settings_.record.pid)
        target_exited_ = !target_ || procfs::has_exited(*target_);
}

asio::awaitable<void> collection::run() {
    if (settings_.record.pid)
        target_ = procfs::running_process(*settings_.record.pid);
    if (settings_.rounds)
        co_await run_rounds();
    else
        co_await run_continuous();
}

asio::awaitable<void> collection::run_continuous() {
    const bool prompt = settings_.prompt && settings_.record.frequency <= prompt_max_hz;
    auto held = co_await run_pipeline(prompt);
    if (prompt && script_bytes_ == 0 && !stop_requested_ && record_status_ > 0 &&
        record_err_.find("no-buffering") != std::string::npos) {
        // An old perf that does not know the option: the same run without it (and without
        // the perf stat report of the attempt).
        prompt_refused_ = true;
        reading_done_ = false;
        error_.clear();
        record_err_.clear();
        record_status_ = -1;
        send(co_await run_pipeline(false));
    } else {
        send(std::move(held));
    }
}

asio::awaitable<std::optional<std::string>> collection::run_pipeline(bool prompt) {
    auto ex = co_await asio::this_coro::executor;
    std::array<int, 2> fds{};
    if (::pipe2(fds.data(), O_CLOEXEC) < 0) {
        error_ = "pipe: " + std::string(std::strerror(errno));
        co_return std::nullopt;
    }
    // Periods asked for (--output): perf record bounds the run itself (its workload sleeps
    // through all of them), so the recording lasts what was asked however long perf takes to
    // start. A SIGINT at the end instead would reach a perf that is still starting on a slow
    // or busy device and end it with nothing recorded.
    std::vector<std::string> bound;
    if (settings_.periods)
        bound = {sleep_program(),
                 std::to_string(std::chrono::duration<double>(settings_.chunk_duration).count() *
                                settings_.periods)};
    auto record = settings_.record;
    record.prompt = prompt;
    // A ladder of rates: perf record listens on a pipe of its own for the one to sample at.
    std::array<int, 2> control{-1, -1};
    if (!record.ladder.empty() && ladder_possible(record) && ::pipe2(control.data(), O_CLOEXEC) < 0)
        control = {-1, -1};
    if (control[0] < 0)
        record.ladder.clear();
    auto rec = child::start(ex, perf_, record_args(record, "-", bound),
                            {.out = fds[1], .control = control[0]});
    if (control[0] >= 0) {
        ::close(control[0]);
        if (control_ >= 0)
            ::close(control_);
        control_ = control[1];
        ::fcntl(control_, F_SETFL, O_NONBLOCK); // (a perf that stopped reading blocks nothing)
        rate_ = 0;
        if (!set_rate(record.frequency)) {
            ::close(control_);
            control_ = -1;
        }
    }
    auto scr = child::start(
        ex, perf_,
        script_args("-", settings_.script_fields, !settings_.record.pid, settings_.record.off_cpu),
        {.in = fds[0]});
    ::close(fds[0]);
    ::close(fds[1]);
    if (!rec || !scr) {
        error_ = "cannot run " + perf_ + ": " + (rec ? scr.error() : rec.error()).message();
        co_return std::nullopt;
    }
    record_ = std::move(*rec);
    script_ = std::move(*scr);
    cut_timer_ = std::make_unique<asio::steady_timer>(ex);
    stop_timer_ = std::make_unique<asio::steady_timer>(ex, asio::steady_timer::time_point::max());
    start_stat(ex);
    if (stop_requested_) {
        stop_requested_ = false;
        request_stop(!discard_);
    }

    // Void operands first: Asio 1.26's tuple-and-void operator&& does not compile.
    auto [record_err, script_err] =
        co_await ((read_script(*script_) && cut_loop() && watchdog()) &&
                  read_all(record_->err(), 64 << 10) && read_all(script_->err(), 64 << 10));
    record_err_ = std::move(record_err);
    // perf script has ended: the last chunk, an unfinished sample included (not when it was
    // killed mid-sample by a stop without draining).
    auto last = co_await cut(!discard_);
    std::optional<std::string> held;
    if (prompt && script_bytes_ == 0)
        held = std::move(last); // perf stat's report alone: sent unless a retry follows
    else
        send(std::move(last));
    note_record_end(co_await record_->wait());
    if (control_ >= 0) {
        ::close(control_);
        control_ = -1;
    }
    co_await script_->wait();
    if (chunks_ == 0 && !stop_requested_) {
        // perf gave up before producing anything: say why.
        const std::string& why = record_err_.empty() ? script_err : record_err_;
        error_ = why.substr(0, why.find("\n", 200));
    }
    co_return held;
}

asio::awaitable<void> collection::read_script_output(child& script) {
    std::vector<char> buf(64 << 10);
    for (;;) {
        auto [ec, n] = co_await script.out().async_read_some(asio::buffer(buf), use_nothrow);
        if (n > 0) {
            script_bytes_ += n;
            chunker_.append(std::string_view(buf.data(), n));
            if (chunker_.chunk_bytes() >= settings_.chunk_max_text) {
                if (!settings_.rounds)
                    request_cut();
                else
                    flush(); // a huge round: in parts
            } else if (settings_.rounds && flush_due()) {
                flush(); // a round's samples as perf script names them
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
    using clock = std::chrono::steady_clock;
    auto period_end = clock::now() + settings_.chunk_duration;
    // Periods asked for: perf record's workload ends the run; a perf that outlives it (one that
    // ignores `-- sleep`) is stopped, drained, once it is overdue.
    const auto overdue =
        settings_.periods
            ? clock::now() + settings_.chunk_duration * settings_.periods + overrun_grace
            : clock::time_point::max();
    while (!reading_done_) {
        if (!cut_requested_) {
            auto wake = period_end;
            if (settings_.flush_interval.count() > 0)
                wake = std::min(wake, next_flush_);
            if (!stop_requested_)
                wake = std::min(wake, overdue);
            cut_timer_->expires_at(wake);
            co_await cut_timer_->async_wait(use_nothrow);
        }
        if (reading_done_)
            break;
        if (!stop_requested_ && clock::now() >= overdue) {
            request_stop(true);
            continue;
        }
        const bool sized = std::exchange(cut_requested_, false);
        if (clock::now() >= period_end) {
            // A period is over: its perf stat report goes with what was printed since the
            // last flush. (A period overrun by a slow cut starts the next one now.)
            period_end = std::max(period_end + settings_.chunk_duration, clock::now());
            if (settings_.periods && ++periods_ >= settings_.periods)
                continue; // the last period: perf record ends it; its drain makes the final cut
            send(co_await cut(false));
        } else if (sized || flush_due()) {
            flush();
        } else if (settings_.flush_interval.count() > 0 && clock::now() >= next_flush_) {
            // The link still holds the last chunk: look again shortly (this one grows).
            next_flush_ = clock::now() + std::chrono::milliseconds(50);
        }
    }
}

bool collection::flush_due() const {
    return settings_.flush_interval.count() > 0 &&
           std::chrono::steady_clock::now() >= next_flush_ && (!may_flush_ || may_flush_());
}

void collection::send(std::optional<std::string> payload) {
    if (!payload)
        return;
    ++chunks_;
    on_chunk_(std::move(*payload));
}

void collection::flush() {
    next_flush_ = std::chrono::steady_clock::now() + settings_.flush_interval;
    send(chunker_.cut());
}

asio::awaitable<std::optional<std::string>> collection::cut(bool final) {
    std::string stat_text;
    if (stat_) {
        auto done = std::move(stat_);
        if (!final)
            start_stat(co_await asio::this_coro::executor); // next chunk's counts start now
        co_await done->stop(std::chrono::milliseconds(1000));
        stat_text = co_await read_all(done->err(), 256 << 10);
    }
    next_flush_ = std::chrono::steady_clock::now() + settings_.flush_interval;
    co_return chunker_.cut(stat_text, final);
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
    round_gap_ = std::make_unique<asio::steady_timer>(ex);
    overrun_timer_ = std::make_unique<asio::steady_timer>(ex);
    const auto round_seconds = std::chrono::duration<double>(settings_.chunk_duration).count();
    const std::vector<std::string> bound = {sleep_program(), std::to_string(round_seconds)};

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
            record_->signal(discard_ ? SIGKILL : SIGINT);
        const auto started = std::chrono::steady_clock::now();

        // This round records while the previous one is turned into text; a perf that outlives
        // the round's workload is ended.
        bool round_over = false;
        auto recording = [this, &round_over](child& r) -> asio::awaitable<std::string> {
            auto [err, code] = co_await (read_all(r.err(), 64 << 10) && r.wait());
            round_over = true;
            overrun_timer_->cancel();
            note_record_end(code);
            co_return err;
        };
        auto guard =
            end_overrun(*record_, started + settings_.chunk_duration + overrun_grace, round_over);
        std::string record_err;
        if (previous_file) {
            record_err =
                co_await ((std::move(guard) && script_round(*previous_file, previous_stat)) &&
                          recording(*record_));
        } else {
            record_err = co_await (std::move(guard) && recording(*record_));
        }
        record_err_ = record_err;
        previous_stat.clear();
        if (stat_) {
            auto done = std::move(stat_);
            co_await done->stop(std::chrono::milliseconds(1000));
            previous_stat = co_await read_all(done->err(), 256 << 10);
        }
        previous_file = file;
        if (stop_requested_ || target_exited_ ||
            (settings_.periods && round + 1 >= settings_.periods))
            break; // stopped, the target went away, or the rounds asked for are done
        const auto round_end = started + settings_.chunk_duration;
        if (std::chrono::steady_clock::now() < round_end - std::chrono::milliseconds(200)) {
            // perf ended the round early: a failure ends the run; a clean exit while the target
            // runs (a perf that stops on its own) does not, but the next round starts only when
            // this one should have ended, so such a perf cannot make the agent spin.
            if (record_status_ != 0)
                break;
            round_gap_->expires_at(round_end);
            co_await round_gap_->async_wait(use_nothrow);
            if (stop_requested_)
                break;
        }
    }
    if (previous_file && !discard_)
        co_await script_round(*previous_file, previous_stat);
    else if (previous_file)
        std::remove(previous_file->c_str());
    reading_done_ = true;
    if (chunks_ == 0 && !stop_requested_ && error_.empty())
        error_ = record_err_.substr(0, record_err_.find('\n', 200));
    ::rmdir(dir.c_str());
}

asio::awaitable<void> collection::script_round(std::string file, std::string stat_text) {
    auto ex = co_await asio::this_coro::executor;
    auto scr = child::start(
        ex, perf_,
        script_args(file, settings_.script_fields, !settings_.record.pid, settings_.record.off_cpu),
        {});
    if (scr) {
        script_ = std::move(*scr);
        co_await (read_script_output(*script_) && read_all(script_->err()));
        co_await script_->wait();
    }
    next_flush_ = std::chrono::steady_clock::now() + settings_.flush_interval;
    send(chunker_.cut(stat_text, !discard_));
    std::remove(file.c_str());
}

void collection::request_cut() {
    cut_requested_ = true;
    if (cut_timer_)
        cut_timer_->cancel();
}

void collection::request_stop(bool drain) {
    if (stop_requested_ && (drain || discard_))
        return;
    stop_requested_ = true;
    discard_ = discard_ || !drain;
    if (round_gap_)
        round_gap_->cancel();
    if (!record_)
        return; // run() has not started perf yet; it checks the flag
    if (discard_) {
        record_->signal(SIGKILL);
        if (script_)
            script_->signal(SIGKILL);
        return;
    }
    record_->signal(SIGINT);
    stop_timer_->expires_after(std::chrono::seconds(3)); // wakes the watchdog
}

asio::awaitable<void>
collection::end_overrun(child& record, std::chrono::steady_clock::time_point at, const bool& over) {
    overrun_timer_->expires_at(at);
    co_await overrun_timer_->async_wait(use_nothrow);
    if (over)
        co_return;
    record.signal(SIGINT);
    overrun_timer_->expires_after(std::chrono::seconds(3));
    co_await overrun_timer_->async_wait(use_nothrow);
    if (!over)
        record.signal(SIGKILL);
}

asio::awaitable<void> collection::watchdog() {
    // Sleeps until a stop is requested. perf record then has 3 s to flush and exit, or is
    // killed (perf script sees the end of its input either way). perf script ends by itself
    // there, but may take a while to get to it: it names every sample, and loading a large
    // binary's symbols on a busy or slow device takes seconds. Killing it then would lose the
    // whole last chunk, so it is killed only if it has not ended 30 s after the stop.
    bool record_killed = false;
    for (;;) {
        auto [ec] = co_await stop_timer_->async_wait(use_nothrow);
        if (reading_done_)
            co_return;
        if (ec)
            continue; // re-armed by request_stop
        if (!record_killed) {
            record_->signal(SIGKILL);
            record_killed = true;
            stop_timer_->expires_after(std::chrono::seconds(27));
            continue;
        }
        script_->signal(SIGKILL);
        co_return;
    }
}

} // namespace agent
