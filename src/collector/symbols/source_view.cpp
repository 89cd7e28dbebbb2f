#include "collector/symbols/source_view.hpp"

#include "collector/model/view_json.hpp"

#include <boost/json/array.hpp>
#include <boost/json/object.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <unordered_map>

namespace collector {
namespace json = boost::json;
namespace {

constexpr std::size_t whole_file_lines = 2000;
constexpr std::size_t context_lines = 100;
constexpr std::uintmax_t max_source_bytes = 16 << 20;

struct line_weight {
    std::uint64_t samples = 0, value = 0, self_value = 0;
};

struct file_weight {
    line_weight total, self;
    std::map<std::uint32_t, line_weight> lines;
    // perf's function name -> its weight here, its calls' included
    std::map<std::string, std::uint64_t> functions;
};

// The heaviest `n` of a callee -> weight map, heaviest first.
std::vector<std::pair<std::uint64_t, std::string>>
heaviest(const std::map<std::string, std::uint64_t>& m, std::size_t n) {
    std::vector<std::pair<std::uint64_t, std::string>> v;
    for (const auto& [name, w] : m)
        v.emplace_back(w, name);
    std::sort(v.begin(), v.end(), [](const auto& a, const auto& b) {
        return a.first != b.first ? a.first > b.first : a.second < b.second;
    });
    if (v.size() > n)
        v.resize(n);
    return v;
}

// Where a function was called from, heaviest first (ten at most): each call instruction that
// led to it (sites[i] -> the weight of the stacks through that call, once per stack), its
// caller and line (none when the caller has no line information).
json::array called_from(const std::map<std::size_t, std::uint64_t>& calls,
                        const std::vector<symbolizer::site>& sites,
                        const std::vector<symbolizer::placement>& where, std::uint64_t total) {
    std::vector<std::pair<std::uint64_t, std::size_t>> found; // weight, sites[i]
    for (const auto& [i, w] : calls)
        found.emplace_back(w, i);
    std::sort(found.begin(), found.end(), [&](const auto& a, const auto& b) {
        return a.first != b.first ? a.first > b.first : a.second < b.second;
    });
    json::array out;
    for (std::size_t k = 0; k < found.size() && k < 10; ++k) {
        const auto [value, i] = found[k];
        json::object o{{"function", sites[i].symbol},
                       {"module", sites[i].module},
                       {"offset", sites[i].offset},
                       {"value", value},
                       {"pct", pct(value, total)}};
        if (!where[i].chain.empty()) {
            o["file"] = where[i].chain.front().file;
            o["line"] = where[i].chain.front().line;
        }
        out.push_back(std::move(o));
    }
    return out;
}

source_answer not_found(std::string message) {
    return {404, json::object{{"error", {{"code", "no_source"}, {"message", std::move(message)}}}}};
}

std::vector<std::string> read_lines(const std::string& path) {
    std::vector<std::string> out;
    std::error_code ec;
    if (std::filesystem::file_size(path, ec) > max_source_bytes || ec)
        return out;
    std::ifstream in(path);
    for (std::string l; std::getline(in, l);)
        out.push_back(std::move(l));
    return out;
}

} // namespace

json::array binaries_json(const profile& p, const symbolizer& symbols,
                          const std::map<std::string, std::string>& device_build_ids,
                          json::array& warnings) {
    std::set<std::string_view> modules, unnamed; // unnamed: with frames no symbol named
    for (std::uint32_t f = 0; f < p.frame_count(); ++f) {
        modules.insert(p.module(f));
        if (p.symbol(f) == "[unknown]")
            unnamed.insert(p.module(f));
    }
    const auto config = symbols.config();
    const std::set<std::string_view> whole(config.resymbolize.begin(), config.resymbolize.end());
    json::array out;
    for (const auto& b : symbols.binaries()) {
        if (!modules.count(b.module))
            continue;
        const auto device = device_build_ids.find(b.module);
        if (device != device_build_ids.end() && device->second != b.device_build_id)
            continue; // looked up for another device's build
        json::array tried;
        for (const auto& t : b.tried)
            tried.emplace_back(t);
        json::object o{{"module", b.module},        {"path", b.path},
                       {"origin", b.origin},        {"symbols", b.symbols},
                       {"error", b.error},          {"build_id", b.build_id},
                       {"tried", std::move(tried)}, {"fix", b.fix},
                       {"pending", b.pending},      {"named_here", whole.count(b.module) != 0}};
        if (b.device_build_id.empty() || b.device_build_id == owner_recording) {
            o["build_matches"] = nullptr; // nothing to compare
        } else {
            o["device_build_id"] = b.device_build_id;
            o["build_matches"] = !b.path.empty() && b.build_id == b.device_build_id;
        }
        if (!b.fix.empty() && !b.pending && (b.path.empty() || unnamed.count(b.module)))
            warnings.emplace_back("no symbols for " + b.module +
                                  (b.path.empty() ? "" : " beyond its dynamic ones") + ": " +
                                  b.fix);
        out.push_back(std::move(o));
    }
    return out;
}

source_answer source_view(const profile& p, const view_filter& f, symbolizer& symbols,
                          const source_request& req,
                          const std::map<std::string, std::string>& device_build_ids,
                          const std::string& missing_build_id) {
    // Where the samples with an instruction offset landed, per (function, offset): the same
    // instruction reached along different call paths is one address. And where the calls
    // were that led to them: a caller's site (its return address; the call is the
    // instruction before it) weighs what it called. A function that recurs on a stack has its
    // call site at its outermost call only (the parser's rule), which holds all the rest.
    view_filter by_samples = f;
    by_samples.by_period = false;
    const auto counts = site_self_weights(p, f);
    const auto site_samples = f.by_period ? site_self_weights(p, by_samples) : counts;
    const auto inclusive = site_inclusive_weights(p, counts);
    std::vector<symbolizer::site> sites;
    struct weights {
        std::uint64_t value = 0, samples = 0, calls = 0;
    };
    std::vector<weights> values;
    // (frame << 32 | offset) -> sites[i], for sampled instructions and for calls
    std::unordered_map<std::uint64_t, std::size_t> index, call_index;
    std::uint64_t total = 0, placed = 0, view_total = 0;
    // Per site: sites[i] of its own instruction, and of the call that led to it from its
    // caller (npos: none), for walking each stack once.
    constexpr std::size_t npos = static_cast<std::size_t>(-1);
    std::vector<std::size_t> own_entry(counts.size(), npos), call_entry(inclusive.size(), npos);
    std::size_t last_entry = npos;
    auto entry = [&](std::unordered_map<std::uint64_t, std::size_t>& in, std::uint32_t frame,
                     std::uint32_t offset) -> weights& {
        const auto [it, fresh] = in.try_emplace(std::uint64_t{frame} << 32 | offset, sites.size());
        if (fresh) {
            const std::string module(p.module(frame));
            const auto id = device_build_ids.find(module);
            sites.push_back({module, std::string(p.symbol(frame)), offset,
                             id == device_build_ids.end() || id->second.empty() ? missing_build_id
                                                                                : id->second});
            values.emplace_back();
        }
        last_entry = it->second;
        return values[it->second];
    };
    // Frames with an offset, of a function some symbol named: a line can be found for them.
    auto placeable = [&](std::uint32_t s) {
        return s != 0 && p.site_offset(s) != profile::no_offset &&
               p.symbol(p.site_frame(s)) != "[unknown]";
    };
    for (std::uint32_t s = 0; s < counts.size(); ++s) {
        view_total += counts[s];
        if (!counts[s] || !placeable(s))
            continue;
        total += counts[s];
        auto& w = entry(index, p.site_frame(s), p.site_offset(s));
        w.value += counts[s];
        w.samples += site_samples[s];
        own_entry[s] = last_entry;
    }
    for (std::uint32_t s = 1; s < inclusive.size(); ++s) {
        const auto caller = p.site_parent(s);
        if (!inclusive[s] || !placeable(caller))
            continue;
        // An entry into the kernel is no call: its weight is the line's, its name not listed.
        const auto at = call_offset(p, caller, s);
        if (p.site_offset(caller) == 0 && !at.into_kernel)
            continue; // a return address at the function's start: no call before it
        auto& w = entry(call_index, p.site_frame(caller), at.offset);
        call_entry[s] = last_entry;
        w.calls += inclusive[s];
    }
    const auto where = symbols.resolve(sites);

    // A site counts once in every file of its inline chain, at the innermost line in that
    // file: code inlined from a header weighs on the header's line and on the line that
    // called it. "self" is the innermost file and line only.
    std::map<std::string, file_weight> files;
    // A call counts the same way, on the lines of the call instruction.
    for (std::size_t i = 0; i < sites.size(); ++i) {
        const auto& chain = where[i].chain;
        if (chain.empty())
            continue;
        const auto& w = values[i];
        placed += w.value;
        for (std::size_t k = 0; k < chain.size(); ++k) {
            bool seen = false;
            for (std::size_t j = 0; j < k && !seen; ++j)
                seen = chain[j].file == chain[k].file;
            if (seen)
                continue;
            auto& fw = files[chain[k].file];
            fw.total.samples += w.samples;
            fw.total.value += w.value;
            auto& lw = fw.lines[chain[k].line];
            lw.samples += w.samples;
            lw.value += w.value;
            if (k == 0) {
                fw.self.samples += w.samples;
                fw.self.value += w.value;
                lw.self_value += w.value;
            }
            fw.functions[sites[i].symbol] += w.value + w.calls;
        }
    }

    json::object head{{"event", view_event_name(p, f)},
                      {"weight", f.by_period ? "period" : "samples"},
                      {"session_total", total},
                      {"view_total", view_total},
                      {"placed_pct", pct(placed, total)}};
    json::array warnings;
    head["binaries"] = binaries_json(p, symbols, device_build_ids, warnings);
    if (p.caller_sites_full())
        warnings.emplace_back("this profile holds as many call sites as it may (" +
                              std::to_string(p.site_count()) +
                              "): the calls of stacks first seen after that are on no line");
    head["warnings"] = std::move(warnings);

    std::string file = req.file;
    if (file.empty() && !req.function.empty()) {
        std::uint64_t best = 0;
        for (const auto& [name, fw] : files)
            if (auto it = fw.functions.find(req.function);
                it != fw.functions.end() && it->second > best) {
                best = it->second;
                file = name;
            }
        if (file.empty())
            return not_found("no source lines for function " + req.function +
                             " (no samples, or its binary or debug info is not found)");
    }

    if (file.empty()) {
        std::vector<std::pair<std::string, const file_weight*>> order;
        for (const auto& [name, fw] : files)
            order.emplace_back(name, &fw);
        std::sort(order.begin(), order.end(), [](const auto& a, const auto& b) {
            return a.second->total.value > b.second->total.value;
        });
        json::array list;
        for (const auto& [name, fw] : order) {
            std::vector<std::pair<std::uint64_t, std::string>> fns;
            for (const auto& [fn, v] : fw->functions)
                fns.emplace_back(v, fn);
            std::sort(fns.rbegin(), fns.rend());
            json::array top;
            for (std::size_t i = 0; i < fns.size() && i < 5; ++i)
                top.emplace_back(fns[i].second);
            list.push_back(json::object{{"file", name},
                                        {"found", symbols.source_path(name).has_value()},
                                        {"samples", fw->total.samples},
                                        {"value", fw->total.value},
                                        {"pct", pct(fw->total.value, total)},
                                        {"self_pct", pct(fw->self.value, total)},
                                        {"functions", std::move(top)}});
        }
        head["files"] = std::move(list);
        return {200, std::move(head)};
    }

    const auto it = files.find(file);
    if (it == files.end()) {
        head["error"] =
            json::object{{"code", "no_source"}, {"message", "no samples were placed in " + file}};
        return {404, std::move(head)};
    }
    const file_weight& fw = it->second;
    const auto path = symbols.source_path(file);
    const auto text = path ? read_lines(*path) : std::vector<std::string>{};

    // The window: the whole file when it is small, else the hottest line ± 100.
    std::uint32_t hottest = fw.lines.begin()->first;
    std::uint64_t hottest_value = 0;
    for (const auto& [line, lw] : fw.lines)
        if (lw.value > hottest_value) {
            hottest = line;
            hottest_value = lw.value;
        }
    std::uint32_t last =
        std::max<std::uint32_t>(static_cast<std::uint32_t>(text.size()), fw.lines.rbegin()->first);
    std::uint32_t first = 1;
    if (last > whole_file_lines) {
        first = hottest > context_lines ? hottest - static_cast<std::uint32_t>(context_lines) : 1;
        last = std::min<std::uint32_t>(last, hottest + static_cast<std::uint32_t>(context_lines));
    }
    // Each line's inclusive weight, and what each call on it led to, counted once per stack:
    // a line the stack passes twice (a recursive call) weighs the stack once, as a function's
    // total does, so no line weighs more than the function it is in.
    std::vector<std::uint32_t> line_of(sites.size(), 0); // innermost line in this file; 0: none
    for (std::size_t i = 0; i < sites.size(); ++i)
        for (const auto& loc : where[i].chain)
            if (loc.file == file) {
                line_of[i] = loc.line;
                break;
            }
    std::map<std::uint32_t, std::uint64_t> through;                          // line -> weight
    std::map<std::pair<std::uint32_t, std::string_view>, std::uint64_t> led; // (line, callee)
    std::map<std::size_t, std::uint64_t> calls_to; // sites[i] calling req.function -> weight
    std::vector<std::uint32_t> seen_lines;
    std::vector<std::pair<std::uint32_t, std::string_view>> seen_calls;
    std::vector<std::size_t> seen_callers;
    for (std::uint32_t s = 1; s < counts.size(); ++s) {
        if (!counts[s])
            continue;
        seen_lines.clear();
        seen_calls.clear();
        seen_callers.clear();
        auto pass = [&](std::uint32_t line) {
            if (line && std::find(seen_lines.begin(), seen_lines.end(), line) == seen_lines.end())
                seen_lines.push_back(line);
        };
        if (own_entry[s] != npos)
            pass(line_of[own_entry[s]]);
        for (std::uint32_t m = s; m != 0; m = p.site_parent(m)) {
            const auto e = m < call_entry.size() ? call_entry[m] : npos;
            if (e == npos)
                continue;
            const auto at = call_offset(p, p.site_parent(m), m);
            if (!at.into_kernel && !req.function.empty() &&
                p.symbol(p.site_frame(m)) == req.function &&
                std::find(seen_callers.begin(), seen_callers.end(), e) == seen_callers.end())
                seen_callers.push_back(e);
            if (!line_of[e])
                continue;
            pass(line_of[e]);
            if (at.into_kernel)
                continue;
            const std::pair<std::uint32_t, std::string_view> call{line_of[e],
                                                                  p.symbol(p.site_frame(m))};
            if (std::find(seen_calls.begin(), seen_calls.end(), call) == seen_calls.end())
                seen_calls.push_back(call);
        }
        for (const auto l : seen_lines)
            through[l] += counts[s];
        for (const auto& c : seen_calls)
            led[c] += counts[s];
        for (const auto e : seen_callers)
            calls_to[e] += counts[s];
    }
    json::array lines;
    const line_weight none;
    for (std::uint32_t l = first; l <= last; ++l) {
        const auto found = fw.lines.find(l);
        const line_weight& lw = found == fw.lines.end() ? none : found->second;
        const auto t = through.find(l);
        const std::uint64_t inclusive_value = t == through.end() ? 0 : t->second;
        json::object o{{"line", l},
                       {"text", l <= text.size() ? text[l - 1] : std::string()},
                       {"samples", lw.samples},
                       {"value", lw.value},
                       {"pct", pct(lw.value, view_total)},
                       {"self_pct", pct(lw.self_value, view_total)},
                       {"total_value", inclusive_value},
                       {"total_pct", pct(inclusive_value, view_total)}};
        std::map<std::string, std::uint64_t> calls_here;
        for (auto c = led.lower_bound({l, std::string_view()});
             c != led.end() && c->first.first == l; ++c)
            calls_here[std::string(c->first.second)] = c->second;
        if (!calls_here.empty()) {
            json::array calls;
            for (const auto& [v, callee] : heaviest(calls_here, 3))
                calls.push_back(
                    json::object{{"name", callee}, {"value", v}, {"pct", pct(v, view_total)}});
            o["calls"] = std::move(calls);
        }
        lines.push_back(std::move(o));
    }
    head["file"] = file;
    head["path"] = path ? json::value(*path) : json::value(nullptr);
    head["total"] = fw.total.value;
    head["samples"] = fw.total.samples;
    head["file_pct"] = pct(fw.total.value, total);
    head["hottest_line"] = hottest;
    if (!req.function.empty()) {
        // Where in this file the function asked for is hottest, for the UI to scroll to.
        std::map<std::uint32_t, std::uint64_t> mine;
        for (std::size_t i = 0; i < sites.size(); ++i)
            if (sites[i].symbol == req.function)
                for (const auto& loc : where[i].chain)
                    if (loc.file == file) {
                        mine[loc.line] += values[i].value + values[i].calls;
                        break;
                    }
        std::uint32_t focus = hottest;
        std::uint64_t best = 0;
        for (const auto& [line, v] : mine)
            if (v > best) {
                best = v;
                focus = line;
            }
        head["function"] = req.function;
        head["focus_line"] = focus;
        head["called_from"] = called_from(calls_to, sites, where, view_total);
    }
    head["lines"] = std::move(lines);
    return {200, std::move(head)};
}

} // namespace collector
