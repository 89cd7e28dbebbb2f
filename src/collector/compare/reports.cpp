// The comparison's reports: JSON for other tools, markdown for a merge request, JUnit XML for a
// CI server. Function names come from a device: each is valid UTF-8 here (bad bytes as U+FFFD)
// and escaped for where it goes.
#include "collector/compare/compare.hpp"
#include "collector/export/exports.hpp"

#include <boost/json/array.hpp>
#include <boost/json/object.hpp>
#include <boost/json/serialize.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <vector>

namespace collector::compare {

namespace json = boost::json;

namespace {

// `s` with every byte that does not begin or continue a valid UTF-8 sequence replaced.
std::string utf8(std::string_view s) {
    std::string out;
    out.reserve(s.size());
    for (std::size_t i = 0; i < s.size();) {
        const auto c = static_cast<unsigned char>(s[i]);
        std::size_t n = c < 0x80         ? 1
                        : (c >> 5) == 6  ? 2
                        : (c >> 4) == 14 ? 3
                        : (c >> 3) == 30 ? 4
                                         : 0;
        bool ok = n > 0 && i + n <= s.size();
        for (std::size_t k = 1; ok && k < n; ++k)
            ok = (static_cast<unsigned char>(s[i + k]) >> 6) == 2;
        if (ok && n == 2)
            ok = c >= 0xC2; // (no overlong form)
        if (ok && n == 3) {
            const auto c1 = static_cast<unsigned char>(s[i + 1]);
            ok = !(c == 0xE0 && c1 < 0xA0) && !(c == 0xED && c1 >= 0xA0); // overlong, surrogate
        }
        if (ok && n == 4) {
            const auto c1 = static_cast<unsigned char>(s[i + 1]);
            ok = c <= 0xF4 && !(c == 0xF0 && c1 < 0x90) && !(c == 0xF4 && c1 >= 0x90);
        }
        if (ok) {
            // Characters that hide or reorder text are shown, never obeyed (as the UI does);
            // the two XML forbids and C1 controls are replaced.
            char32_t cp = n == 1 ? c : c & (0x7F >> n);
            for (std::size_t k = 1; k < n; ++k)
                cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
            if (cp == 0xFFFE || cp == 0xFFFF || (cp >= 0x80 && cp < 0xA0)) {
                out += "\xEF\xBF\xBD";
            } else if ((cp >= 0x200B && cp <= 0x200F) || (cp >= 0x2028 && cp <= 0x202E) ||
                       (cp >= 0x2060 && cp <= 0x2069) || cp == 0xFEFF || cp == 0x061C ||
                       (cp >= 0xE0000 && cp <= 0xE007F)) {
                char shown[32];
                std::snprintf(shown, sizeof shown, "\u27E8U+%04X\u27E9", static_cast<unsigned>(cp));
                out += shown;
            } else {
                out.append(s.substr(i, n));
            }
            i += n;
        } else {
            out += "\xEF\xBF\xBD";
            ++i;
        }
    }
    return out;
}

std::string what_changed(const finding& f) {
    return num("%.2f", f.base_pct) + " % → " + num("%.2f", f.cand_pct) + " % (" +
           (f.delta_pts >= 0 ? "+" : "") + num("%.2f", f.delta_pts) + " points, " +
           (f.base_pct > 0 ? (f.change_pct >= 0 ? "+" : "") + num("%.1f", f.change_pct) + " %"
                           : std::string("new")) +
           "; noise ±" + num("%.2f", f.noise_pts) + " points)";
}

std::string share_kind(const report& r) {
    return std::string(r.asked.total ? "total" : "self") + " share" +
           (r.asked.anchor.empty() ? "" : " of " + r.asked.anchor + "'s total");
}

std::string verdict_line(const report& r) {
    if (r.status == 2)
        return "could not compare: " + r.reason;
    if (r.status == 1)
        return std::to_string(r.regressions) + " regression" + (r.regressions == 1 ? "" : "s") +
               " beyond " + num("%g", r.asked.threshold_pct) + " % and the noise";
    return "pass: no function's " + share_kind(r) + " grew by more than " +
           num("%g", r.asked.threshold_pct) + " % beyond the noise";
}

// Markdown text of a name: no table break, no markup, no HTML, and nothing a merge request's
// comment acts on — no @mention (a word joiner after '@') and no bare link (one in "://").
std::string md(std::string_view s) {
    std::string out;
    const auto text = utf8(s);
    for (std::size_t i = 0; i < text.size(); ++i) {
        const char c = text[i];
        if (std::string_view("\\`*_{}[]()<>#!|~").find(c) != std::string_view::npos)
            out += '\\';
        out += static_cast<unsigned char>(c) < 0x20 ? ' ' : c;
        if (c == '@' || (c == ':' && text.compare(i + 1, 2, "//") == 0) ||
            ((c == 'w' || c == 'W') && i >= 2 && text.compare(i + 1, 1, ".") == 0 &&
             (text[i - 1] == 'w' || text[i - 1] == 'W') &&
             (text[i - 2] == 'w' || text[i - 2] == 'W')))
            out += "\u2060"; // (www⁠. is no autolink either)
    }
    return out;
}

// A link's target in markdown: what would end it or break the line percent-encoded.
std::string md_url(std::string_view s) {
    std::string out;
    for (const char c : utf8(s)) {
        const auto b = static_cast<unsigned char>(c);
        if (b <= 0x20 || b == 0x7f ||
            std::string_view("()<>\\`").find(c) != std::string_view::npos) {
            char hex[4];
            std::snprintf(hex, sizeof hex, "%%%02X", b);
            out += hex;
        } else {
            out += c;
        }
    }
    return out;
}

std::string xml(std::string_view s) {
    std::string out;
    xml_escape(out, utf8(s));
    return out;
}

} // namespace

std::string to_json(const report& r, const side& base, const side& cand, const std::string& link) {
    json::object o;
    o["status"] = r.status;
    o["verdict"] = r.status == 2 ? "could not compare" : r.status == 1 ? "regression" : "pass";
    o["summary"] = utf8(verdict_line(r));
    if (r.status == 2) {
        o["reason"] = utf8(r.reason);
        if (r.samples_needed)
            o["samples_needed"] = r.samples_needed;
    }
    json::object asked;
    asked["share"] = r.asked.total ? "total" : "self";
    asked["threshold_pct"] = r.asked.threshold_pct;
    asked["min_share_pct"] = r.asked.min_share_pct;
    asked["confidence_pct"] = r.asked.confidence_pct;
    if (!r.asked.anchor.empty())
        asked["anchor"] = utf8(r.asked.anchor);
    json::array ignore;
    for (const auto& g : r.asked.ignore)
        ignore.emplace_back(utf8(g));
    asked["ignore"] = std::move(ignore);
    o["asked"] = std::move(asked);
    const auto side_json = [](const side& s) {
        json::object out;
        json::array sources;
        for (const auto& src : s.sources)
            sources.emplace_back(utf8(src));
        out["runs"] = sources.size();
        out["sources"] = std::move(sources);
        out["samples"] = s.samples;
        json::object facts;
        for (const auto& [key, values] : s.facts) {
            json::array v;
            for (const auto& x : values)
                v.emplace_back(utf8(x));
            facts[utf8(key)] = std::move(v);
        }
        out["facts"] = std::move(facts);
        return out;
    };
    o["baseline"] = side_json(base);
    o["candidate"] = side_json(cand);
    o["z"] = r.z;
    o["dispersion"] = r.dispersion;
    o["dispersion_df"] = r.dispersion_df;
    json::array warnings;
    for (const auto& w : r.warnings)
        warnings.emplace_back(utf8(w));
    o["warnings"] = std::move(warnings);
    json::array functions;
    for (const auto& f : r.checked) {
        json::object x;
        x["name"] = utf8(f.name);
        x["module"] = utf8(f.module);
        x["baseline_pct"] = f.base_pct;
        x["candidate_pct"] = f.cand_pct;
        x["delta_pts"] = f.delta_pts;
        x["change_pct"] = f.change_pct;
        x["noise_pts"] = f.noise_pts;
        x["resolution_pct"] = f.resolution_pct;
        x["verdict"] = verdict_name(f.what);
        functions.emplace_back(std::move(x));
    }
    o["functions"] = std::move(functions);
    if (!link.empty())
        o["link"] = utf8(link);
    return json::serialize(o) + "\n";
}

std::string to_markdown(const report& r, const side& base, const side& cand,
                        const std::string& link, std::size_t top) {
    std::string out = "### perfwire: ";
    out += r.status == 2 ? "could not compare" : r.status == 1 ? "regression" : "pass";
    out += "\n\n" + md(verdict_line(r)) + "\n\n";
    out += "Baseline: " + std::to_string(base.sources.size()) + " run" +
           (base.sources.size() == 1 ? "" : "s") + ", " + std::to_string(base.samples) +
           " samples · candidate: " + std::to_string(cand.sources.size()) + " run" +
           (cand.sources.size() == 1 ? "" : "s") + ", " + std::to_string(cand.samples) +
           " samples · " + md(share_kind(r)) + ", threshold " + num("%g", r.asked.threshold_pct) +
           " %, noise band at " + num("%g", r.asked.confidence_pct) + " % for the report";
    if (r.dispersion_df)
        out += r.dispersion > 1.05 ? " · the runs differ " + num("%.1f", r.dispersion) +
                                         "× more than sampling makes them: bands widened ×" +
                                         num("%.2f", std::sqrt(r.dispersion))
                                   : " · the runs differ no more than sampling makes them";
    if (!link.empty())
        out += " · [the comparison](" + md_url(link) + ")" +
               (base.sources.size() > 1 || cand.sources.size() > 1
                    ? " (of the first run of each side: the UI compares one with one)"
                    : "");
    out += "\n\n";
    for (const auto& w : r.warnings)
        out += "> ⚠ " + md(w) + "\n";
    if (!r.warnings.empty())
        out += "\n";
    // The changes first (regressions, then improvements), then the heaviest of the rest.
    std::vector<const finding*> rows;
    for (const auto v : {verdict::regression, verdict::improvement})
        for (const auto& f : r.checked)
            if (f.what == v)
                rows.push_back(&f);
    for (const auto& f : r.checked)
        if (f.what != verdict::regression && f.what != verdict::improvement)
            rows.push_back(&f);
    if (rows.size() > top)
        rows.resize(top);
    if (!rows.empty()) {
        out += "| function | module | baseline | candidate | change | noise | verdict |\n"
               "|---|---|---:|---:|---:|---:|---|\n";
        for (const auto* f : rows) {
            const auto slash = f->module.rfind('/');
            out += "| " + md(f->name) + " | " +
                   md(slash == std::string::npos ? f->module : f->module.substr(slash + 1)) +
                   " | " + num("%.2f", f->base_pct) + " % | " + num("%.2f", f->cand_pct) + " % | " +
                   (f->base_pct > 0
                        ? (f->change_pct >= 0 ? "+" : "") + num("%.1f", f->change_pct) + " %"
                        : std::string("new")) +
                   " | ±" + num("%.2f", f->noise_pts) + " pts | " +
                   (f->what == verdict::regression ? "**regression**"
                                                   : std::string(verdict_name(f->what))) +
                   " |\n";
        }
        if (r.checked.size() > rows.size())
            out += "\n" + std::to_string(r.checked.size() - rows.size()) +
                   " more functions checked (the JSON report has them all).\n";
    }
    return out;
}

std::string to_junit(const report& r, const side& base, const side& cand) {
    const std::size_t errors = r.status == 2 ? 1 : 0;
    const std::size_t tests = r.checked.size() + errors;
    std::string suite = "perfwire compare (" + share_kind(r) + ")";
    std::string out = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
    out += "<testsuites name=\"perfwire compare\" tests=\"" + std::to_string(tests) +
           "\" failures=\"" + std::to_string(r.regressions) + "\" errors=\"" +
           std::to_string(errors) + "\" time=\"0\">\n";
    out += "  <testsuite name=\"" + xml(suite) + "\" tests=\"" + std::to_string(tests) +
           "\" failures=\"" + std::to_string(r.regressions) + "\" errors=\"" +
           std::to_string(errors) + "\" skipped=\"0\" time=\"0\">\n";
    out += "    <properties>\n";
    const auto property = [&](const std::string& name, const std::string& value) {
        out += "      <property name=\"" + xml(name) + "\" value=\"" + xml(value) + "\"/>\n";
    };
    property("threshold_pct", num("%g", r.asked.threshold_pct));
    property("confidence_pct", num("%g", r.asked.confidence_pct));
    property("baseline_samples", std::to_string(base.samples));
    property("candidate_samples", std::to_string(cand.samples));
    for (const auto& s : base.sources)
        property("baseline", s);
    for (const auto& s : cand.sources)
        property("candidate", s);
    for (const auto& w : r.warnings)
        property("warning", w);
    out += "    </properties>\n";
    if (errors) {
        out += "    <testcase name=\"comparison\" classname=\"perfwire\" time=\"0\">\n"
               "      <error message=\"" +
               xml(r.reason) + "\" type=\"could not compare\">" + xml(r.reason) +
               "</error>\n    </testcase>\n";
    }
    for (const auto& f : r.checked) {
        const auto slash = f.module.rfind('/');
        const std::string module =
            slash == std::string::npos ? f.module : f.module.substr(slash + 1);
        out += "    <testcase name=\"" + xml(f.name) + "\" classname=\"" +
               xml("perfwire." + (module.empty() ? std::string("unknown") : module)) +
               "\" time=\"0\"";
        if (f.what != verdict::regression) {
            out += "/>\n";
            continue;
        }
        const std::string message = f.name + ": " + share_kind(r) + " " + what_changed(f) +
                                    ", over the threshold of " + num("%g", r.asked.threshold_pct) +
                                    " %";
        out += ">\n      <failure message=\"" + xml(message) + "\" type=\"regression\">" +
               xml(message) + "\n" + xml("module: " + f.module) + "</failure>\n    </testcase>\n";
    }
    out += "  </testsuite>\n</testsuites>\n";
    return out;
}

std::string to_svg(const side& base, const side& cand, const std::string& title) {
    // The union of both sides' call paths, each node with its weight on each side.
    struct node {
        std::string name;
        double b = 0, c = 0;
        std::map<std::string, std::size_t> kids;
    };
    std::vector<node> nodes(1);
    nodes[0].name = "all";
    double bt = 0, ct = 0;
    // What a graph drawn 512 rows deep and 200,000 boxes wide can show: deeper frames and
    // frames past a million nodes add their weight to the frame they are under (a peer's
    // export of endless ";;;" grows nothing).
    constexpr std::size_t max_depth = 512, max_nodes = 1'000'000;
    const auto insert = [&](const std::string& path, double w, bool candidate) {
        std::size_t at = 0, depth = 0;
        (candidate ? nodes[0].c : nodes[0].b) += w;
        for (std::size_t from = 0; from <= path.size() && ++depth <= max_depth;) {
            auto semi = path.find(';', from);
            if (semi == std::string::npos)
                semi = path.size();
            const std::string name = path.substr(from, semi - from);
            from = semi + 1;
            auto it = nodes[at].kids.find(name);
            if (it == nodes[at].kids.end()) {
                if (nodes.size() >= max_nodes)
                    return;
                it = nodes[at].kids.emplace(name, nodes.size()).first;
                nodes.push_back({name, 0, 0, {}});
            }
            at = it->second;
            (candidate ? nodes[at].c : nodes[at].b) += w;
        }
    };
    for (const auto& [path, w] : base.stacks) {
        insert(path, w, false);
        bt += w;
    }
    for (const auto& [path, w] : cand.stacks) {
        insert(path, w, true);
        ct += w;
    }
    constexpr double width = 1200, row = 16, margin = 10, min_px = 0.3;
    struct box {
        std::size_t node;
        int depth;
        double x, w;
    };
    std::vector<box> boxes, todo{{0, 0, margin, width - 2 * margin}};
    int deepest = 0;
    std::size_t gone = 0;
    while (!todo.empty() && boxes.size() < 200000) {
        const auto b = todo.back();
        todo.pop_back();
        boxes.push_back(b);
        deepest = std::max(deepest, b.depth);
        double x = b.x;
        for (const auto& [name, k] : nodes[b.node].kids) {
            if (!(nodes[k].c > 0)) {
                gone += nodes[k].b > 0;
                continue;
            }
            const double w = ct > 0 ? (width - 2 * margin) * nodes[k].c / ct : 0;
            if (w >= min_px && b.depth < 511)
                todo.push_back({k, b.depth + 1, x, w});
            x += w;
        }
    }
    const double n0 = static_cast<double>(base.samples), n1 = static_cast<double>(cand.samples);
    const double height = (deepest + 1) * row + 4 * row + margin;
    std::string out =
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<svg xmlns=\"http://www.w3.org/2000/svg\" "
        "width=\"" +
        num("%.0f", width) + "\" height=\"" + num("%.0f", height) +
        "\" font-family=\"monospace\" font-size=\"11\">\n"
        "<rect width=\"100%\" height=\"100%\" fill=\"#fdfdfd\"/>\n"
        "<text x=\"600\" y=\"20\" text-anchor=\"middle\" font-size=\"15\">" +
        xml(title) + "</text>\n<text x=\"600\" y=\"38\" text-anchor=\"middle\">" +
        xml("as wide as in the candidate; red: a larger share than in the baseline, "
            "blue: smaller, grey: within the noise" +
            (gone ? "; " + std::to_string(gone) + " call paths of the baseline are gone"
                  : std::string())) +
        "</text>\n";
    for (const auto& b : boxes) {
        const auto& n = nodes[b.node];
        const double was = bt > 0 ? 100 * n.b / bt : 0, now = ct > 0 ? 100 * n.c / ct : 0;
        const double delta = now - was;
        const double p =
            n0 + n1 > 0 ? std::clamp((was * n0 + now * n1) / (100 * (n0 + n1)), 0.0, 1.0) : 0.0;
        const double noise =
            n0 > 0 && n1 > 0 ? 196 * std::sqrt(p * (1 - p) * (1 / n0 + 1 / n1)) : 100;
        std::string fill = "hsl(0,0%,82%)";
        if (std::abs(delta) > noise) {
            const double k = std::min(1.0, std::abs(delta) / 5);
            fill = "hsl(" + std::string(delta > 0 ? "0" : "220") + ",75%," +
                   num("%.0f", 88 - 40 * k) + "%)";
        }
        const double y = height - margin - (b.depth + 1) * row;
        out += "<g><title>" + xml(n.name) + " — baseline " + num("%.2f", was) + " %, candidate " +
               num("%.2f", now) + " % (" + (delta >= 0 ? "+" : "") + num("%.2f", delta) +
               " points)</title><rect x=\"" + num("%.2f", b.x) + "\" y=\"" + num("%.1f", y) +
               "\" width=\"" + num("%.2f", std::max(b.w - 0.5, 0.1)) + "\" height=\"" +
               num("%.1f", row - 1) + "\" fill=\"" + fill + "\" rx=\"1\"/>";
        const auto fits = static_cast<std::size_t>((b.w - 6) / 6.6);
        if (fits >= 3) {
            const auto name = utf8(n.name);
            std::size_t cut = std::min(name.size(), fits);
            while (cut > 0 && cut < name.size() &&
                   (static_cast<unsigned char>(name[cut]) & 0xC0) == 0x80)
                --cut;
            out += "<text x=\"" + num("%.2f", b.x + 3) + "\" y=\"" + num("%.1f", y + row - 4) +
                   "\">" + xml(name.substr(0, cut)) + (cut < name.size() ? ".." : "") + "</text>";
        }
        out += "</g>\n";
    }
    out += "</svg>\n";
    return out;
}

} // namespace collector::compare
