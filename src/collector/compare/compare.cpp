#include "collector/compare/compare.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace collector::compare {

namespace {

std::string_view file_name(std::string_view module) {
    const auto slash = module.rfind('/');
    return slash == std::string_view::npos ? module : module.substr(slash + 1);
}

// The standard normal's quantile (Acklam's rational approximation: relative error under
// 1.2e-9 over (0, 1)).
double normal_quantile(double p) {
    static constexpr double a[] = {-3.969683028665376e+01, 2.209460984245205e+02,
                                   -2.759285104469687e+02, 1.383577518672690e+02,
                                   -3.066479806614716e+01, 2.506628277459239e+00};
    static constexpr double b[] = {-5.447609879822406e+01, 1.615858368580409e+02,
                                   -1.556989798598866e+02, 6.680131188771972e+01,
                                   -1.328068155288572e+01};
    static constexpr double c[] = {-7.784894002430293e-03, -3.223964580411365e-01,
                                   -2.400758277161838e+00, -2.549732539343734e+00,
                                   4.374664141464968e+00,  2.938163982698783e+00};
    static constexpr double d[] = {7.784695709041462e-03, 3.224671290700398e-01,
                                   2.445134137142996e+00, 3.754408661907416e+00};
    p = std::clamp(p, 1e-300, 1 - 1e-16);
    const auto tail = [&](double q) {
        return (((((c[0] * q + c[1]) * q + c[2]) * q + c[3]) * q + c[4]) * q + c[5]) /
               ((((d[0] * q + d[1]) * q + d[2]) * q + d[3]) * q + 1);
    };
    if (p < 0.02425)
        return tail(std::sqrt(-2 * std::log(p)));
    if (p > 1 - 0.02425)
        return -tail(std::sqrt(-2 * std::log(1 - p)));
    const double q = p - 0.5, r = q * q;
    return (((((a[0] * r + a[1]) * r + a[2]) * r + a[3]) * r + a[4]) * r + a[5]) * q /
           (((((b[0] * r + b[1]) * r + b[2]) * r + b[3]) * r + b[4]) * r + 1);
}

std::string joined(const std::vector<std::string>& values) {
    std::string out;
    for (const auto& v : values)
        out += (out.empty() ? "" : ", ") + v;
    return out;
}

} // namespace

std::string function_key(std::string_view name, std::string_view module) {
    std::string key(name);
    key += '\x1f';
    key += file_name(module);
    return key;
}

void add_run(side& s, const run_table& run) {
    s.sources.push_back(run.source);
    s.samples += run.samples;
    s.weight += run.weight;
    auto& mine = s.runs.emplace_back();
    mine.samples = run.samples;
    mine.weight = run.weight;
    for (const auto& r : run.rows) {
        const auto key = function_key(r.name, r.module);
        auto& f = s.functions[key];
        if (f.name.empty()) {
            f.name = r.name;
            f.module = r.module;
        }
        f.self += r.self;
        f.total += r.total;
        mine.self[key] += r.self;
        mine.total[key] += r.total;
    }
    s.unnamed += run.unnamed;
    for (const auto& m : run.unnamed_modules)
        if (std::find(s.unnamed_modules.begin(), s.unnamed_modules.end(), m) ==
            s.unnamed_modules.end())
            s.unnamed_modules.push_back(m);
    for (const auto& [path, w] : run.stacks)
        s.stacks[path] += w;
    for (const auto& [key, value] : run.facts) {
        auto& seen = s.facts[key];
        if (std::find(seen.begin(), seen.end(), value) == seen.end())
            seen.push_back(value);
    }
}

void add_collapsed(std::map<std::string, double>& stacks, std::string_view text) {
    while (!text.empty()) {
        const auto end = text.find('\n');
        const auto line = text.substr(0, end);
        text = end == std::string_view::npos ? std::string_view() : text.substr(end + 1);
        const auto space = line.rfind(' ');
        if (space == std::string_view::npos || space == 0)
            continue;
        char* stop = nullptr;
        const std::string number(line.substr(space + 1));
        const double w = std::strtod(number.c_str(), &stop);
        if (stop == number.c_str() || *stop || !(w > 0))
            continue;
        stacks[std::string(line.substr(0, space))] += w;
    }
}

std::string_view verdict_name(verdict v) noexcept {
    switch (v) {
    case verdict::regression:
        return "regression";
    case verdict::improvement:
        return "improvement";
    case verdict::within_noise:
        return "within the noise";
    case verdict::unchanged:
        break;
    }
    return "unchanged";
}

double z_for(double confidence) {
    return normal_quantile(1 - (1 - confidence) / 2);
}

bool glob_match(std::string_view glob, std::string_view text) noexcept {
    // Iterative, with one star remembered: linear in practice, never exponential.
    std::size_t g = 0, t = 0, star = std::string_view::npos, mark = 0;
    while (t < text.size()) {
        if (g < glob.size() && (glob[g] == '?' || glob[g] == text[t])) {
            ++g;
            ++t;
        } else if (g < glob.size() && glob[g] == '*') {
            star = g++;
            mark = t;
        } else if (star != std::string_view::npos) {
            g = star + 1;
            t = ++mark;
        } else {
            return false;
        }
    }
    while (g < glob.size() && glob[g] == '*')
        ++g;
    return g == glob.size();
}

