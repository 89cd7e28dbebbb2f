// Capability probe and continuous collection.
//
//   perf record -o - ──pipe──▶ perf script -i - ──pipe──▶ reader ──▶ chunker (zstd) ──┐
//   perf stat (one per period, stopped with SIGINT at its end) ────────▶ stat text ──┴─▶ chunk
//        cutter: what perf script printed, every flush_interval (or 16 MiB); perf stat's
//        report every --duration s
//
// perf itself is asked to hand samples on promptly (`--no-buffering` at modest rates), so a
// sample reaches the collector about a flush interval after it was taken, whatever --duration.
// A flush waits while the link still holds earlier data (may_flush): on a slow link the
// chunks grow instead of queueing up.
//
// Rounds, for perf without pipe mode (or when asked): `perf record -o roundN.data -- sleep D`
// back to back; round N+1 starts the moment round N's record exits, and round N's
// `perf script` runs while N+1 records, so wall-time coverage has no gap but process start-up.
// What a round's perf script prints is flushed as it comes, like the pipe's.
//
// A collection is one run of that pipeline; pause and stop end it (SIGINT, so perf flushes),
// resume starts another. It ends by itself when the target exits. A run held to an overhead
// budget has perf record hold a ladder of rates (record_settings::ladder): set_rate moves along
// it through perf's control descriptor, without a restart.
#pragma once

#include "agent/child.hpp"
#include "agent/chunker.hpp"
#include "agent/perf_commands.hpp"
#include "agent/probe.hpp"
#include "agent/procfs.hpp"

#include <boost/asio/steady_timer.hpp>
#include <boost/json/object.hpp>

#include <functional>
#include <memory>

namespace agent {

struct collection_settings {
    record_settings record;
    std::vector<std::string> stat_events;
    bool script_fields = true;
    std::chrono::milliseconds chunk_duration{8000}; // a period: perf stat's, a round's
    // What perf script printed is sent this often, independent of chunk_duration (0: only at
    // the end of a period).
    std::chrono::milliseconds flush_interval{333};
    // Streaming perf record may take --no-buffering (at frequencies up to prompt_max_hz): live
    // views within half a second, at a cost — perf record and perf script woken per sample use
    // about 2.5 % of a core each at 300 Hz on two busy threads, more than at 999 Hz buffered (a
    // run held to an overhead budget gives it up). False once perf refused it.
    bool prompt = true;
    std::size_t chunk_max_text = std::size_t{16} << 20;
    chunker::encoding encoding = chunker::encoding::zstd;
    bool rounds = false; // record to files in rounds instead of the pipe
    // Continuous: this many periods of chunk_duration, then the run ends (0: until stopped).
    // perf record is bounded by a sleep of them all, so its drain makes the last chunk and
    // the recording lasts what was asked, whenever perf got going.
    int periods = 0;
};

class collection {
public:
    using chunk_handler = std::function<void(std::string payload)>;
    // Whether a flush may go now (the link has taken the earlier data); always, if empty.
    using flush_gate = std::function<bool()>;

    static constexpr int prompt_max_hz = 400;

    collection(std::string perf, collection_settings settings, chunk_handler on_chunk,
               flush_gate may_flush = {});
    ~collection();
    collection(const collection&) = delete;
    collection& operator=(const collection&) = delete;

    // Runs until perf exits; every chunk, including the last partial one, reaches on_chunk.
    asio::awaitable<void> run();

    // SIGINT to perf record (it flushes and exits, the pipeline drains); perf record is killed
    // if it has not exited 3 s later, perf script if it has not ended 30 s later. Without
    // `drain`, both are killed at once and what perf script has not printed yet is dropped
    // (the last chunk holds the whole samples read so far): a stop that must not wait, as
    // when a user's run takes the place of continuous profiling. Either may follow a
    // draining stop under way.
    void request_stop(bool drain = true);
    // Ends the current chunk now.
    void request_cut();
    // Samples at `hz` from now, a rate of the ladder perf record holds (record_settings::ladder),
    // without restarting it. False when it is not one, or perf no longer listens: a restart
    // is the caller's.
    bool set_rate(int hz);

