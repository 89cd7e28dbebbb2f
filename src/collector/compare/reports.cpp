// The comparison's reports: JSON for other tools, markdown for a merge request, JUnit XML for a
// CI server. Function names come from a device: each is valid UTF-8 here (bad bytes as U+FFFD)
// and escaped for where it goes.
#include "collector/compare/compare.hpp"
#include "collector/export/exports.hpp"

#include <boost/json/array.hpp>
#include <boost/json/object.hpp>
#include <boost/json/serialize.hpp>

#include <cstdio>

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
            out.append(s.substr(i, n));
            i += n;
        } else {
            out += "\xEF\xBF\xBD";
            ++i;
        }
    }
    return out;
}

std::string num(const char* f, double v) {
    char buf[64];
    std::snprintf(buf, sizeof buf, f, v);
    return buf;
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

// Markdown text of a name: no table break, no markup, no HTML.
std::string md(std::string_view s) {
    std::string out;
    for (const char c : utf8(s)) {
        if (std::string_view("\\`*_{}[]()<>#!|~").find(c) != std::string_view::npos)
            out += '\\';
        out += static_cast<unsigned char>(c) < 0x20 ? ' ' : c;
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
    if (!link.empty())
        out += " · [the comparison](" + md(link) + ")";
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

} // namespace collector::compare