namespace {

// The runs' dispersion (report::dispersion): for each side of two runs or more and each
// function checked, Σ over its runs of n (s - p)² / (p (1 - p)) — s the run's share, p the
// side's pooled one, n the run's samples — summed, over Σ (runs - 1) per function. Sampling
// alone makes it about 1; runs that differ by more (the machine, the inputs) make it larger.
void estimate_dispersion(report& r, std::initializer_list<const side*> sides,
                         const std::vector<std::string>& keys, const options& o) {
    double chi2 = 0;
    std::size_t df = 0;
    for (const auto* s : sides) {
        // Each run's denominator and samples, as the bands have them: the whole, or the
        // anchor's total (and its part of the samples); a run with neither is left out.
        struct scaled {
            const side::run* run;
            double of, n;
        };
        std::vector<scaled> used;
        for (const auto& run : s->runs) {
            double of = run.weight;
            if (!o.anchor.empty()) {
                of = 0;
                for (const auto& [key, w] : run.total)
                    if (key.size() > o.anchor.size() &&
                        key.compare(0, o.anchor.size(), o.anchor) == 0 &&
                        key[o.anchor.size()] == '\x1f')
                        of = std::max(of, w);
            }
            if (of > 0 && run.weight > 0 && run.samples)
                used.push_back({&run, of, static_cast<double>(run.samples) * of / run.weight});
        }
        if (used.size() < 2)
            continue;
        for (const auto& key : keys) {
            double all = 0, whole = 0;
            for (const auto& u : used) {
                const auto& w = o.total ? u.run->total : u.run->self;
                const auto mine = w.find(key);
                all += mine == w.end() ? 0.0 : mine->second;
                whole += u.of;
            }
            const double p = all / whole;
            if (!(p > 0 && p < 1))
                continue;
            for (const auto& u : used) {
                const auto& w = o.total ? u.run->total : u.run->self;
                const auto mine = w.find(key);
                const double share = mine == w.end() ? 0.0 : mine->second / u.of;
                chi2 += u.n * (share - p) * (share - p) / (p * (1 - p));
            }
            df += used.size() - 1;
        }
    }
    r.dispersion_df = df;
    if (df)
        r.dispersion = std::max(1.0, chi2 / static_cast<double>(df));
}

} // namespace

