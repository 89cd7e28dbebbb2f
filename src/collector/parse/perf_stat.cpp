#include "collector/parse/perf_stat.hpp"

#include "collector/model/views.hpp"
#include "collector/parse/blanks.hpp"

#include <charconv>

namespace collector {
namespace {

std::string_view next_token(std::string_view& s) noexcept {
    s = trim_blanks(s);
    const auto sp = s.find_first_of(" \t");
    const auto t = s.substr(0, sp);
    s = sp == std::string_view::npos ? std::string_view() : s.substr(sp);
    return t;
}

// "1,234,567" or "3768.18" -> number; thousands separators dropped.
std::optional<double> to_number(std::string_view t) {
    std::string digits;
    digits.reserve(t.size());
    for (char c : t) {
        if (c == ',')
            continue;
        if (!((c >= '0' && c <= '9') || c == '.'))
            return std::nullopt;
        digits.push_back(c);
    }
    if (digits.empty())
        return std::nullopt;
    double v = 0;
    const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), v);
    if (ec != std::errc() || end != digits.data() + digits.size())
        return std::nullopt;
    return v;
}

std::optional<double> ratio(const stat_report& r, std::string_view num, std::string_view den,
                            double scale) {
    const auto* a = r.find(num);
    const auto* b = r.find(den);
    if (!a || !b || !a->value || !b->value || *b->value == 0)
        return std::nullopt;
    return *a->value / *b->value * scale;
}

} // namespace

const stat_counter* stat_report::find(std::string_view base_event) const noexcept {
    for (const auto& c : counters)
        if (c.event == base_event || event_base_name(c.event) == base_event)
            return &c;
    return nullptr;
}

bool stat_report::scaled() const noexcept {
    for (const auto& c : counters)
        if (c.running_pct && *c.running_pct < 100.0)
            return true;
    return false;
}

stat_report parse_perf_stat(std::string_view text) {
    stat_report r;
    while (!text.empty()) {
        const auto nl = text.find('\n');
        std::string_view line = trim_blanks(text.substr(0, nl));
        text.remove_prefix(nl == std::string_view::npos ? text.size() : nl + 1);
        if (line.empty() || line.starts_with("Performance counter stats"))
            continue;

        stat_counter c;
        // A trailing "(NN.NN%)" is the multiplexing share.
        if (line.back() == ')' && line.size() > 3 && line[line.size() - 2] == '%') {
            const auto open = line.rfind('(');
            if (open != std::string_view::npos) {
                c.running_pct = to_number(line.substr(open + 1, line.size() - open - 3));
                line = trim_blanks(line.substr(0, open));
            }
        }
        if (const auto hash = line.find('#'); hash != std::string_view::npos) {
            c.note = std::string(trim_blanks(line.substr(hash + 1)));
            line = trim_blanks(line.substr(0, hash));
        }
        std::string_view rest = line;
        if (line.starts_with("<not supported>") || line.starts_with("<not counted>")) {
            c.supported = line.starts_with("<not counted>");
            c.counted = false;
            rest = line.substr(line.find('>') + 1);
        } else {
            c.value = to_number(next_token(rest));
            if (!c.value)
                continue; // not a counter line
        }
        auto event = next_token(rest);
        if (event == "msec") {
            c.unit = "msec";
            event = next_token(rest);
        }
        if (event == "seconds") {
            // "1.98 seconds time elapsed" / "... seconds user" / "... seconds sys"
            if (trim_blanks(rest) == "time elapsed")
                r.elapsed_seconds = c.value;
            continue;
        }
        if (event.empty())
            continue;
        c.event = std::string(event);
        r.counters.push_back(std::move(c));
    }
    r.ipc = ratio(r, "instructions", "cycles", 1.0);
    r.cache_miss_pct = ratio(r, "cache-misses", "cache-references", 100.0);
    r.branch_miss_pct = ratio(r, "branch-misses", "branch-instructions", 100.0);
    if (!r.branch_miss_pct)
        r.branch_miss_pct = ratio(r, "branch-misses", "branches", 100.0);
    return r;
}

} // namespace collector