    bool stop_requested() const noexcept { return stop_requested_; }
    const std::string& error() const noexcept { return error_; } // why it could not run
    std::string record_stderr() const { return record_err_; }
    std::uint64_t lost_samples() const noexcept { return chunker_.lost_total(); }
    // An off-CPU run's waits as folded (nullptr without --off-cpu).
    const wait_folder* waits() const noexcept { return chunker_.folder(); }
    std::uint64_t chunks() const noexcept { return chunks_; }
    // Bytes of samples perf script printed (a chunk may hold only perf stat's text).
    std::uint64_t script_bytes() const noexcept { return script_bytes_; }
    // perf record's exit status (the last round's, in rounds), once it has ended; -1 before.
    int record_status() const noexcept { return record_status_; }
    // perf record did not know --no-buffering (the run went on without it): later runs need
    // not ask.
    bool prompt_refused() const noexcept { return prompt_refused_; }
    // The process profiled had exited when perf record last ended (a run of the whole system:
    // never). Judged after perf's exit, by the process's start time, so neither a zombie nor
    // a reused pid passes for the target.
    bool target_exited() const noexcept { return target_exited_; }

private:
    asio::awaitable<void> run_continuous();
    // perf record into perf script until they end. With `prompt` (--no-buffering), a last
    // chunk holding no sample is returned, not sent: a retry without the option may follow.
    asio::awaitable<std::optional<std::string>> run_pipeline(bool prompt);
    asio::awaitable<void> run_rounds();
    asio::awaitable<void> script_round(std::string file, std::string stat_text);
    asio::awaitable<void> read_script(child& script);
    asio::awaitable<void> read_script_output(child& script);
    asio::awaitable<void> cut_loop();
    // What perf script printed since the last chunk, with perf stat's report of the period.
    asio::awaitable<std::optional<std::string>> cut(bool final);
    void send(std::optional<std::string> payload);
    void flush(); // what perf script printed so far, without perf stat's report
    bool flush_due() const;
    void start_stat(asio::any_io_executor ex);
    asio::awaitable<void> watchdog();
    // Ends a perf record that outlives its workload (one that ignores `-- sleep`): SIGINT at
    // `at`, SIGKILL 3 s later, unless `over` by then.
    asio::awaitable<void> end_overrun(child& record, std::chrono::steady_clock::time_point at,
                                      const bool& over);

    std::string perf_;
    collection_settings settings_;
    chunk_handler on_chunk_;
    flush_gate may_flush_;
    chunker chunker_;
    // When what perf script printed is next sent (flush_interval after the last chunk, or a
    // moment later while the link still holds the last one).
    std::chrono::steady_clock::time_point next_flush_ = std::chrono::steady_clock::now();
    bool prompt_refused_ = false;
    std::unique_ptr<child> record_;
    std::unique_ptr<child> script_;
    std::unique_ptr<child> stat_;
    std::unique_ptr<asio::steady_timer> cut_timer_;
    std::unique_ptr<asio::steady_timer> stop_timer_;
    bool reading_done_ = false;
    bool discard_ = false; // stopped without draining: the unprinted rest is dropped
    bool cut_requested_ = false;
    bool stop_requested_ = false;
    std::uint64_t chunks_ = 0;
    std::uint64_t script_bytes_ = 0;
    int periods_ = 0; // timed cuts made
    int record_status_ = -1;
    std::optional<procfs::process_identity> target_; // as it was when the run began
    bool target_exited_ = false;
    void note_record_end(int status); // perf record ended with `status`: was it the target?
    std::unique_ptr<asio::steady_timer> round_gap_;     // rounds: waits out a round perf cut short
    std::unique_ptr<asio::steady_timer> overrun_timer_; // rounds: end_overrun
    std::string error_;
    std::string record_err_;
    int control_ = -1; // write end of perf record's --control descriptor (a ladder's)
    int rate_ = 0;     // the ladder's rate enabled now
};

} // namespace agent
