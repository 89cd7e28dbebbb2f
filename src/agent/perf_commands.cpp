#include "agent/perf_commands.hpp"

#include <algorithm>
#include <cstdio>

namespace agent {
namespace {

std::string join(const std::vector<std::string>& items, char sep) {
    std::string out;
    for (const auto& s : items) {
        if (!out.empty())
            out += sep;
        out += s;
    }
    return out;
}

void add_target(std::vector<std::string>& args, std::optional<int> pid) {
    if (pid) {
        args.insert(args.end(), {"-p", std::to_string(*pid)});
    } else {
        args.push_back("-a");
    }
}

std::string_view trim(std::string_view s) {
    const auto b = s.find_first_not_of(" \t\r");
    if (b == std::string_view::npos)
        return {};
    const auto e = s.find_last_not_of(" \t\r");
    return s.substr(b, e - b + 1);
}

} // namespace

int mmap_pages_for(int frequency, bool dwarf) {
    // About a quarter of a second of samples (~256 B with frame-pointer stacks, ~8.5 KiB with
    // dwarf stack copies), at least 8 pages, a power of two as perf requires: the default
    // 516 KiB per CPU would hold seconds of samples back even where perf wakes at half full.
    const long bytes_per_sample = dwarf ? 8704 : 256;
    const long half_buffer = static_cast<long>(frequency) * bytes_per_sample / 4;
    int pages = 8;
    while (pages < 1024 && pages * 4096L / 2 < half_buffer)
        pages *= 2;
    return pages;
}

std::optional<std::string> at_own_rate(std::string_view event, int frequency,
                                       std::string_view name_suffix) {
    const auto colon = event.find(':');
    const auto name = event.substr(0, colon);
    const auto modifiers =
        colon == std::string_view::npos ? std::string_view{} : event.substr(colon + 1);
    const auto is_name_char = [](char c) {
        return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
               c == '-' || c == '_' || c == '.';
    };
    if (name.empty() || !std::all_of(name.begin(), name.end(), is_name_char) ||
        modifiers.find_first_not_of("ukhGHpPSDIWeb") != std::string_view::npos ||
        (colon != std::string_view::npos && modifiers.empty()))
        return std::nullopt;
    return std::string(name) + "/freq=" + std::to_string(frequency) +
           ",name=" + std::string(event) + std::string(name_suffix) + "/" + std::string(modifiers);
}

std::string rung_name(std::string_view event, int hz) {
    return std::string(event) + "." + std::to_string(hz) + "hz";
}

bool ladder_possible(const record_settings& s) {
    // perf reads a control command of at most 63 bytes ("disable NAME"): longer names would be
    // cut and not found; and a change's lines go in one write under PIPE_BUF.
    if (s.off_cpu || s.events.empty() || s.events.size() > 16)
        return false;
    return std::all_of(s.events.begin(), s.events.end(), [](const std::string& e) {
        return at_own_rate(e, 99).has_value() && ("disable " + rung_name(e, 999999)).size() <= 62;
    });
}

std::string rung_commands(const record_settings& s, int from, int to) {
    std::string out;
    for (const auto& e : s.events) {
        if (from > 0)
            out += "disable " + rung_name(e, from) + "\n";
        out += "enable " + rung_name(e, to) + "\n";
    }
    return out;
}

bool perf_enables_by_name(std::string_view version) {
    int major = 0, minor = 0; // ("perf version 6.1.187", or the number alone)
    const auto digit = version.find_first_of("0123456789");
    if (digit == std::string_view::npos ||
        std::sscanf(std::string(version.substr(digit)).c_str(), "%d.%d", &major, &minor) != 2)
        return false;
    return major > 5 || (major == 5 && minor >= 13);
}

std::string off_cpu_events_problem(const std::vector<std::string>& events) {
    for (const auto& e : events)
        if (!at_own_rate(e, 99))
            return "off-CPU records every switch beside the sampled events, each at a rate of "
                   "its own: '" +
                   e + "' cannot take one (give a named event such as cpu-clock)";
    return {};
}

std::vector<std::string> record_args(const record_settings& s, std::string_view output,
                                     const std::vector<std::string>& command) {
    // Off-CPU: each event at its rate, every switch kept (-c 1 holds for the tracepoint alone).
    std::vector<std::string> events;
    if (s.off_cpu && off_cpu_events_problem(s.events).empty())
        for (const auto& e : s.events)
            events.push_back(*at_own_rate(e, s.frequency));
    // A ladder: each event at every rate, by names of their own, none sampling until told.
    const bool ladder = !s.ladder.empty() && ladder_possible(s);
    if (ladder)
        for (const int hz : s.ladder)
            for (const auto& e : s.events)
                events.push_back(*at_own_rate(e, hz, rung_name("", hz)));
    std::vector<std::string> args = {"record", "-e", join(events.empty() ? s.events : events, ',')};
    if (events.empty())
        args.insert(args.end(), {"-F", std::to_string(s.frequency)});
    else if (!ladder)
        args.insert(args.end(), {"-c", "1"});
    else
        args.insert(args.end(), {"-D", "-1", "--control", "fd:3"});
    if (!s.callgraph.empty())
        args.push_back("--call-graph=" + s.callgraph);
    // (Switches come at any rate: with them, at least perf's default of 128 pages.)
    const int pages =
        mmap_pages_for(ladder ? *std::max_element(s.ladder.begin(), s.ladder.end()) : s.frequency,
                       s.callgraph == "dwarf");
    args.insert(args.end(), {"-m", std::to_string(s.off_cpu ? std::max(pages, 128) : pages)});
    // (Not with the switches: woken per sample, perf drops about half of them.)
    if (s.prompt && !s.off_cpu)
        args.push_back("--no-buffering");
    if (s.off_cpu)
        args.insert(args.end(), {"-e", "sched:sched_switch", "--switch-events"});
    add_target(args, s.pid);
    args.insert(args.end(), {"-o", std::string(output)});
    if (!command.empty()) {
        args.push_back("--");
        args.insert(args.end(), command.begin(), command.end());
    }
    return args;
}

std::vector<std::string> script_args(std::string_view input, bool with_fields, bool with_cpu,
                                     bool off_cpu) {
    std::vector<std::string> args = {"script", "-i", std::string(input), "--show-lost-events"};
    if (off_cpu)
        args.push_back("--show-switch-events");
    if (with_fields) {
        std::string fields(script_fields);
        if (with_cpu)
            fields = "comm,tid,pid,cpu," + fields.substr(std::string_view("comm,tid,pid,").size());
        if (off_cpu) // (perf says 'trace' does not apply to the sampling event, and goes on)
            fields.replace(fields.find(",event,"), 7, ",event,trace,");
        args.insert(args.end(), {"-F", fields});
    }
    return args;
}

std::vector<std::string> stat_args(const std::vector<std::string>& events, std::optional<int> pid,
                                   const std::vector<std::string>& command) {
    std::vector<std::string> args = {"stat", "-e", join(events, ',')};
    add_target(args, pid);
    if (!command.empty()) {
        args.push_back("--");
        args.insert(args.end(), command.begin(), command.end());
    }
    return args;
}

std::vector<std::string> counted_events(std::string_view text,
                                        const std::vector<std::string>& asked) {
    std::vector<std::string> out;
    while (!text.empty()) {
        const auto nl = text.find('\n');
        const auto line = trim(text.substr(0, nl));
        text.remove_prefix(nl == std::string_view::npos ? text.size() : nl + 1);
        if (line.empty() || line.starts_with("<not"))
            continue;
        // "<count> [msec] <event> [# ...]"
        const auto comment = line.find('#');
        const auto body = trim(line.substr(0, comment));
        const auto last_space = body.find_last_of(" \t");
        if (last_space == std::string_view::npos)
            continue;
        const auto event = body.substr(last_space + 1);
        const auto first = body.front();
        if (!(first >= '0' && first <= '9'))
            continue;
        for (const auto& a : asked)
            if (event == a && std::find(out.begin(), out.end(), a) == out.end())
                out.push_back(a);
    }
    return out;
}

std::vector<std::string> evlist_events(std::string_view text) {
    std::vector<std::string> out;
    while (!text.empty()) {
        const auto nl = text.find('\n');
        auto line = trim(text.substr(0, nl));
        text.remove_prefix(nl == std::string_view::npos ? text.size() : nl + 1);
        if (line.empty() || line.starts_with("#"))
            continue;
        // "cpu-clock" or, with -v, "cpu-clock: type: 1, ..."
        const auto colon = line.find(": ");
        out.emplace_back(line.substr(0, colon));
    }
    return out;
}

bool has_call_chains(std::string_view text) {
    int frames = 0;
    while (!text.empty()) {
        const auto nl = text.find('\n');
        const auto line = text.substr(0, nl);
        text.remove_prefix(nl == std::string_view::npos ? text.size() : nl + 1);
        if (!line.empty() && line.front() == '\t') {
            if (++frames >= 2)
                return true;
        } else {
            frames = 0;
        }
    }
    return false;
}

int sample_count(std::string_view text) {
    int samples = 0;
    while (!text.empty()) {
        const auto nl = text.find('\n');
        const auto line = text.substr(0, nl);
        text.remove_prefix(nl == std::string_view::npos ? text.size() : nl + 1);
        if (!trim(line).empty() && line.front() != '\t')
            ++samples;
    }
    return samples;
}

std::string perf_complaint(std::string_view text) {
    std::string said;
    while (!text.empty()) {
        const auto nl = text.find('\n');
        const auto line = trim(text.substr(0, nl));
        text.remove_prefix(nl == std::string_view::npos ? text.size() : nl + 1);
        // (What perf says of its control commands is not a complaint: "Events disabled",
        // "Event cpu-clock.511hz enabled".)
        if (line.empty() || line.starts_with("[ perf record:") || line == "Events disabled" ||
            line == "Events enabled" ||
            (line.starts_with("Event ") &&
             (line.ends_with(" enabled") || line.ends_with(" disabled"))))
            continue;
        said += said.empty() ? std::string(line) : " " + std::string(line);
        // perf often says "Error:" alone on a line, and why on the next.
        if (said != "Error:")
            break;
    }
    return said.substr(0, 200);
}

std::string perf_version_line(std::string_view text) {
    const auto line = trim(text.substr(0, text.find('\n')));
    // A hello's strings are bounded (protocol::max_hello_field): a vendor's long one is cut.
    return line.starts_with("perf version") ? std::string(line.substr(0, 200)) : std::string();
}

} // namespace agent
