#include "collector/parse/perf_script.hpp"
#include "collector/parse/blanks.hpp"

#include <algorithm>

#include <cstring>

namespace collector {
namespace {

bool all_digits(std::string_view s) noexcept {
    if (s.empty())
        return false;
    for (char c : s)
        if (!is_digit(c))
            return false;
    return true;
}

std::uint64_t to_u64(std::string_view s) noexcept {
    std::uint64_t v = 0;
    for (char c : s)
        v = v * 10 + static_cast<std::uint64_t>(c - '0');
    return v;
}

// The last space-separated token of `s` (already right-trimmed), and what precedes it.
std::pair<std::string_view, std::string_view> pop_token(std::string_view s) noexcept {
    const auto sp = s.find_last_of(" \t");
    if (sp == std::string_view::npos)
        return {s, {}};
    return {s.substr(sp + 1), trim_blanks(s.substr(0, sp))};
}

// "1234.567890" -> nanoseconds.
std::uint64_t parse_time(std::string_view s) noexcept {
    const auto dot = s.find('.');
    std::uint64_t ns = to_u64(s.substr(0, dot)) * 1000000000ULL;
    if (dot != std::string_view::npos) {
        std::uint64_t frac = 0;
        int digits = 0;
        for (std::size_t i = dot + 1; i < s.size() && digits < 9; ++i, ++digits)
            frac = frac * 10 + static_cast<std::uint64_t>(s[i] - '0');
        for (; digits < 9; ++digits)
            frac *= 10;
        ns += frac;
    }
    return ns;
}

// Irq/softirq flags as perf prints them before the time: 4 characters of [.a-zA-Z].
bool is_flags(std::string_view t) noexcept {
    if (t.size() != 4)
        return false;
    for (char c : t)
        if (!(c == '.' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')))
            return false;
    return true;
}

// perf's -F misc: where the sample was taken, 1 or 2 of K (kernel), U (user), H (hypervisor),
// G (guest).
bool is_misc(std::string_view t) noexcept {
    if (t.empty() || t.size() > 2)
        return false;
    for (char c : t)
        if (c != 'K' && c != 'U' && c != 'H' && c != 'G')
            return false;
    return true;
}

// An agent held to an overhead budget samples each event at several rates, one at a time,
// each by a name of its own ("cpu-clock.250hz", "cycles:u.99hz": agent/perf_commands.hpp,
// rung_name): the event itself, its samples weighed by their periods as any other's.
std::string_view rung_base(std::string_view event) noexcept {
    if (!event.ends_with("hz"))
        return event;
    const auto dot = event.rfind('.');
    if (dot == std::string_view::npos || dot == 0 || dot + 3 >= event.size())
        return event;
    for (const char c : event.substr(dot + 1, event.size() - 2 - dot - 1))
        if (c < '0' || c > '9')
            return event;
    return event.substr(0, dot);
}

// "sched:sched_switch", "probe_app:main": a subsystem and a name. "cycles:u" or
// "cpu-clock:pppH" is an event with modifiers.
bool is_tracepoint(std::string_view event) noexcept {
    const auto colon = event.rfind(':');
    if (colon == std::string_view::npos || colon == 0)
        return false;
    for (char c : event.substr(colon + 1))
        if (std::string_view("ukhIGHpPSDWebRrx").find(c) == std::string_view::npos)
            return true;
    return colon + 1 == event.size();
}

// A frame's text after its address, "symbol+0x10 (module)": the module taken off `rest` into
// `module` when there is one. The module is the last balanced group: "(/bin/app (deleted))"
// is one.
void split_module(std::string_view& rest, std::string_view& module) noexcept {
    if (rest.empty() || rest.back() != ')')
        return;
    std::size_t depth = 0, open = std::string_view::npos;
    for (std::size_t i = rest.size(); i-- > 0;) {
        if (rest[i] == ')')
            ++depth;
        else if (rest[i] == '(' && --depth == 0) {
            open = i;
            break;
        }
    }
    if (open != std::string_view::npos && (open == 0 || rest[open - 1] == ' ')) {
        module = rest.substr(open + 1, rest.size() - open - 2);
        rest = trim_blanks(rest.substr(0, open));
    }
}

} // namespace

std::pair<std::string_view, std::string_view> split_perf_stat(std::string_view chunk) noexcept {
    const auto at = chunk.find(perf_stat_marker);
    if (at == std::string_view::npos)
        return {chunk, {}};
    return {chunk.substr(0, at), chunk.substr(at + perf_stat_marker.size())};
}

script_parser::script_parser(profile& into)
    : profile_(into) {}

void script_parser::feed(std::string_view text) {
    if (!carry_.empty() || overlong_) {
        const auto nl = text.find('\n');
        const auto part = text.substr(0, nl);
        if (!overlong_ && carry_.size() + part.size() > max_line) {
            overlong_ = true; // no line perf prints is this long: skip it, keep nothing
            carry_.clear();
            carry_.shrink_to_fit();
            ++stats_.lines;
            ++stats_.skipped_lines;
        }
        if (!overlong_)
            carry_.append(part);
        if (nl == std::string_view::npos)
            return;
        if (!overlong_)
            line(carry_);
        overlong_ = false;
        carry_.clear();
        text.remove_prefix(nl + 1);
    }
    const char* p = text.data();
    const char* end = p + text.size();
    while (p < end) {
        const void* nl = std::memchr(p, '\n', static_cast<std::size_t>(end - p));
        if (!nl) {
            const auto size = static_cast<std::size_t>(end - p);
            if (size > max_line) {
                overlong_ = true;
                ++stats_.lines;
                ++stats_.skipped_lines;
            } else {
                carry_.assign(p, size);
            }
            return;
        }
        const char* e = static_cast<const char*>(nl);
        line(std::string_view(p, static_cast<std::size_t>(e - p)));
        p = e + 1;
    }
}

void script_parser::finish() {
    overlong_ = false;
    if (!carry_.empty()) {
        line(carry_);
        carry_.clear();
    }
    commit();
}

void script_parser::end_waits() {
    // (One that began at the last time read is no wait.)
    std::vector<std::uint32_t> tids;
    for (const auto& [tid, w] : waits_)
        if (w.since_ns < last_ns_)
            tids.push_back(tid);
    std::sort(tids.begin(), tids.end());
    for (const auto tid : tids)
        end_wait(tid, last_ns_);
    waits_.clear();
}

void script_parser::line(std::string_view l) {
    ++stats_.lines;
    if (!l.empty() && l.back() == '\r')
        l.remove_suffix(1);
    if (l.empty()) {
        commit();
        return;
    }
    if (l.front() == '\t') {
        if (!pending_ || !frame_text(l)) {
            ++stats_.skipped_lines;
        }
        return;
    }
    commit();
    if (header(l))
        return;
    if (l.front() == '#') {
        // perf script --header's block and "# Total Lost Samples: N" from perf report.
        constexpr std::string_view total_lost = "# Total Lost Samples: ";
        if (l.rfind(total_lost, 0) == 0 && all_digits(trim_blanks(l.substr(total_lost.size()))))
            stats_.lost_events += to_u64(trim_blanks(l.substr(total_lost.size())));
        else if (l.rfind(protocol::metrics_note, 0) == 0 && notes_)
            notes_(l.substr(protocol::metrics_note.size()));
        ++stats_.comments;
        return;
    }
    ++stats_.skipped_lines;
}

namespace {

// The fields right of a time candidate ("[flags] [period] [flags] event: rest") and left of
// it ("comm pid/tid [cpu] [misc] [flags]"); false when either side is not what perf prints.
bool read_header_at(std::string_view l, std::size_t time_begin, std::size_t colon,
                    header_fields& out) noexcept {
    std::string_view right = trim_blanks(l.substr(colon + 1));
    auto take = [&right]() {
        const auto sp = right.find_first_of(" \t");
        const auto t = right.substr(0, sp);
        right = sp == std::string_view::npos ? std::string_view() : trim_blanks(right.substr(sp));
        return t;
    };
    // "comm pid/tid [cpu] [misc] [flags]" left of the time (a record's may be "comm tid").
    auto read_thread = [&]() {
        auto [tok, rest] = pop_token(trim_blanks(l.substr(0, time_begin)));
        if (is_flags(tok))
            std::tie(tok, rest) = pop_token(rest);
        if (is_misc(tok))
            std::tie(tok, rest) = pop_token(rest);
        if (tok.size() >= 3 && tok.front() == '[' && tok.back() == ']' &&
            all_digits(tok.substr(1, tok.size() - 2)))
            std::tie(tok, rest) = pop_token(rest);
        const auto slash = tok.find('/');
        const auto pid_text = tok.substr(0, slash);
        const auto tid_text = slash == std::string_view::npos ? tok : tok.substr(slash + 1);
        if (!all_digits(pid_text) || !all_digits(tid_text) || pid_text.size() > 10 ||
            tid_text.size() > 10 || rest.size() > max_comm)
            return false;
        const auto pid = to_u64(pid_text), tid = to_u64(tid_text);
        if (pid > 0xffffffffULL || tid > 0xffffffffULL)
            return false;
        out.comm = rest;
        out.pid = static_cast<std::uint32_t>(pid);
        out.tid = static_cast<std::uint32_t>(tid);
        return true;
    };
    auto first = take();
    if (first.rfind("PERF_RECORD_", 0) == 0) {
        // A side-band record (--show-lost-events, --show-task-events, …): not a sample; its
        // thread may be -1/-1. The lost ones are counted; a switch back in ends a wait.
        out = {};
        out.record = true;
        if (first.rfind("PERF_RECORD_LOST", 0) == 0 && take() == "lost") {
            const auto n = take();
            if (all_digits(n) && n.size() <= 19)
                out.lost = to_u64(n);
        } else if (first == "PERF_RECORD_SWITCH" || first == "PERF_RECORD_SWITCH_CPU_WIDE") {
            const auto way = take();
            const bool preempt = take() == "preempt";
            if ((way == "IN" || way == "OUT") && read_thread() && out.tid != 0) {
                out.switch_in = way == "IN";
                out.switch_out = way == "OUT";
                out.preempted = preempt;
                out.time_ns = parse_time(l.substr(time_begin, colon - time_begin));
            }
        }
        return true;
    }
    std::uint64_t period = 1;
    bool have_period = false;
    for (;;) {
        if (is_flags(first)) {
            first = take();
        } else if (!have_period && all_digits(first) && first.size() <= 19) {
            period = to_u64(first);
            have_period = true;
            first = take();
        } else {
            break;
        }
    }
    if (first.size() < 2 || first.back() != ':')
        return false;

    if (!read_thread())
        return false;
    out.record = false;
    out.lost = 0;
    out.switch_in = false;
    out.time_ns = parse_time(l.substr(time_begin, colon - time_begin));
    out.period = period;
    out.event = rung_base(first.substr(0, first.size() - 1));
    out.rest = right;
    return true;
}

} // namespace

// The time is a "<digits>.<digits>:" token. The comm may hold anything a thread name can,
// even such a token, and a tracepoint's arguments may too, so every candidate is tried from
// the right and the first one whose both sides read as perf prints them wins, with the comm
// no longer than a thread name can be.
bool read_header(std::string_view l, header_fields& out) noexcept {
    for (std::size_t pos = l.rfind(':'); pos != std::string_view::npos && pos > 0;
         pos = l.rfind(':', pos - 1)) {
        if (pos + 1 < l.size() && l[pos + 1] != ' ' && l[pos + 1] != '\t')
            continue;
        std::size_t j = pos;
        while (j > 0 && is_digit(l[j - 1]))
            --j;
        if (j == pos || j == 0 || l[j - 1] != '.')
            continue;
        std::size_t k = j - 1;
        while (k > 0 && is_digit(l[k - 1]))
            --k;
        if (k == j - 1 || (k > 0 && l[k - 1] != ' ' && l[k - 1] != '\t'))
            continue;
        if (read_header_at(l, k, pos, out))
            return true;
    }
    return false;
}

bool script_parser::header(std::string_view l) {
    header_fields h;
    if (!read_header(l, h))
        return false;
    last_ns_ = std::max(last_ns_, h.time_ns);
    if (h.record) {
        stats_.lost_events += h.lost;
        ++stats_.records;
        if (h.switch_in)
            end_wait(h.tid, h.time_ns);
        else if (h.switch_out && !waits_.count(h.tid))
            begin_unseen_wait(h);
        return true;
    }
    // The thread runs: a wait of its still open ended by now (perf printed no switch back in)
    // — but for the sample of the switch whose record came first: the wait it began.
    switch_out_ = h.event == "sched:sched_switch";
    const auto open = switch_out_ ? waits_.find(h.tid) : waits_.end();
    if (open == waits_.end() || !open->second.unseen)
        end_wait(h.tid, h.time_ns);
    if (switch_out_)
        wait_kind_ = wait_kind(switch_prev_state(h.rest));
    time_ns_ = h.time_ns;
    pid_ = h.pid;
    tid_ = h.tid;
    period_ = h.period;
    comm_.assign(h.comm);
    if (!switch_out_ && (!have_event_ || h.event != last_event_name_)) {
        event_ = profile_.intern_event(h.event);
        last_event_name_.assign(h.event);
        have_event_ = true;
        folded_wait_ = h.event == off_cpu_event;
    }
    // A wait the device folded is a sample at its start: the recording went on to its end.
    if (folded_wait_ && !switch_out_)
        profile_.extend_to(h.time_ns + std::min<std::uint64_t>(h.period, UINT64_MAX - h.time_ns));
    frames_.clear();
    offsets_.clear();
    unplaced_.clear();
    pending_ = true;
    if (!h.rest.empty() && !is_tracepoint(h.event))
        frame_text(h.rest); // flat output: the only frame is on the header line (a
                            // tracepoint's arguments are not a frame)
    return true;
}

void script_parser::memoize_frames(bool on) {
    if (on && memo_.empty())
        memo_.resize(memo_slots);
    else if (!on)
        std::vector<frame_memo>().swap(memo_);
}

bool script_parser::frame_text(std::string_view text) {
    if (frames_.size() >= max_stack_frames) {
        ++stats_.deep_frames;
        return true; // a frame line, but the stack is as deep as it may be
    }
    text = trim_blanks(text);
    const auto sp = text.find(' ');
    // The same line read before (by its address's last 8 digits and its length; then whole).
    frame_memo* memo = nullptr;
    if (!memo_.empty() && sp != 0 && sp != std::string_view::npos && text.size() <= memo_line) {
        std::uint64_t w = 0;
        const auto n = std::min<std::size_t>(sp, 8);
        std::memcpy(&w, text.data() + sp - n, n);
        w ^= static_cast<std::uint64_t>(text.size()) << 56;
        memo = &memo_[(w * 0x9E3779B97F4A7C15ULL) >> 52];
        static_assert(memo_slots == 4096);
        if (memo->line.size() == text.size() &&
            std::memcmp(memo->line.data(), text.data(), text.size()) == 0) {
            auto frame = memo->frame;
            if (memo->unnamed_kernel)
                ++stats_.unnamed_kernel;
            if (memo->tell)
                frame = told_apart(
                    frame, std::string_view(memo->line).substr(memo->module_at, memo->module_size),
                    text.substr(0, sp), memo->offset);
            frames_.push_back(frame);
            offsets_.push_back(memo->offset);
            return true;
        }
    }
    if (sp == 0 || sp == std::string_view::npos) {
        // An ip with nothing after it: a frame perf could not name.
        if (text.empty() || !is_hex(text.front()))
            return false;
        frames_.push_back(profile_.intern_frame("[unknown]", "[unknown]"));
        offsets_.push_back(profile::no_offset);
        return true;
    }
    for (std::size_t i = 0; i < sp; ++i)
        if (!is_hex(text[i]))
            return false;
    std::string_view rest = trim_blanks(text.substr(sp + 1));
    std::string_view module = "[unknown]";
    split_module(rest, module);
    // "+0x<hex>" is the instruction (a caller's: the return address of its call): the
    // function is the frame, and the offset is kept for source and call-site lines.
    std::uint32_t offset = profile::no_offset;
    const auto plus = rest.rfind("+0x");
    if (plus != std::string_view::npos && plus + 3 < rest.size()) {
        bool hex = true;
        for (std::size_t i = plus + 3; i < rest.size(); ++i)
            hex = hex && is_hex(rest[i]);
        if (hex) {
            if (rest.size() - plus <= 11) { // 32 bits at most
                std::uint32_t value = 0;
                for (std::size_t i = plus + 3; i < rest.size(); ++i)
                    value = value * 16 + static_cast<std::uint32_t>(hex_value(rest[i]));
                offset = value == profile::no_offset ? profile::no_offset - 1 : value;
            }
            rest = rest.substr(0, plus);
        }
    }
    if (rest.empty())
        rest = "[unknown]";
    const bool kernel = module == "[kernel.kallsyms]";
    if (namer_ && !module.empty() && (module.front() == '/' || kernel) && sp <= 16 &&
        (rest == "[unknown]" || namer_->names_all(module))) {
        // A frame perf could not name, in a file (or any frame of a module named here): the
        // collector's symbols may.
        std::uint32_t named_offset = profile::no_offset;
        const auto frame = named_frame(module, hex_u64(text.substr(0, sp)), named_offset);
        if (frame != profile::no_frame) {
            frames_.push_back(frame);
            offsets_.push_back(named_offset);
            return true;
        }
    }
    if (kernel && rest == "[unknown]")
        ++stats_.unnamed_kernel;
    // A frame nobody could name, in a module perf could: perf prints the address in that
    // module, which stands in for the offset (the function table lists them per module, and
    // the collector's symbols can name it later).
    if (rest == "[unknown]") {
        const auto address = sp <= 16 ? hex_u64(text.substr(0, sp)) : profile::no_offset;
        offset = !module.empty() && module.front() != '[' && address < profile::no_offset - 1
                     ? static_cast<std::uint32_t>(address)
                     : profile::no_offset; // not "[unknown]", not the kernel's
    }
    auto frame = profile_.intern_frame(rest, module);
    const bool tell = namer_ && rest != "[unknown]" && offset != profile::no_offset &&
                      !module.empty() && module.front() == '/' && sp <= 16;
    // (Past the room, not the frame it would be later.)
    if (memo && profile_.symbol(frame) != profile::past_room_symbol) {
        memo->line.assign(text);
        memo->frame = frame;
        memo->offset = offset;
        memo->tell = tell;
        memo->unnamed_kernel = kernel && rest == "[unknown]";
        memo->module_at = static_cast<std::uint16_t>(tell ? module.data() - text.data() : 0);
        memo->module_size = static_cast<std::uint16_t>(tell ? module.size() : 0);
    }
    if (tell)
        frame = told_apart(frame, module, text.substr(0, sp), offset);
    frames_.push_back(frame);
    offsets_.push_back(offset);
    return true;
}

void script_parser::commit() {
    if (!pending_)
        return;
    pending_ = false;
    if (!unplaced_.empty())
        place_unplaced();
    if (frames_.empty()) { // a sample with no stack: one frame nobody named
        if (unknown_frame_ == profile::no_frame)
            unknown_frame_ = profile_.intern_frame("[unknown]", "[unknown]");
        frames_.push_back(unknown_frame_);
        offsets_.push_back(profile::no_offset);
    }
    // A wait's stack is topped by its kind, its leaf then a caller like any other (the
    // renaming's rules hold for it).
    if (switch_out_) {
        frames_.insert(frames_.begin(), profile_.intern_frame(wait_kind_, off_cpu_module));
        offsets_.insert(offsets_.begin(), profile::no_offset);
    }
    // The frames shared from the root with the thread's previous sample (same functions,
    // same offsets) keep their sites.
    const std::size_t n = frames_.size();
    auto& last = last_[(tid_ * 0x9E3779B1U) >> (32 - 6)];
    static_assert(std::tuple_size_v<decltype(last_)> == 64);
    if (last.tid != tid_) {
        last.tid = tid_;
        last.frames.clear();
        last.offsets.clear();
    }
    const std::size_t m = last.frames.size();
    std::size_t same = 0;
    while (same < n && same < m && frames_[n - 1 - same] == last.frames[m - 1 - same] &&
           offsets_[n - 1 - same] == last.offsets[m - 1 - same])
        ++same;
    // A leaf's site is no caller's, nor a caller's a leaf's (a leaf keeps its offset whatever
    // the rules below say): a frame that changed role is looked up again.
    if (same > 0 && (same == n) != (same == m))
        --same;
    // Callers' offsets name their call sites. Two rules keep the site trie about the size of
    // the stack trie: a caller already on the path closer to the root (recursion, direct or
    // through others) keeps no offset — its call lines are told apart at its outermost call
    // only, which holds all the rest — and past the profile's allowance of sites no caller
    // keeps one (its samples stay, their call lines are counted as lost). A frame nobody
    // named is exempt from the first, and has an allowance of its own: every such frame of a
    // module is one frame, and its offset is its address, which is all that names it later
    // (profile::rename); its sites stand for the nodes it becomes then. Only the frames not
    // shared are looked at: the shared ones' sites were made by the same rules.
    const std::size_t fresh = n - same;
    const bool full = fresh > 1 && profile_.caller_sites_full();
    const bool nameless_full = fresh > 1 && profile_.nameless_sites_full();
    bool dropped = false;
    // Whether frames_[i] recurs closer to the root: a scan for a few fresh frames, marks
    // for many.
    const bool marks = !full && fresh > 8 && fresh * n > 1024;
    auto marked = [this](std::uint32_t f) { // marks `f`; whether it was marked already
        if (f >= seen_.size())
            seen_.resize(std::max<std::size_t>(f + 1, seen_.size() * 2), 0);
        return std::exchange(seen_[f], generation_) == generation_;
    };
    if (marks) {
        if (++generation_ == 0) { // wrapped: forget every mark
            std::fill(seen_.begin(), seen_.end(), 0);
            generation_ = 1;
        }
        for (std::size_t i = fresh; i < n; ++i)
            marked(frames_[i]);
    }
    last.sites.resize(same);
    std::uint32_t site = same ? last.sites[same - 1] : 0;
    for (std::size_t i = fresh; i-- > 0;) {
        auto offset = offsets_[i];
        if (i > 0) {
            const auto above = frames_.begin() + static_cast<std::ptrdiff_t>(i) + 1;
            const bool recurs =
                marks ? marked(frames_[i])
                      : offset != profile::no_offset && !full &&
                            std::find(above, frames_.end(), frames_[i]) != frames_.end();
            const bool nameless = profile_.symbol(frames_[i]) == "[unknown]";
            if (offset != profile::no_offset && (nameless ? nameless_full : full || recurs)) {
                dropped = dropped || full || nameless;
                offset = profile::no_offset;
            }
        }
        site = profile_.child_site(site, frames_[i], offset);
        last.sites.push_back(site);
    }
    stats_.call_sites_dropped += dropped;
    last.frames.swap(frames_);
    last.offsets.swap(offsets_);
    frames_.clear();
    offsets_.clear();
    if (switch_out_) {
        // Not a sample of its own: the thread's wait begins here.
        if (waits_.size() >= max_waiting_threads && !waits_.count(tid_)) {
            ++stats_.waits_dropped;
            return;
        }
        auto& w = waits_[tid_];
        if (!w.unseen) // (one its switch record began keeps that time)
            w.since_ns = time_ns_;
        w.unseen = false;
        w.site = site;
        w.pid = pid_;
        w.comm = comm_;
        return;
    }
    profile_.add_sample_at(time_ns_, site, pid_, tid_, comm_, event_, period_);
    ++stats_.samples;
}

void script_parser::begin_unseen_wait(const header_fields& h) {
    // perf kept the switch record but not its sched:sched_switch sample (it drops some while
    // it is woken per sample): the wait counts, where it waited unknown.
    if (waits_.size() >= max_waiting_threads) {
        ++stats_.waits_dropped;
        return;
    }
    if (unknown_frame_ == profile::no_frame)
        unknown_frame_ = profile_.intern_frame("[unknown]", "[unknown]");
    const auto kind =
        profile_.intern_frame(h.preempted ? "[preempted]" : "[off-cpu]", off_cpu_module);
    auto& w = waits_[h.tid];
    w.since_ns = h.time_ns;
    w.unseen = true;
    w.site = profile_.child_site(profile_.child_site(0, unknown_frame_, profile::no_offset), kind,
                                 profile::no_offset);
    w.pid = h.pid;
    w.comm.assign(h.comm);
}

void script_parser::end_wait(std::uint32_t tid, std::uint64_t time_ns) {
    if (waits_.empty()) // (every sample asks: a profile without waits pays no lookup)
        return;
    const auto it = waits_.find(tid);
    if (it == waits_.end())
        return;
    const auto& w = it->second;
    if (time_ns < w.since_ns) { // out of order: no wait can be told
        ++stats_.waits_dropped;
    } else {
        if (!have_off_cpu_) {
            off_cpu_ = profile_.intern_event(off_cpu_event);
            have_off_cpu_ = true;
        }
        profile_.add_sample_at(w.since_ns, w.site, w.pid, tid, w.comm, off_cpu_,
                               time_ns - w.since_ns);
        profile_.extend_to(time_ns);
        ++stats_.waits;
    }
    waits_.erase(it);
}

} // namespace collector
