// Fuzzes the perf script parser, the collector's reader of everything an agent or an import
// sends. Three parts, chosen by the first byte:
//  - raw text: never a crash, and feeding in pieces equals feeding whole, frame lines
//    memoized or not (script_parser::memoize_frames);
//  - raw text parsed while nothing names its nameless frames, then named in place once the
//    namer knows them (script_parser::name_again): every sample's stack, frame by frame with
//    its offset, is what a parse with the namer knowing them from the start makes;
//  - a header built from fuzzed fields in every shape perf prints (comm of any characters a
//    thread name may hold, pid or pid/tid, [cpu], misc, irq flags before or after the time,
//    period or none, events with modifiers, PMUs and tracepoints, a flat frame): it must give
//    exactly one sample, with the pid, tid and event that were written, never another.
#include "collector/parse/perf_script.hpp"

#include <array>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>

using namespace collector;

namespace {

void check(bool ok) {
    if (!ok)
        std::abort();
}

// Reads fuzzed choices off the input; zeros once it runs out.
struct source {
    std::string_view bytes;
    std::uint8_t byte() {
        if (bytes.empty())
            return 0;
        const auto b = static_cast<std::uint8_t>(bytes.front());
        bytes.remove_prefix(1);
        return b;
    }
    std::uint32_t number(int digits_max) {
        std::uint32_t v = 0;
        const int digits = 1 + byte() % digits_max;
        for (int i = 0; i < digits; ++i)
            v = v * 10 + byte() % 10;
        return v;
    }
    bool coin() { return byte() & 1; }
};

script_stats parse(std::string_view text, std::size_t piece, profile& p, bool memo = false) {
    script_parser parser(p);
    parser.memoize_frames(memo);
    for (std::size_t pos = 0; pos < text.size(); pos += piece)
        parser.feed(text.substr(pos, piece));
    parser.finish();
    parser.end_waits(); // (a thread still waiting counts to the last time)
    return parser.stats();
}

// A sample's stack, root first: each frame's symbol, module and offset.
std::string stack_of(const profile& p, std::uint32_t site) {
    std::string out;
    for (auto s = site; s != 0; s = p.site_parent(s)) {
        const auto f = p.site_frame(s);
        out = std::string(p.symbol(f)) + " (" + std::string(p.module(f)) + ")+" +
              std::to_string(p.site_offset(s)) + ";" + out;
    }
    return out;
}

void raw(std::string_view text, std::size_t piece) {
    profile whole, split;
    const auto a = parse(text, text.size() + 1, whole);
    const auto b = parse(text, piece, split, true);
    check(a.samples == b.samples && a.skipped_lines == b.skipped_lines &&
          a.lost_events == b.lost_events && a.records == b.records &&
          a.unnamed_kernel == b.unnamed_kernel);
    check(whole.sample_count() == split.sample_count() && whole.node_count() == split.node_count());
    for (std::size_t i = 0; i < whole.sample_count(); ++i)
        check(whole.sample_tid(i) == split.sample_tid(i) &&
              whole.sample_node(i) == split.sample_node(i) &&
              stack_of(whole, whole.sample_site(i)) == stack_of(split, split.sample_site(i)));
}

// Names a module's addresses as functions of 64 bytes (every fifth one a gap nothing names),
// once it knows them.
class learning_namer final : public frame_namer {
public:
    bool knows = false;
    std::optional<name> name_frame(std::string_view module, std::uint64_t address) override {
        if (!knows || module.empty() || module.front() != '/' || (address >> 6) % 5 == 4)
            return std::nullopt;
        return name{"f" + std::to_string(address >> 6), static_cast<std::uint32_t>(address & 63)};
    }
    bool names_all(std::string_view) const override { return false; }
};

void renamed(std::string_view text) {
    learning_namer late, knowing;
    knowing.knows = true;
    profile a, b;
    script_parser in_place(a), fresh(b);
    in_place.name_frames_with(&late);
    fresh.name_frames_with(&knowing);
    // Named again between two texts (as a live session's chunks): what is held across it (a
    // wait not yet ended) is named as a fresh parse names it.
    // (Chunks end where a sample does.)
    auto cut = text.find("\n\n", text.size() / 2);
    cut = cut == std::string_view::npos ? text.size() : cut + 2;
    in_place.feed(text.substr(0, cut));
    in_place.finish();
    fresh.feed(text);
    fresh.finish();
    late.knows = true;
    if (in_place.name_again() == script_parser::renaming::reparse)
        return; // a caller kept no address: only a new parse names it
    in_place.feed(text.substr(cut));
    in_place.finish();
    check(a.sample_count() == b.sample_count());
    // (Waits leave call paths no sample has — one that could not be told, a switch record's
    // stand-in its sample took over — and a renaming lets them go.)
    const bool orphans = in_place.stats().waits_dropped > 0 || in_place.stats().waits > 0 ||
                         in_place.waiting() > 0 || fresh.waiting() > 0;
    check(orphans || a.node_count() == b.node_count());
    // (Past the allowance of call sites the two may keep different ones.)
    if (a.caller_sites_full() || b.caller_sites_full())
        return;
    check(orphans || a.site_count() == b.site_count());
    for (std::size_t i = 0; i < a.sample_count(); ++i)
        check(stack_of(a, a.sample_site(i)) == stack_of(b, b.sample_site(i)) &&
              a.sample_period(i) == b.sample_period(i));
}

void structured(source in) {
    // A thread name: up to 15 bytes of anything but a line break or a TAB, taken from an
    // alphabet heavy in what could pass for other fields.
    static constexpr std::string_view alphabet = " .:/[]-_#0123456789abcdefUKdhs(){}+=\x7f\xc3\xa9";
    std::string comm;
    for (int n = in.byte() % 16; n > 0; --n)
        comm.push_back(alphabet[in.byte() % alphabet.size()]);
    const std::uint32_t pid = in.number(7), tid = in.coin() ? pid : in.number(7);
    static constexpr std::string_view flag_chars = ".dDhHsSbBnNpPzZ";
    auto flags = [&] {
        std::string f;
        for (int i = 0; i < 4; ++i)
            f.push_back(flag_chars[in.byte() % flag_chars.size()]);
        return f;
    };
    static constexpr std::array<std::string_view, 9> events = {"cycles",
                                                               "cpu-clock",
                                                               "instructions",
                                                               "cpu_core/cycles/",
                                                               "armv8_pmuv3_0/cpu_cycles/",
                                                               "cpu/event=0x3c,umask=0x0/",
                                                               "r003c",
                                                               "sched:sched_switch",
                                                               "probe_app:main"};
    static constexpr std::array<std::string_view, 7> modifiers = {"",   ":u",  ":k",   ":ppp",
                                                                  ":P", ":uk", ":pppH"};
    const std::string_view base = events[in.byte() % events.size()];
    const bool tracepoint = base.find(':') != std::string_view::npos;
    const std::string event =
        std::string(base) + std::string(tracepoint ? "" : modifiers[in.byte() % modifiers.size()]);

    std::string line;
    const int pad = in.byte() % 17;
    line.append(static_cast<std::size_t>(pad), ' ');
    line += comm + ' ';
    line += tid == pid && in.coin() ? std::to_string(pid)
                                    : std::to_string(pid) + '/' + std::to_string(tid);
    line.append(static_cast<std::size_t>(in.byte() % 4), ' ');
    if (in.coin())
        line += " [" + std::to_string(100 + in.byte() % 100).substr(1) + "]";
    if (in.coin())
        line += in.coin() ? " K" : " U ";
    if (in.coin())
        line += ' ' + flags();
    line += ' ' + std::to_string(in.number(7)) + '.' +
            std::to_string(100000 + in.number(5)).substr(1) + ":";
    if (in.coin())
        line += ' ' + flags();
    if (in.coin())
        line += ' ' + std::to_string(in.number(9));
    if (in.coin())
        line += ' ' + flags();
    line += ' ' + event + ':';
    if (tracepoint) {
        // Arguments after a key, as perf prints them; the value may be another thread's name.
        line += " prev_comm=" + comm + " prev_pid=" + std::to_string(in.number(5));
    } else if (in.coin()) {
        line += "   55d0c0ffee flat_leaf+0x1 (/bin/app)";
    }
    line += "\n\t 4005d6 table_leaf+0x4 (/bin/app)\n\n";

    profile p;
    const auto stats = parse(line, line.size() + 1, p);
    if (base == "sched:sched_switch") { // a wait begins, and nothing ends it: no sample
        check(stats.samples == 0 && p.sample_count() == 0 && stats.waits == 0);
        return;
    }
    check(stats.samples == 1 && p.sample_count() == 1);
    check(p.sample_tid(0) == tid);
    check(p.threads().at(tid).pid == pid);
    check(p.event_name(p.sample_event(0)) == event);
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    if (size == 0)
        return 0;
    const std::string_view bytes(reinterpret_cast<const char*>(data) + 1, size - 1);
    if (data[0] & 1)
        structured(source{bytes});
    else if (data[0] & 2)
        renamed(bytes);
    else
        raw(bytes, 1 + data[0] / 4 % 61);
    return 0;
}
