// perf script text -> samples in a profile. Sans-IO: feed() text in any pieces.
//
// A sample is a header line, then (with call graphs) one TAB-indented frame line per frame,
// leaf first, then a blank line:
//
//   comm  pid/tid [cpu] [misc] [flags] time: [flags] [period] [flags] event: [flat frame]
//   \t    ip sym+0xoff (dso)
//
// comm may contain spaces and be right-aligned; /tid, [cpu], the 4-character irq flags
// (before or after the time), the period (old perf) and the misc letters are optional; the
// event may carry modifiers (cycles:u:ppp) or a PMU (cpu_core/cycles/, cpu/event=0x3c/), or
// be a tracepoint whose arguments follow it (sched:sched_switch: prev_comm=…). Flat output
// has its only frame on the header line. The dso is the last parenthesized group, so symbols
// containing '(', '<', spaces or operator+ survive. PERF_RECORD_* side-band lines are
// recognised and the lost ones counted. Lines that fit none of this are counted and skipped,
// never fatal. The table of shapes is test/collector/fixtures/header_shapes.tsv.
#pragma once

#include "collector/model/profile.hpp"
#include "protocol/frame.hpp"

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace collector {

// Waits (protocol/off_cpu.hpp): a thread leaving the CPU (a sched:sched_switch sample) until
// it is back (its PERF_RECORD_SWITCH IN, else its next sample) is one sample of the event
// `off-cpu`, at the time it left.
inline constexpr std::string_view off_cpu_event = off_cpu_event_name;
using protocol::off_cpu_module;
using protocol::switch_prev_state;
using protocol::wait_kind;
// Threads waiting at once, remembered; past it a new wait is not counted (waits_dropped).
inline constexpr std::size_t max_waiting_threads = 65536;

struct script_stats {
    std::uint64_t lines = 0;
    std::uint64_t samples = 0;
    std::uint64_t skipped_lines = 0;  // unrecognized
    std::uint64_t lost_events = 0;    // from PERF_RECORD_LOST records
    std::uint64_t records = 0;        // side-band records (PERF_RECORD_*), not samples
    std::uint64_t comments = 0;       // '#' lines (perf script --header)
    std::uint64_t deep_frames = 0;    // frames beyond max_stack_frames, left out
    std::uint64_t unnamed_kernel = 0; // kernel frames neither perf nor the namer could name
    // Samples whose callers' call sites were not kept: the profile held all the sites it may.
    std::uint64_t call_sites_dropped = 0;
    std::uint64_t waits = 0;         // off-cpu samples made
    std::uint64_t waits_dropped = 0; // past max_waiting_threads, or ending before they began
};

// Frames kept per sample, outermost ones dropped beyond it: perf's own limit is 127
// (kernel.perf_event_max_stack); this bounds what any view costs per stack.
inline constexpr std::size_t max_stack_frames = 1024;

// A thread's name is at most 15 bytes (TASK_COMM_LEN); some tools print longer ones. A
// header whose comm would be longer is read at another time-like token.
inline constexpr std::size_t max_comm = 31;
// A longer line is counted as skipped and never held in memory.
inline constexpr std::size_t max_line = std::size_t{1} << 20;

using protocol::perf_stat_marker;

// A chunk's perf script text and the perf stat report after the marker (empty if none).
std::pair<std::string_view, std::string_view> split_perf_stat(std::string_view chunk) noexcept;

// One header line, read without side effects.
struct header_fields {
    std::string_view comm, event, rest; // rest: a flat frame or a tracepoint's arguments
    std::uint64_t time_ns = 0, period = 1;
    std::uint32_t pid = 0, tid = 0;
    bool record = false;    // a PERF_RECORD_* side-band line, not a sample
    std::uint64_t lost = 0; // for PERF_RECORD_LOST*
    // A PERF_RECORD_SWITCH IN (perf record --switch-events): thread `tid` back on a CPU at
    // `time_ns` (tid 0 when perf printed none).
    bool switch_in = false;
    // A PERF_RECORD_SWITCH OUT: `tid` left a CPU (`preempted`: perf said "preempt").
    bool switch_out = false, preempted = false;
};
bool read_header(std::string_view line, header_fields& out) noexcept;

// Names the frames perf printed as "ADDR [unknown] (/path/module)", perf's address being a
// file offset into the module (the collector's symbolizer, through session_model).
class frame_namer {
public:
    virtual ~frame_namer() = default;
    struct name {
        std::string symbol;
        std::uint32_t offset = 0; // of the address into the function
    };
    virtual std::optional<name> name_frame(std::string_view module, std::uint64_t address) = 0;
    // Whether every frame of `module` is to be named here, whatever perf called it.
    virtual bool names_all(std::string_view module) const = 0;
    // Functions of `module` that perf names alike (`symbol`) but the collector's symbols
    // tell apart: each one's start in the module's file and its own name ("work (a.c)").
    // When the module has such functions and `symbol` is one function's own, its start
    // alone. Empty when the module has none.
    struct start {
        std::uint64_t address = 0;
        std::string name;
    };
    virtual std::vector<start> starts_of(std::string_view module, std::string_view symbol) {
        (void)module, (void)symbol;
        return {};
    }
};

class script_parser {
public:
    explicit script_parser(profile& into);

    // From now on, frames perf could not name (and every frame of a module the namer names
    // all of) are named by `namer` where it can; the others stay as perf printed them. Each
    // (module, address) is asked once.
    void name_frames_with(frame_namer* namer) noexcept {
        namer_ = namer;
        for (auto& m : memo_) // (lines a namer now names are read again)
            m.line.clear();
    }
    // Each metrics record the text carries (a protocol::metrics_note line), in the order of
    // the text: the samples after it are named with what it says.
    void on_metrics_note(std::function<void(std::string_view)> take) { notes_ = std::move(take); }

    // The namer's symbols changed. When all a parse of the same text would now do otherwise
    // is name frames nobody could name before (such frames keep their module and address),
    // they are named in place (profile::rename): `renamed`, or `unchanged` when none can be.
    // When a name it gave or a function it told apart would now be another, or a caller kept
    // no address (past the allowance of call sites), only a new parse is exact: `reparse`, no
    // sample moved. Call it between texts (after finish()). Past the allowance of call sites
    // (profile::caller_sites_full) a profile named in place keeps call sites that a new parse
    // would have left out once full.
    enum class renaming { unchanged, renamed, reparse };
    renaming name_again();

    // A large text (an import, a saved session read again): frame lines seen before are taken
    // as they were read, not read again (a direct-mapped memo of 4096 lines of up to 256 bytes,
    // about 1.1 MB, given back by memoize_frames(false)). Lines a namer names are always read.
    void memoize_frames(bool on);

    void feed(std::string_view text);
    // Ends the text: a trailing line without '\n' and the last sample are committed.
    void finish();
    // Ends the recording: a thread still waiting waited until the last time read at least, and
    // its wait counts so.
    void end_waits();

    const script_stats& stats() const noexcept { return stats_; }
    // Bytes the remembered names hold (about).
    std::size_t memory_bytes() const noexcept {
        std::size_t stacks = 0;
        for (const auto& l : last_)
            stacks += (l.frames.capacity() + l.offsets.capacity() + l.sites.capacity()) * 4;
        std::size_t told = apart_.capacity() * 4 + bases_.size() * 32 + apart_module_bytes_;
        for (const auto& a : apart_by_)
            told += 64 + a.starts.capacity() * 16 + a.by_page.size() * 32;
        return named_count_ * 48 + named_.size() * 256 + stacks + seen_.capacity() * 4 + told +
               waits_.size() * 96 + memo_.size() * (sizeof(frame_memo) + memo_line);
    }

    // Threads still off the CPU (their wait not yet ended).
    std::size_t waiting() const noexcept { return waits_.size(); }

private:
    void line(std::string_view l);
    bool header(std::string_view l);
    // Thread `tid`'s wait, if one is open, ends at `time_ns`: an off-cpu sample.
    void end_wait(std::uint32_t tid, std::uint64_t time_ns);
    void begin_unseen_wait(const header_fields& h);
    struct wait {
        std::uint64_t since_ns = 0;
        std::uint32_t site = 0, pid = 0;
        std::string comm;
        bool unseen = false; // begun by its switch record, its sample not (yet) read
    };
    std::unordered_map<std::uint32_t, wait> waits_; // by tid
    bool switch_out_ = false;    // the pending sample is a sched:sched_switch: a wait begins
    std::string_view wait_kind_; // its kind's frame name (static text)
    std::uint8_t off_cpu_ = 0;
    bool have_off_cpu_ = false;
    bool frame_text(std::string_view text); // "ip sym+off (dso)"
    // A frame line as it was read: its frame before telling apart, its offset, and where its
    // module is in the line (for telling apart again: that depends on the process).
    struct frame_memo {
        std::string line;
        std::uint32_t frame = 0, offset = 0;
        std::uint16_t module_at = 0, module_size = 0;
        bool tell = false, unnamed_kernel = false;
    };
    static constexpr std::size_t memo_slots = 4096, memo_line = 256;
    std::vector<frame_memo> memo_; // empty: no memo
    void commit();

    profile& profile_;
    script_stats stats_;
    std::string carry_;     // an unfinished line, up to max_line
    bool overlong_ = false; // skipping the rest of a line longer than that

    bool pending_ = false;
    std::uint64_t time_ns_ = 0, period_ = 1;
    std::uint64_t last_ns_ = 0; // the latest time read (samples and records)
    std::uint32_t pid_ = 0, tid_ = 0;
    std::uint8_t event_ = 0;
    std::string comm_;
    std::vector<std::uint32_t> frames_;  // leaf first
    std::vector<std::uint32_t> offsets_; // each frame's offset into its symbol (profile.hpp)
    // A thread's previous sample: its frames and offsets, and its sites root first. The part
    // of its stack a sample shares from the root with the last one of its thread (threads
    // interleave in perf's output) is not looked up again. 64 threads at a time, by tid's hash.
    struct last_stack {
        std::uint32_t tid = 0xFFFFFFFFU;
        std::vector<std::uint32_t> frames, offsets, sites;
    };
    std::array<last_stack, 64> last_;
    // Frames on the path of the sample being committed (seen_[frame] == generation_), for the
    // recursion rule.
    std::vector<std::uint32_t> seen_;
    std::uint32_t generation_ = 0;
    std::string last_event_name_;
    bool have_event_ = false;
    bool folded_wait_ =
        false; // the event is the off-cpu one a device folded (time = a wait's start)
    std::uint32_t unknown_frame_ = profile::no_frame;

    // Frames named here: per module, address -> (frame, offset), or no_frame when unnamed.
    std::uint32_t named_frame(std::string_view module, std::uint64_t address,
                              std::uint32_t& offset);
    std::function<void(std::string_view)> notes_;
    frame_namer* namer_ = nullptr;
    struct named {
        std::uint32_t frame = profile::no_frame, offset = profile::no_offset;
    };
    std::map<std::string, std::unordered_map<std::uint64_t, named>, std::less<>> named_;
    std::size_t named_count_ = 0;
    bool named_all_ = true; // every answer is in named_ (none was left out past its bounds)

    // Functions perf names alike, told apart by where they start (frame_namer::starts_of):
    // `frame` as perf named it, at runtime address `ip` and `offset` into it -> the frame of
    // the one function starting there.
    std::uint32_t told_apart(std::uint32_t frame, std::string_view module, std::string_view ip,
                             std::uint32_t offset);
    struct apart {
        std::uint32_t module = 0; // apart_modules_'s number
        struct start {
            std::uint64_t address = 0; // in the module's file
            std::uint32_t frame = 0;
        };
        std::vector<start> starts; // by address; one: the frame's own, which places its module
        // Place in a page -> the one start there (its index), or none when several are.
        std::unordered_map<std::uint32_t, std::uint32_t> by_page;
        // The frame of the function starting at `address`, else `otherwise`.
        std::uint32_t at(std::uint64_t address, std::uint32_t otherwise) const;
    };
    std::vector<std::uint32_t> apart_; // by frame: apart_by_'s index, or not asked / alone
    std::vector<apart> apart_by_;
    std::unordered_map<std::string, std::uint32_t> apart_modules_;
    std::size_t apart_module_bytes_ = 0;
    // (pid, module) -> where the module is loaded in that process, less its file addresses.
    std::unordered_map<std::uint64_t, std::uint64_t> bases_;
    // Frames of this sample not placed when read: placed at its end, by what its other
    // frames placed.
    struct unplaced {
        std::size_t index = 0;   // in frames_
        std::uint64_t start = 0; // its runtime start
        std::uint32_t apart = 0; // apart_by_'s index
    };
    std::vector<unplaced> unplaced_;
    void place_unplaced();
};

// Addresses and modules remembered per parser; past them each is asked again (the namer's
// answers are bounded work).
inline constexpr std::size_t max_named_addresses = std::size_t{1} << 20;
inline constexpr std::size_t max_named_modules = 1024;

} // namespace collector
