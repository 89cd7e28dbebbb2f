// The views' JSON shapes (docs/api.md), made from the model: pure functions, no I/O. Views
// that can be large (a flame graph is a node per stack) are built in the storage they are
// given, an arena the caller frees whole.
#pragma once

#include "collector/model/views.hpp"
#include "collector/session_model.hpp"

#include <boost/json/array.hpp>
#include <boost/json/object.hpp>
#include <boost/json/value.hpp>

#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace collector {

namespace json = boost::json;

// part in percent of whole; 0 for an empty whole.
double pct(std::uint64_t part, std::uint64_t whole);

// How the stacks are reshaped before a view is made of them (Firefox Profiler's transforms,
// pprof's -focus and -hide). Every view of stacks takes them: the function table, the flame
// graph and call tree, the timeline's flame chart.
struct tree_shape {
    bool inverted = false; // bottom-up: the sampled frames first, each above its callers
    std::string focus;     // only stacks through this function, from its outermost call down
    std::vector<std::string> hide; // functions left out of every stack (callees move up)
    // Functions whose stacks are left out whole (Firefox Profiler's "drop samples with this
    // function"): what remains is the view, its total too — e.g. the preempted waits of an
    // off-CPU or wall view ("[preempted]").
    std::vector<std::string> drop;
    bool callers = false;            // with a focus: the focus at the root, its callers below it
    bool collapse_recursion = false; // a function calling itself directly is one frame
    // Modules (as the views name them) whose frames become one frame each, named after the
    // module ("[libc.so.6]"): a run of calls inside the library is one frame.
    std::vector<std::string> collapse;

    // Anything beyond the direction: the stacks themselves change.
    bool reshapes() const noexcept {
        return !focus.empty() || !hide.empty() || !drop.empty() || !collapse.empty() ||
               collapse_recursion;
    }
};
// What a shape did (focus, hide, drop, collapse, collapse_recursion), said in an answer.
void say_shape(json::object& o, const tree_shape& shape);
// The name a collapsed module's frame is shown by: "[file name]", or the module itself when
// perf already bracketed it ("[kernel.kallsyms]").
std::string collapsed_module_name(std::string_view module);

// {"event", "weight", "total", "samples", "functions": [{name, module, self, total, self_pct,
// total_pct}]}, by self, at most `limit` rows.
// With a shape (its focus, hidden functions, collapsed recursion and modules; not its
// direction), the table is of the reshaped stacks: a hidden function's self weight is its
// caller's, a collapsed module is one row; "focus", "hide", "collapse" and
// "collapse_recursion" say what was applied. The total stays the view's. nullopt when the
// focus names no function of the reshaped stacks.
std::optional<json::value> functions_json(const profile& p, const view_filter& f, std::size_t limit,
                                          const json::storage_ptr& sp,
                                          const tree_shape& shape = {});
// A page of the function table: the rows whose name or module holds `match` (ASCII case
// folded), ordered by `sort` (a row's field: self, total, self_pct, total_pct, name, module,
// or with a baseline baseline_self_pct, delta_self_pct, delta_total_pct; rows without it last),
// then `offset` rows skipped and at most `limit` kept. Ties keep the table's order (by self).
struct function_page {
    std::string sort = "self";
    bool descending = true;
    std::string match;
    std::size_t offset = 0;
    std::size_t limit = static_cast<std::size_t>(-1);
};
// `text` ASCII case folded; whether `text` holds `needle` (already folded), case folded.
std::string folded(std::string_view text);
bool holds_folded(std::string_view text, std::string_view needle);
// The row fields a page sorts by.
bool sortable_function_field(std::string_view field);
// A functions answer cut to the page: "functions" holds the page's rows; "matched" counts the
// rows that match, "count" every row, "offset" is the page's first row.
void page_functions(json::object& body, const function_page& page);

// {…header, "root": {name, module, value, self, samples, children: […]}, "small_frames_hidden",
// "small_weight_hidden"}: children by value, those under min_pct of the total (counted in
// small_frames_hidden, each with what is below it, their weight in small_weight_hidden) and
// below max_depth left out; `samples` counts samples whatever the weight. The header's total is the
// view's, whatever the shape keeps. inverted: a node's self is the weight of stacks that begin
// there; "inverted": true is added. focus: the root holds only the stacks through the function
// ("focus" names it); nullopt when no sampled function has that name.
std::optional<json::value> flamegraph_json(const profile& p, const view_filter& f, int max_depth,
                                           double min_pct, const json::storage_ptr& sp,
                                           const tree_shape& shape = {});
