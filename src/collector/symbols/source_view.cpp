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
    std::map<std::string, std::uint64_t> functions; // perf's function name -> value
};

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
    // instruction reached along different call paths is one address.
    view_filter by_samples = f;
    by_samples.by_period = false;
    const auto counts = site_self_weights(p, f);
    const auto site_samples = f.by_period ? site_self_weights(p, by_samples) : counts;
    std::vector<symbolizer::site> sites;
    std::vector<std::uint64_t> values, samples;
    std::unordered_map<std::uint64_t, std::size_t> index; // frame << 32 | offset -> sites[i]
    std::uint64_t total = 0, placed = 0;
    for (std::uint32_t s = 0; s < counts.size(); ++s) {
        if (!counts[s] || p.site_offset(s) == profile::no_offset)
            continue;
        const auto frame = p.site_frame(s);
        if (p.symbol(frame) == "[unknown]")
            continue; // an address in a module with no symbol for it: no line to place it on
        total += counts[s];
        const auto [it, fresh] =
            index.try_emplace(std::uint64_t{frame} << 32 | p.site_offset(s), sites.size());
        if (fresh) {
            const std::string module(p.module(frame));
            const auto id = device_build_ids.find(module);
            sites.push_back({module, std::string(p.symbol(frame)), p.site_offset(s),
                             id == device_build_ids.end() || id->second.empty() ? missing_build_id
                                                                                : id->second});
            values.push_back(0);
            samples.push_back(0);
        }
        values[it->second] += counts[s];
        samples[it->second] += site_samples[s];
    }
    const auto where = symbols.resolve(sites);

    // A site counts once in every file of its inline chain, at the innermost line in that
    // file: code inlined from a header weighs on the header's line and on the line that
    // called it. "self" is the innermost file and line only.
    std::map<std::string, file_weight> files;
    for (std::size_t i = 0; i < sites.size(); ++i) {
        const auto& chain = where[i].chain;
        if (chain.empty())
            continue;
        const auto value = values[i];
        const auto n = samples[i];
        placed += value;
        for (std::size_t k = 0; k < chain.size(); ++k) {
            bool seen = false;
            for (std::size_t j = 0; j < k && !seen; ++j)
                seen = chain[j].file == chain[k].file;
            if (seen)
                continue;
            auto& fw = files[chain[k].file];
            fw.total.samples += n;
            fw.total.value += value;
            auto& lw = fw.lines[chain[k].line];
            lw.samples += n;
            lw.value += value;
            if (k == 0) {
                fw.self.samples += n;
                fw.self.value += value;
                lw.self_value += value;
            }
            fw.functions[sites[i].symbol] += value;
        }
    }

    json::object head{{"event", p.event_name(f.event)},
                      {"weight", f.by_period ? "period" : "samples"},
                      {"session_total", total},
                      {"placed_pct", pct(placed, total)}};
    json::array warnings;
    head["binaries"] = binaries_json(p, symbols, device_build_ids, warnings);
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
    json::array lines;
    for (std::uint32_t l = first; l <= last; ++l) {
        const auto lw = fw.lines.find(l);
        const std::uint64_t n = lw == fw.lines.end() ? 0 : lw->second.samples;
        const std::uint64_t v = lw == fw.lines.end() ? 0 : lw->second.value;
        const std::uint64_t self = lw == fw.lines.end() ? 0 : lw->second.self_value;
        lines.push_back(json::object{{"line", l},
                                     {"text", l <= text.size() ? text[l - 1] : std::string()},
                                     {"samples", n},
                                     {"value", v},
                                     {"pct", pct(v, fw.total.value)},
                                     {"self_pct", pct(self, fw.total.value)}});
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
                        mine[loc.line] += values[i];
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
    }
    head["lines"] = std::move(lines);
    return {200, std::move(head)};
}

} // namespace collector