report judge(const side& base, const side& cand, const options& o) {
    report r;
    r.asked = o;
    r.base_samples = base.samples;
    r.cand_samples = cand.samples;
    for (const auto& [key, b] : base.facts) {
        const auto c = cand.facts.find(key);
        if (c != cand.facts.end() && c->second != b)
            r.warnings.push_back("the baseline's " + key + " is " + joined(b) +
                                 ", the candidate's " + joined(c->second));
        if (b.size() > 1)
            r.warnings.push_back("the baseline's runs differ in " + key + ": " + joined(b));
    }
    for (const auto& [key, c] : cand.facts)
        if (c.size() > 1)
            r.warnings.push_back("the candidate's runs differ in " + key + ": " + joined(c));
    // Code with no name on a side: its functions are addresses the other side's names cannot
    // meet (a stripped build against its unstripped twin, no symbols given for it).
    for (const auto* s : {&base, &cand})
        if (s->weight > 0 && s->unnamed / s->weight >= 0.05)
            r.warnings.push_back(
                num("%.1f", 100 * s->unnamed / s->weight) + " % of the " +
                (s == &base ? "baseline" : "candidate") + "'s time is in code with no name" +
                (s->unnamed_modules.empty() ? "" : " (in " + joined(s->unnamed_modules) + ")") +
                ": its functions cannot meet the other side's by name — give the unstripped "
                "build with the same build-id (--binary FILE) or its debug files (--debug-dir "
                "DIR); for a collector's sessions, the collector's own --binary");
    const auto cannot = [&](std::string why) {
        r.status = 2;
        r.reason = std::move(why);
        return r;
    };
    if (!base.samples || !cand.samples || !(base.weight > 0) || !(cand.weight > 0))
        return cannot(
            std::string(!base.samples || !(base.weight > 0) ? "the baseline" : "the candidate") +
            " has no samples");
    // What a share is of: the whole, or the anchor's total (and about its share of the samples).
    struct scale {
        double weight;
        double samples;
    };
    const auto scale_of = [&](const side& s) -> std::optional<scale> {
        if (o.anchor.empty())
            return scale{s.weight, static_cast<double>(s.samples)};
        double total = 0;
        for (const auto& [key, f] : s.functions)
            if (f.name == o.anchor)
                total = std::max(total, f.total);
        if (!(total > 0))
            return std::nullopt;
        return scale{total, static_cast<double>(s.samples) * total / s.weight};
    };
    const auto sb = scale_of(base), sc = scale_of(cand);
    if (!sb || !sc)
        return cannot("the anchor " + o.anchor + " is not in the " +
                      (sb ? "candidate" : "baseline"));
    const auto ignored = [&](const function_weight& f) {
        if (!o.anchor.empty() && f.name == o.anchor)
            return true; // (its share is the whole, on both sides)
        for (const auto& g : o.ignore)
            if (glob_match(g, f.name) || glob_match(g, file_name(f.module)))
                return true;
        return false;
    };
    const auto share = [&](const side& s, const scale& k, const std::string& key) {
        const auto it = s.functions.find(key);
        if (it == s.functions.end())
            return 0.0;
        return 100.0 * (o.total ? it->second.total : it->second.self) / k.weight;
    };
    // The functions checked: over the smallest share asked on either side, not ignored.
    std::vector<std::string> keys;
    for (const auto* s : {&base, &cand})
        for (const auto& [key, f] : s->functions)
            if (!ignored(f) && (share(base, *sb, key) >= o.min_share_pct ||
                                share(cand, *sc, key) >= o.min_share_pct))
                keys.push_back(key);
    std::sort(keys.begin(), keys.end());
    keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
    if (keys.empty())
        return cannot("no function has " + num("%g", o.min_share_pct) +
                      " % of the time or more on either side (--min-share)");
    // Each function's band at the confidence the whole report holds (Bonferroni over them),
    // widened when the runs differ more than sampling makes them.
    const double per_function = (1 - o.confidence_pct / 100) / static_cast<double>(keys.size());
    r.z = z_for(1 - per_function);
    estimate_dispersion(r, {&base, &cand}, keys, o);
    const double widen = std::sqrt(r.dispersion);
    const double t = o.threshold_pct / 100;
    for (const auto& key : keys) {
        const auto& f = base.functions.count(key) ? base.functions.at(key) : cand.functions.at(key);
        finding x;
        x.name = f.name;
        x.module = f.module;
        x.base_pct = share(base, *sb, key);
        x.cand_pct = share(cand, *sc, key);
        x.delta_pts = x.cand_pct - x.base_pct;
        x.change_pct = x.base_pct > 0 ? 100 * x.delta_pts / x.base_pct : 100;
        const double n0 = sb->samples, n1 = sc->samples;
        const double p =
            std::clamp((x.base_pct * n0 + x.cand_pct * n1) / (100 * (n0 + n1)), 0.0, 1.0);
        x.noise_pts = 100 * r.z * widen * std::sqrt(p * (1 - p) * (1 / n0 + 1 / n1));
        const double of = std::max(x.base_pct, 1e-9);
        x.resolution_pct = 100 * x.noise_pts / of;
        const bool beyond_noise = std::abs(x.delta_pts) > x.noise_pts;
        const bool beyond_threshold = std::abs(x.change_pct) > o.threshold_pct;
        if (beyond_threshold && beyond_noise)
            x.what = x.delta_pts > 0 ? verdict::regression : verdict::improvement;
        else if (beyond_threshold)
            x.what = verdict::within_noise;
        r.regressions += x.what == verdict::regression;
        r.improvements += x.what == verdict::improvement;
        r.checked.push_back(std::move(x));
    }
    std::stable_sort(r.checked.begin(), r.checked.end(), [](const finding& a, const finding& b) {
        return std::max(a.base_pct, a.cand_pct) > std::max(b.base_pct, b.cand_pct);
    });
    // Could a change of the threshold be told at all? For the heaviest function checked: the
    // samples each side needs for its band to be within the threshold of its share. Without
    // them the comparison says so, whatever it saw (listed still: a short run's start-up alone
    // moves shares of the kernel's entry and exit past a band of a few hundred samples).
    const auto& top = r.checked.front();
    const double p = std::clamp(std::max(top.base_pct, top.cand_pct) / 100, 1e-9, 1 - 1e-9);
    const double needed = std::ceil(2 * r.z * r.z * r.dispersion * (1 - p) / (t * t * p));
    const double have = std::min(sb->samples, sc->samples);
    if (have < needed) {
        // (a count a report can hold: a share tiny beside the whole asks for a huge one)
        r.samples_needed = static_cast<std::uint64_t>(std::min(
            needed * (o.anchor.empty()
                          ? 1.0
                          : std::max(base.samples / sb->samples, cand.samples / sc->samples)),
            1e18));
        return cannot("too few samples to tell a " + num("%g", o.threshold_pct) +
                      " % change: " + std::to_string(r.samples_needed) +
                      " on each side are needed for the heaviest function " + top.name + " (" +
                      num("%.1f", std::max(top.base_pct, top.cand_pct)) + " %); the baseline has " +
                      std::to_string(base.samples) + ", the candidate " +
                      std::to_string(cand.samples) +
                      " (record longer, at a higher rate, or pool more runs on each side)");
    }
    r.status = r.regressions ? 1 : 0;
    return r;
}

std::string num(const char* format, double v) {
    char buf[64];
    std::snprintf(buf, sizeof buf, format, v);
    return buf;
}

} // namespace collector::compare
