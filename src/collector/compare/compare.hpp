// Profiles compared for a verdict a CI pipeline can act on: two sides (a baseline and a
// candidate), each one run or several pooled, their functions' shares compared one by one.
//
//   runs (function tables: a saved session, a perf script file, a collector's answer)
//     ──pool──▶ side (weight and samples per function, summed)  ──judge──▶ verdict
//                                                                  (regressions, improvements,
//                                                                   or "cannot tell": status 2)
//
// A function's share is its weight (self or total, by period) over the side's whole weight, or
// over an anchor function's total (a benchmark's main loop: what the run did, whatever else the
// process did beside it). A function is a regression when its share grew by more than the
// threshold (a fraction of what it was) and by more than the noise band: the difference of two
// shares that sampling alone makes, from the two sides' sample counts (the pooled two-proportion
// band the UI shows), widened for the number of functions checked so that a whole report's
// false alarms stay within 1 - confidence. No I/O here.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace collector::compare {

// One run's function table: what a source gives.
struct run_table {
    std::string source;      // what the user named (a path, a session id)
    std::uint64_t samples{}; // samples of the view (the band's count)
    double weight{};         // the view's whole weight (period)
    struct row {
        std::string name, module;
        double self{}, total{}; // weight
    };
    std::vector<row> rows;
    // The weight whose sampled frame has no name (a stripped build no symbols were found for),
    // and the modules most of it is in: such functions cannot meet the other side's by name.
    double unnamed{};
    std::vector<std::string> unnamed_modules;
    // What the run was, for the warnings when the sides differ: event, frequency, call-graph
    // mode, kernel, … (key → value; a key a source cannot say is absent).
    std::map<std::string, std::string> facts;
    // Its call paths, root first, names between ';' (perf's collapsed stacks) → weight: the
    // diff flame graph's. Empty when the source has none.
    std::map<std::string, double> stacks;
};

// Collapsed stacks ("a;b;c 42" lines) added into `stacks`; lines that are not, skipped.
void add_collapsed(std::map<std::string, double>& stacks, std::string_view text);

struct function_weight {
    std::string name, module;
    double self{}, total{};
};

// Runs pooled: weights summed per function (its name and its module's file name: one build
// against another of the same file is the same function wherever the files lay).
struct side {
    std::vector<std::string> sources;
    std::uint64_t samples{};
    double weight{};
    std::map<std::string, function_weight> functions;      // by key
    std::map<std::string, std::vector<std::string>> facts; // each value seen, in order
    std::map<std::string, double> stacks;                  // every run's, summed
    double unnamed{};
    std::vector<std::string> unnamed_modules;
    // Each run's own: how its shares spread around the pooled ones says whether the runs
    // differ by more than sampling does (judge's dispersion).
    struct run {
        std::uint64_t samples{};
        double weight{};
        std::map<std::string, double> self, total; // by key
    };
    std::vector<run> runs;
};
void add_run(side& s, const run_table& run);
// The key two sides' functions meet at: "name\x1fmodule's file name".
std::string function_key(std::string_view name, std::string_view module);

struct options {
    bool total = false;              // compare total shares (self and callees), not self
    double threshold_pct = 5;        // a change smaller than this (% of the share) passes
    double min_share_pct = 1;        // functions under this share on both sides are not checked
    double confidence_pct = 99;      // for the whole report: false alarms within 1 - this
    std::string anchor;              // normalise by this function's total (its name), not the whole
    std::vector<std::string> ignore; // globs on a function's name or its module's file name
};

enum class verdict { unchanged, regression, improvement, within_noise };
std::string_view verdict_name(verdict v) noexcept;

struct finding {
    std::string name, module;
    double base_pct{}, cand_pct{}; // shares
    double delta_pts{};            // cand - base, points
    double change_pct{};           // delta over base, % (100 for a function new here)
    double noise_pts{};            // the band (points) at the report's confidence
    double resolution_pct{};       // the smallest change (% of its share) this band can tell
    verdict what = verdict::unchanged;
};

struct report {
    int status = 0;                 // 0 pass, 1 regression, 2 could not compare
    std::string reason;             // for status 2: why, with what it would take
    std::uint64_t samples_needed{}; // for too few samples: on each side
    std::vector<finding> checked;   // heaviest first (by the larger of the two shares)
    std::size_t regressions{}, improvements{};
    std::vector<std::string> warnings; // what differs between the sides
    double z{};                        // the band's standard errors
    // How much more the runs of a side differ than sampling alone makes them (1: no more, or
    // no side with two runs to tell): every band is widened by its square root. A quasi-
    // binomial estimate, Pearson's χ² of each run's shares of the functions checked around its
    // side's pooled ones over their degrees of freedom (`dispersion_df`; none: not estimated).
    double dispersion = 1;
    std::size_t dispersion_df{};
    std::uint64_t base_samples{}, cand_samples{};
    options asked;
};

report judge(const side& base, const side& cand, const options& o);

// Standard errors that hold `confidence` (two-sided) of a normal draw: 1.96 for 0.95.
double z_for(double confidence);

// `v` printed by a printf `format` of one double ("%.2f"), as the reports write numbers.
std::string num(const char* format, double v);

// Whether `text` matches a glob of * and ? (the whole of it).
bool glob_match(std::string_view glob, std::string_view text) noexcept;

// The report as a pipeline keeps it. `link`: where a person sees the comparison (the collector's
// diff view), or empty.
std::string to_json(const report& r, const side& base, const side& cand, const std::string& link);
// A summary for a merge request's comment: the verdict, the top changes, the warnings.
std::string to_markdown(const report& r, const side& base, const side& cand,
                        const std::string& link, std::size_t top = 10);
// JUnit XML (the schema Jenkins and GitLab read): a test case per function checked, a failure
// for each regression naming the change; "could not compare" an error.
std::string to_junit(const report& r, const side& base, const side& cand);

// The diff flame graph as a static SVG (any browser): the candidate's call paths, each as wide as
// its share there, red where its share grew and blue where it shrank beyond the noise (the UI's
// 95 % band), grey within it; a tooltip with both shares.
std::string to_svg(const side& base, const side& cand, const std::string& title);

} // namespace collector::compare