// {…header, "function", "self", "self_pct", "unplaced", "addresses_total", "addresses":
// [{label, module, offset, self, self_pct}]}: where in the function `name` (in `module`, when
// not empty) its self weight fell, by instruction, heaviest first, at most `limit`. For a frame
// perf could not name ("[unknown]") the offset is the address in its module and the label
// reads "libx.so.1+0x15bc9", as perf report shows it; otherwise "name+0x1c". `unplaced`: the
// weight perf printed no address for. nullopt when no frame has that name.
std::optional<json::value> addresses_json(const profile& p, const view_filter& f,
                                          std::string_view name, std::string_view module,
                                          std::size_t limit, const json::storage_ptr& sp);
// {…header, "function": {name, module, self, total, self_pct, total_pct}, "callers": [{name,
// module, total, total_pct}], "callees": [{name, module, self, total, self_pct, total_pct}],
// "callers_more", "callees_more"} for the frames named `name` (in `module`, when not empty),
// the heaviest 500 of each and how many more; nullopt when none is sampled.
std::optional<json::value> sandwich_json(const profile& p, const view_filter& f,
                                         std::string_view name, std::string_view module,
                                         const json::storage_ptr& sp);
// The profile's health, each check with what was measured and the fix: {…header, "checks":
// [{id, title, status: ok|warn|bad, value, pct?, fix, detail[]}]} for samples, unknown
// frames, truncated stacks, lost samples and counter multiplexing.
json::value quality_json(const session_model& m, const view_filter& f, const json::storage_ptr& sp);
// Samples over time, `width` buckets across [start, end] of the filter (or of the session):
// {…header, start_s, end_s, buckets, threads: [{tid, comm, weight, activity: [per bucket]}]}
// busiest first; with `chart_tid`, that thread's flame chart: "chart": {tid, frames: [{name,
// module}], boxes: [[depth, first bucket, last bucket, frame], …]}, a box being a frame that
// stayed at its depth across consecutive samples (root depth 0), its stacks reshaped by
// `shape` (a sample outside a focus leaves a gap).
json::value timeline_json(const profile& p, const view_filter& f, std::size_t width,
                          std::optional<std::uint32_t> chart_tid, const json::storage_ptr& sp,
                          const tree_shape& shape = {});
// [{tid, pid, comm, samples, weight, pct, top_functions: […]}].
json::value threads_json(const profile& p, const view_filter& f, const json::storage_ptr& sp);
// The last perf stat: counters, ipc and miss rates (null when not counted), elapsed, scaled.
json::object stat_json(const session_model& m);

// A baseline's shares in percent of its total: its function table (keyed by
// "name\x1fmodule") and its call tree, both shaped as the view compared with it.
struct baseline_shares {
    struct function_share {
        std::string name, module;
        double self = 0, total = 0;
    };
    struct node {
        std::string name, module;
        double pct = 0; // inclusive
        std::vector<std::uint32_t> children;
    };
    std::unordered_map<std::string, function_share> functions;
    std::vector<node> nodes;   // nodes[0] is the root
    std::uint64_t samples = 0; // in the baseline's view: how far its shares can be trusted
};

// The baseline's function table and call tree, shaped by `shape` (its direction, focus,
// callers, hidden functions, collapsed recursion and modules) as the view is; tree nodes
// under a tenth of `min_pct` are left out.
baseline_shares baseline_of(const profile& p, const view_filter& f, const tree_shape& shape = {},
                            double min_pct = 0);
// Compares a functions or flamegraph answer with a baseline, over the union of both: functions
// rows gain baseline_self_pct, baseline_total_pct, delta_self_pct, delta_total_pct, and a row
// for each function of the baseline only (self and total 0); flame-graph nodes (matched by
// their path of names) gain baseline_pct and delta_pct, and a node of value 0 stands for each
// path of the baseline only, at least `min_pct` of its total. Each delta comes with its noise
// (noise_pct; noise_self_pct and noise_total_pct for a row): the 95 % band of a difference of
// two shares from these sample counts (n1: the samples of the view), within which a change
// means nothing.
void apply_baseline(json::value& body, const baseline_shares& b, const std::string& id,
                    std::uint64_t n1, double min_pct = 0);
// The samples a view holds.
std::uint64_t view_samples(const profile& p, const view_filter& f);

// Health history: the metrics records (one JSON object per line) of `type` (empty: all) whose
// time, in seconds from t0, lies within [start_s, end_s].
json::array metrics_history(const std::vector<std::string>& lines, double t0, std::string_view type,
                            std::optional<double> start_s, std::optional<double> end_s);

} // namespace collector
