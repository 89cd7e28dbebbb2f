#include "agent/wait_folder.hpp"

#include "protocol/off_cpu.hpp"

#include <algorithm>
#include <tuple>
#include <vector>

namespace agent {
namespace {

// The frame line of a wait whose stack perf did not keep (as the collector names it).
constexpr std::string_view unknown_frame = "\t0 [unknown] ([unknown])\n";

bool is_digit(char c) {
    return c >= '0' && c <= '9';
}

// 1 to `most` digits at `at`, not followed by another; `at` moved past them.
bool digits(std::string_view l, std::size_t& at, std::uint64_t& value, std::size_t most) {
    const auto from = at;
    value = 0;
    while (at < l.size() && is_digit(l[at]) && at - from < most)
        value = value * 10 + static_cast<std::uint64_t>(l[at++] - '0');
    return at > from && (at == l.size() || !is_digit(l[at]));
}

// One blank or more at `at`; `at` moved past them.
bool blanks(std::string_view l, std::size_t& at) {
    const auto from = at;
    while (at < l.size() && l[at] == ' ')
        ++at;
    return at > from;
}

std::string_view trim_blanks(std::string_view s) {
    while (!s.empty() && s.front() == ' ')
        s.remove_prefix(1);
    while (!s.empty() && s.back() == ' ')
        s.remove_suffix(1);
    return s;
}

struct head {
    enum class what { sample, switch_sample, switch_in, switch_out, record } is = what::sample;
    std::string_view comm;
    std::uint32_t pid = 0, tid = 0;
    std::uint64_t time_ns = 0;
    std::string_view args;  // a switch sample's arguments
    bool preempted = false; // a switch out's
};

// "PID[/TID] +[[CPU] +]SEC.FRAC:" at `p` (10, 10, 10 and 12 digits at most); `at` past it.
bool thread_and_time(std::string_view l, std::size_t p, std::size_t& at, std::uint64_t& pid,
                     std::uint64_t& tid, std::uint64_t& sec, std::uint64_t& frac,
                     std::size_t& frac_digits) {
    at = p;
    if (!digits(l, at, pid, 10))
        return false;
    tid = pid;
    if (at < l.size() && l[at] == '/' && !digits(l, ++at, tid, 10))
        return false;
    if (!blanks(l, at))
        return false;
    if (at < l.size() && l[at] == '[') { // a CPU
        std::uint64_t cpu = 0;
        if (!digits(l, ++at, cpu, 19) || at >= l.size() || l[at] != ']' || !blanks(l, ++at))
            return false;
    }
    if (!digits(l, at, sec, 10) || at >= l.size() || l[at] != '.')
        return false;
    const auto from = ++at;
    if (!digits(l, at, frac, 12) || at >= l.size() || l[at] != ':')
        return false;
    frac_digits = at - from;
    return true;
}

// "comm pid/tid time: …", in the fields the agent asks perf script for (the collector's parser
// reads every shape; this one, the agent's own), read alike by the Python agent's HEAD_RE. The
// thread is the last "pid/tid time:" that starts the line or follows a blank within its first
// 66 bytes (a comm is at most 15, perf pads it): a thread's name that looks like one comes
// before its own. Out of range (a pid past 32 bits): no header.
bool read_head(std::string_view l, head& h) {
    if (l.empty())
        return false;
    std::size_t at = 0, frac_digits = 0;
    std::uint64_t pid = 0, tid = 0, sec = 0, frac = 0;
    for (std::size_t p = std::min<std::size_t>(l.size() - 1, 65);; --p) {
        if ((p == 0 || l[p - 1] == ' ') &&
            thread_and_time(l, p, at, pid, tid, sec, frac, frac_digits)) {
            h.comm = trim_blanks(l.substr(0, p));
            break;
        }
        if (p == 0)
            return false;
    }
    if (pid > 0xffffffffULL || tid > 0xffffffffULL)
        return false;
    for (auto n = frac_digits; n < 9; ++n)
        frac *= 10;
    for (auto n = frac_digits; n > 9; --n)
        frac /= 10;
    h.pid = static_cast<std::uint32_t>(pid);
    h.tid = static_cast<std::uint32_t>(tid);
    h.time_ns = sec * 1'000'000'000ULL + frac;
    ++at;
    blanks(l, at);
    const auto rest = l.substr(at);
    if (rest.starts_with("PERF_RECORD_SWITCH")) {
        // "PERF_RECORD_SWITCH[_CPU_WIDE] IN|OUT [preempt] …": the word after the first blank.
        const auto way = rest.find(' ');
        auto dir = way == std::string_view::npos ? std::string_view{} : rest.substr(way + 1);
        dir = dir.substr(0, dir.find(' '));
        h.is = dir == "IN"    ? head::what::switch_in
               : dir == "OUT" ? head::what::switch_out
                              : head::what::record;
        h.preempted =
            h.is == head::what::switch_out && rest.find(" preempt") != std::string_view::npos;
        return true;
    }
    if (rest.starts_with("PERF_RECORD_")) {
        h.is = head::what::record;
        return true;
    }
    // [period +]event: args
    std::size_t e = 0;
    while (e < rest.size() && is_digit(rest[e]))
        ++e;
    if (e > 0 && !blanks(rest, e))
        return true;
    constexpr std::string_view switch_event = "sched:sched_switch:";
    if (rest.substr(e).starts_with(switch_event)) {
        h.is = head::what::switch_sample;
        h.args = rest.substr(e + switch_event.size());
    }
    return true;
}

} // namespace

wait_folder::wait_folder(options o)
    : options_(o) {
    if (options_.window_ns == 0)
        options_.window_ns = 1;
}

void wait_folder::fold(std::string_view complete, std::string& out) {
    // A line cut between two pieces (the chunker's overlong tail) is read whole.
    while (!complete.empty()) {
        const auto nl = complete.find('\n');
        if (nl == std::string_view::npos) {
            carry_.append(complete);
            if (carry_.size() > max_line) {
                line(carry_, out);
                carry_.clear();
            }
            return;
        }
        if (carry_.empty()) {
            line(complete.substr(0, nl), out);
        } else {
            carry_.append(complete.substr(0, nl));
            line(carry_, out);
            carry_.clear();
        }
        complete.remove_prefix(nl + 1);
    }
}

void wait_folder::line(std::string_view l, std::string& out) {
    if (l.empty()) { // the blank line that ends a sample with a call chain (a switch's taken)
        if (block_ != block::switch_sample && block_ != block::skipped)
            out += '\n';
        block_ = block::none;
        return;
    }
    if (l.front() == '\t') {
        if (block_ == block::switch_sample) {
            auto& w = open_.at(block_tid_);
            if (w.stack.size() + l.size() + 1 <= max_stack_bytes && w.lines < max_stack_lines) {
                w.stack.append(l);
                w.stack += '\n';
                ++w.lines;
            }
        } else if (block_ != block::skipped) {
            out.append(l);
            out += '\n';
        }
        return;
    }
    header(l, out);
}

void wait_folder::header(std::string_view l, std::string& out) {
    head h;
    if (!read_head(l, h)) {
        block_ = block::passed;
        out.append(l);
        out += '\n';
        return;
    }
    block_ = block::none;
    last_ns_ = std::max(last_ns_, h.time_ns);
    switch (h.is) {
    case head::what::switch_in:
        close(h.tid, h.time_ns, out);
        return;
    case head::what::switch_out:
        // Its sample usually came first and opened the wait; else the wait begins here, where
        // unknown until its sample follows (perf may have dropped it).
        if (!open_.count(h.tid)) {
            if (open_.size() >= max_open) {
                ++counts_.dropped;
                return;
            }
            open_.emplace(h.tid, open_wait{h.time_ns, h.pid, std::string(h.comm),
                                           h.preempted ? "[preempted]" : protocol::wait_kind({}),
                                           std::string(unknown_frame), 1, true});
        }
        return;
    case head::what::switch_sample: {
        const auto kind = protocol::wait_kind(protocol::switch_prev_state(h.args));
        if (const auto it = open_.find(h.tid); it != open_.end() && it->second.unseen) {
            it->second.unseen = false; // the wait its OUT record began
            it->second.kind = kind;
            it->second.stack.clear();
            it->second.lines = 0;
        } else {
            close(h.tid, h.time_ns, out);
            if (open_.size() >= max_open) {
                ++counts_.dropped;
                block_ = block::skipped; // its frame lines go with it
                return;
            }
            open_.emplace(h.tid,
                          open_wait{h.time_ns, h.pid, std::string(h.comm), kind, {}, 0, false});
        }
        block_ = block::switch_sample;
        block_tid_ = h.tid;
        return;
    }
    case head::what::sample:
        close(h.tid, h.time_ns, out); // it runs: back from any wait
        [[fallthrough]];
    case head::what::record:
        block_ = block::passed;
        out.append(l);
        out += '\n';
        return;
    }
}

void wait_folder::close(std::uint32_t tid, std::uint64_t time_ns, std::string& out) {
    const auto it = open_.find(tid);
    if (it == open_.end())
        return;
    auto w = std::move(it->second);
    open_.erase(it);
    if (time_ns < w.since_ns) {
        ++counts_.dropped;
        return;
    }
    const auto ns = time_ns - w.since_ns;
    if (ns < options_.min_ns) {
        ++counts_.short_waits;
        counts_.short_ns += ns;
        return;
    }
    ++counts_.waits;
    const auto window = w.since_ns / options_.window_ns;
    if (ns >= options_.window_ns) {
        write({window, w.since_ns, ns, w.pid, tid, std::move(w.comm), w.kind, std::move(w.stack)},
              out);
        return;
    }
    key_.assign(reinterpret_cast<const char*>(&tid), sizeof tid);
    key_.append(w.kind);
    key_ += '\n';
    key_.append(w.stack);
    if (const auto s = sums_.find(key_); s != sums_.end()) {
        if (s->second.window == window) {
            s->second.total_ns += ns;
            return;
        }
        write(s->second, out); // its window is over
        s->second = {window, w.since_ns, ns, w.pid, tid, std::move(w.comm), w.kind, {}};
        s->second.stack = std::move(w.stack);
        return;
    }
    if (sums_.size() >= max_sums)
        flush(out);
    sums_.emplace(key_, sum{window, w.since_ns, ns, w.pid, tid, std::move(w.comm), w.kind,
                            std::move(w.stack)});
}

void wait_folder::flush(std::string& out, bool ended) {
    if (ended) {
        if (!carry_.empty()) { // its last line, if perf ended it without a newline
            line(carry_, out);
            carry_.clear();
        }
        // A thread still waiting when the recording ended waited until then at least.
        // (One that began at the last time read is no wait.)
        std::vector<std::uint32_t> tids;
        for (const auto& [tid, w] : open_)
            if (w.since_ns < last_ns_)
                tids.push_back(tid);
        std::sort(tids.begin(), tids.end());
        for (const auto tid : tids)
            close(tid, last_ns_, out);
        open_.clear();
        block_ = block::none;
    }
    std::vector<const sum*> order;
    order.reserve(sums_.size());
    for (const auto& [key, s] : sums_)
        order.push_back(&s);
    std::sort(order.begin(), order.end(), [](const sum* a, const sum* b) {
        return std::tie(a->first_ns, a->tid, a->kind, a->stack) <
               std::tie(b->first_ns, b->tid, b->kind, b->stack);
    });
    for (const auto* s : order)
        write(*s, out);
    sums_.clear();
}

void wait_folder::write(const sum& s, std::string& out) {
    ++counts_.samples;
    const auto ns = std::to_string(s.first_ns % 1'000'000'000ULL);
    out.append(s.comm);
    out += ' ';
    out += std::to_string(s.pid);
    out += '/';
    out += std::to_string(s.tid);
    out += ' ';
    out += std::to_string(s.first_ns / 1'000'000'000ULL);
    out += '.';
    out.append(9 - ns.size(), '0');
    out += ns;
    out += ": ";
    out += std::to_string(s.total_ns);
    out += ' ';
    out.append(protocol::off_cpu_event_name);
    out += ":\n\t0 ";
    out.append(s.kind);
    out += " (";
    out.append(protocol::off_cpu_module);
    out += ")\n";
    out.append(s.stack.empty() ? unknown_frame : std::string_view(s.stack)); // (no call graph)
    out += '\n';
}

std::string wait_folder::summary() const {
    const auto& c = counts_;
    std::string s = "off-CPU: " + std::to_string(c.waits) + " waits sent in " +
                    std::to_string(c.samples) + " samples";
    if (options_.min_ns)
        s += "; " + std::to_string(c.short_waits) + " shorter than " +
             std::to_string(options_.min_ns / 1000) + " us left out (" +
             std::to_string(c.short_ns / 1000000) + " ms in all)";
    if (c.dropped)
        s += "; " + std::to_string(c.dropped) +
             " dropped (more threads waiting at once than the agent follows, or out of order)";
    return s;
}

} // namespace agent
