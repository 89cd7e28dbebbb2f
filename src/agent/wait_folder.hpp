// Folds an off-CPU recording's scheduler switches into waits on the device.
//
// With --off-cpu perf script prints every switch of the target twice over: a
// sched:sched_switch sample (the stack where the thread left the CPU) and PERF_RECORD_SWITCH
// records (OUT, and IN when it is back). At thousands of switches a second that text is most of
// what the agent would send. The folder pairs them into waits — a thread off the CPU from its
// switch sample until it is back in (its IN record, else its next sample) — and sends time, not
// switches: samples of the event off-cpu weighed by the wait in ns, on the stack where it
// waited topped by the wait's kind (protocol/off_cpu.hpp), the shape the collector makes of a
// recording of switches itself.
//
// Waits shorter than the window are summed per thread, kind and stack within each window of
// perf time (one sample at the first one's start, the sum its period): a thread that switches
// ten thousand times a second costs a few samples a window. A wait as long as the window or
// longer is a sample of its own. Waits under `min_ns` are not sent (counted). Every other line
// passes as it is. Sans-IO: text in, text out.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>

namespace agent {

class wait_folder {
public:
    struct options {
        std::uint64_t min_ns = 0;              // --off-cpu-min-us: shorter waits are not sent
        std::uint64_t window_ns = 100'000'000; // short waits summed within each
    };
    struct counts {
        std::uint64_t waits = 0;       // waits sent (folded into the samples below)
        std::uint64_t samples = 0;     // off-cpu samples written for them
        std::uint64_t short_waits = 0; // under min_ns, not sent
        std::uint64_t short_ns = 0;
        std::uint64_t dropped = 0; // beyond the bounds below, or out of order
    };

    explicit wait_folder(options o);

    // Complete samples of perf script text (the chunker's boundaries) in; appended to `out`:
    // every line but the switches' as it is, and the waits too long to fold.
    void fold(std::string_view complete, std::string& out);

    // Writes the sums held to `out`. Waits still open stay open, unless the recording `ended`
    // (a round's: the next is another perf, whose first samples end no wait of this one's):
    // then they end at the last time it printed.
    void flush(std::string& out, bool ended = false);

    const counts& stats() const noexcept { return counts_; }
    // What the folding did, in a line for the log: waits sent in how many samples, the short
    // ones left out (--off-cpu-min-us) and those dropped past the bounds.
    std::string summary() const;

    // Threads waiting at once, and sums held, remembered at most: past the first a new wait is
    // dropped (counted), past the second the sums are flushed early. A stack's text is kept up
    // to max_stack_bytes and max_stack_lines (its outermost frames past them are cut; perf
    // prints 127 at most). A line is held across pieces up to max_line, then taken as it is.
    static constexpr std::size_t max_open = 4096, max_sums = 4096;
    static constexpr std::size_t max_stack_bytes = 16384, max_stack_lines = 256;
    static constexpr std::size_t max_line = std::size_t{1} << 20;

private:
    struct open_wait {
        std::uint64_t since_ns = 0;
        std::uint32_t pid = 0;
        std::string comm;
        std::string_view kind; // static text
        std::string stack;     // its frame lines, each "\t…\n"
        std::size_t lines = 0;
        bool unseen = false; // from an OUT record; its sample may come after it
    };
    struct sum {
        std::uint64_t window = 0, first_ns = 0, total_ns = 0;
        std::uint32_t pid = 0, tid = 0;
        std::string comm;
        std::string_view kind;
        std::string stack;
    };

    void line(std::string_view l, std::string& out);
    void header(std::string_view l, std::string& out);
    void end_block();
    void close(std::uint32_t tid, std::uint64_t time_ns, std::string& out);
    void write(const sum& s, std::string& out);

    options options_;
    counts counts_;
    std::unordered_map<std::uint32_t, open_wait> open_;
    std::unordered_map<std::string, sum> sums_; // by tid, kind and stack
    // The block being read: a switch sample's (its frame lines taken), one passed on, or one
    // dropped (a switch sample past max_open: its frame lines with it).
    enum class block { none, passed, switch_sample, skipped } block_ = block::none;
    std::string carry_; // a line not ended yet
    std::uint32_t block_tid_ = 0;
    std::uint64_t last_ns_ = 0; // the latest time read
    std::string key_;
};

} // namespace agent
