#include "collector/model/view_json.hpp"

#include "collector/model/stack_shaper.hpp"

#include <boost/json/parse.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <unordered_set>

namespace collector {

json::object view_header(const profile& p, const view_filter& f, std::uint64_t total,
                         json::storage_ptr sp) {
    return json::object({{"event", view_event_name(p, f)},
                         {"weight", f.by_period ? "period" : "samples"},
                         {"total", total},
                         {"samples", p.sample_count()}},
                        std::move(sp));
}

namespace {

std::string function_key(std::string_view name, std::string_view module) {
    std::string k(name);
    k.push_back('\x1f');
    k.append(module);
    return k;
}

} // namespace

double pct(std::uint64_t part, std::uint64_t whole) {
    return whole ? 100.0 * static_cast<double>(part) / static_cast<double>(whole) : 0.0;
}

std::string collapsed_module_name(std::string_view module) {
    if (module.starts_with('['))
        return std::string(module);
    const auto slash = module.rfind('/');
    return "[" + std::string(slash == std::string_view::npos ? module : module.substr(slash + 1)) +
           "]";
}

namespace {

// A call tree to shape as JSON: each node's frame, weight (inclusive), self weight and
// inclusive sample count, and its children; node 0 is the root.
struct call_tree {
    std::vector<std::uint32_t> frame; // frame of node n (unused for the root)
    std::vector<std::uint64_t> value, self, samples;
    node_children kids;
};

call_tree pruned_tree(const profile& p, const std::vector<std::uint64_t>& self,
                      const std::vector<std::uint64_t>& self_samples, const stack_shaper& shape);

// The function table of the stacks as `shape` keeps them (plain: the profile's own).
function_table shaped_functions(const profile& p, const view_filter& f, const stack_shaper& shape) {
    if (shape.plain())
        return functions(p, f);
    auto self = node_self_weights(p, f);
    shape.keep_only_kept(self);
    function_table table;
    for (const auto w : self)
        table.total_weight += w;
    const auto t = pruned_tree(p, self, self, shape);
    table.rows = tree_functions(shape.frame_count(), t.frame, t.self, t.value, t.kids);
    return table;
}

} // namespace

void say_shape(json::object& o, const tree_shape& shape) {
    if (shape.collapse_recursion)
        o["collapse_recursion"] = true;
    if (!shape.focus.empty())
        o["focus"] = shape.focus;
    auto names = [&](std::string_view key, const std::vector<std::string>& list) {
        if (list.empty())
            return;
        json::array a(o.storage());
        for (const auto& name : list)
            a.emplace_back(name);
        o[key] = std::move(a);
    };
    names("hide", shape.hide);
    names("drop", shape.drop);
    names("collapse", shape.collapse);
}

std::optional<json::value> functions_json(const profile& p, const view_filter& f, std::size_t limit,
                                          const json::storage_ptr& sp, const tree_shape& shape) {
    const stack_shaper shaper(p, shape);
    if (shaper.focus_missing())
        return std::nullopt;
    const auto t = shaped_functions(p, f, shaper);
    json::object o = view_header(p, f, t.total_weight, sp);
    json::array rows(sp);
    rows.reserve(std::min(limit, t.rows.size()));
    for (const auto& r : t.rows) {
        if (rows.size() >= limit)
            break;
        rows.push_back(json::object({{"name", shaper.name(r.frame)},
                                     {"module", shaper.module(r.frame)},
                                     {"self", r.self},
                                     {"total", r.total},
                                     {"self_pct", pct(r.self, t.total_weight)},
                                     {"total_pct", pct(r.total, t.total_weight)}},
                                    sp));
    }
    o["functions"] = std::move(rows);
    say_shape(o, shape);
    return o;
}

bool sortable_function_field(std::string_view field) {
    static constexpr std::string_view fields[] = {
        "self",           "total",  "self_pct",          "total_pct",
        "name",           "module", "baseline_self_pct", "delta_self_pct",
        "delta_total_pct"};
    return std::find(std::begin(fields), std::end(fields), field) != std::end(fields);
}

namespace {

char fold(char c) {
    return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c;
}

} // namespace

std::string folded(std::string_view text) {
    std::string out;
    out.reserve(text.size());
    for (const char c : text)
        out += fold(c);
    return out;
}

bool holds_folded(std::string_view text, std::string_view needle) {
    return std::search(text.begin(), text.end(), needle.begin(), needle.end(),
                       [](char a, char b) { return fold(a) == b; }) != text.end();
}

namespace {

std::string_view text_of(const json::object& row, std::string_view key) {
    const auto* v = row.if_contains(key);
    return v && v->is_string() ? std::string_view(v->get_string()) : std::string_view();
}

} // namespace

void page_functions(json::object& body, const function_page& page) {
    auto* list = body.if_contains("functions");
    if (!list || !list->is_array())
        return;
    json::array& rows = list->get_array();
    const std::size_t count = rows.size();
    const std::string needle = folded(page.match);
    // The rows kept, by index: matched, then ordered; the array is rebuilt from them once.
    std::vector<std::uint32_t> keep;
    keep.reserve(count);
    for (std::uint32_t i = 0; i < count; ++i) {
        const auto& row = rows[i].as_object();
        if (needle.empty() || holds_folded(text_of(row, "name"), needle) ||
            holds_folded(text_of(row, "module"), needle))
            keep.push_back(i);
    }
    const std::size_t matched = keep.size();
    const bool textual = page.sort == "name" || page.sort == "module";
    const auto number = [&](std::uint32_t i) -> std::optional<double> {
        const auto* v = rows[i].as_object().if_contains(page.sort);
        if (!v || !v->is_number())
            return std::nullopt;
        return v->to_number<double>();
    };
    std::stable_sort(keep.begin(), keep.end(), [&](std::uint32_t a, std::uint32_t b) {
        if (textual) {
            const auto x = text_of(rows[a].as_object(), page.sort);
            const auto y = text_of(rows[b].as_object(), page.sort);
            return page.descending ? y < x : x < y;
        }
        const auto x = number(a), y = number(b);
        if (!x || !y)
            return x.has_value() && !y.has_value(); // rows without the field last
        return page.descending ? *y < *x : *x < *y;
    });
    const std::size_t first = std::min(page.offset, keep.size());
    const std::size_t last = first + std::min(page.limit, keep.size() - first);
    json::array out(rows.storage());
    out.reserve(last - first);
    for (std::size_t k = first; k < last; ++k)
        out.push_back(std::move(rows[keep[k]]));
    rows = std::move(out);
    body["matched"] = matched;
    body["count"] = count;
    body["offset"] = first;
}

namespace {

node_children children_from_parents(const std::vector<std::uint32_t>& parent) {
    node_children c;
    c.offset.assign(parent.size() + 1, 0);
    for (std::size_t n = 1; n < parent.size(); ++n)
        ++c.offset[parent[n] + 1];
    for (std::size_t n = 1; n < c.offset.size(); ++n)
        c.offset[n] += c.offset[n - 1];
    c.child.resize(parent.size() ? parent.size() - 1 : 0);
    std::vector<std::uint32_t> fill(c.offset.begin(), c.offset.end() - 1);
    for (std::uint32_t n = 1; n < parent.size(); ++n)
        c.child[fill[parent[n]]++] = n;
    return c;
}

// A tree rebuilt from every weighted stack as `shape` keeps it (see stack_shaper::walk):
// with a focus, cut above its outermost frame; root first, or leaf first when inverted (each
// node's children then its callers). `callers` (with a focus): each stack from the outermost
// focus frame out to the root instead, the focus first — who calls it, as a tree.
call_tree reshaped_tree(const std::vector<std::uint64_t>& self,
                        const std::vector<std::uint64_t>& self_samples, const stack_shaper& shape,
                        bool inverted, bool callers) {
    call_tree t;
    std::vector<std::uint32_t> parent{0};
    t.frame.push_back(profile::no_frame);
    t.value.push_back(0);
    t.self.push_back(0);
    t.samples.push_back(0);
    std::unordered_map<std::uint64_t, std::uint32_t> index; // (parent << 32 | frame) -> node
    std::vector<std::uint32_t> stack;                       // leaf first
    for (std::uint32_t n = 0; n < self.size(); ++n) {
        const auto w = self[n], k = self_samples[n];
        if (!w && !k)
            continue;
        const auto cut = shape.walk(n, stack); // frames kept: stack[0, cut)
        if (shape.focused() && !cut)
            continue; // not through the focused function
        if (callers)
            stack.erase(stack.begin(), stack.begin() + static_cast<std::ptrdiff_t>(cut - 1));
        else
            stack.resize(cut);
        std::uint32_t cur = 0;
        t.value[0] += w;
        t.samples[0] += k;
        auto step = [&](std::uint32_t frame) {
            const auto key = (std::uint64_t{cur} << 32) | frame;
            auto [it, fresh] = index.try_emplace(key, static_cast<std::uint32_t>(parent.size()));
            if (fresh) {
                parent.push_back(cur);
                t.frame.push_back(frame);
                t.value.push_back(0);
                t.self.push_back(0);
                t.samples.push_back(0);
            }
            cur = it->second;
            t.value[cur] += w;
            t.samples[cur] += k;
        };
        if (inverted || callers)
            std::for_each(stack.begin(), stack.end(), step);
        else
            std::for_each(stack.rbegin(), stack.rend(), step);
        t.self[cur] += w; // the last frame placed: the leaf, or the outermost for callers
    }
    if (inverted && !callers) {
        // Bottom-up, all of a node's weight is the sampled function's own time that came
        // along that path: its self is its value (a root row's self is the function's).
        t.self = t.value;
        t.self[0] = 0;
    }
    t.kids = children_from_parents(parent);
    return t;
}

// The same, root first, in one sweep over the trie (a node's id is larger than its
// parent's): each node maps to the reshaped node of its parent's image plus its own frame's
// image, or to its parent's image when that frame is dropped or merges into the same frame
// above it; with a focus, nothing before the outermost focus frame is kept. O(nodes),
// whatever the stacks' depth.
call_tree pruned_tree(const profile& p, const std::vector<std::uint64_t>& self,
                      const std::vector<std::uint64_t>& self_samples, const stack_shaper& shape) {
    constexpr std::uint32_t none = 0xFFFFFFFFU;
    const auto n = static_cast<std::uint32_t>(p.node_count());
    std::vector<std::uint32_t> image(n, none), parent{0};
    std::vector<char> through(n, 0); // the path holds a focus frame
    image[0] = 0;
    call_tree t;
    t.frame.push_back(profile::no_frame);
    std::unordered_map<std::uint64_t, std::uint32_t> index; // (parent << 32 | frame) -> node
    auto child = [&](std::uint32_t up, std::uint32_t frame) {
        const auto key = (std::uint64_t{up} << 32) | frame;
        auto [it, fresh] = index.try_emplace(key, static_cast<std::uint32_t>(parent.size()));
        if (fresh) {
            parent.push_back(up);
            t.frame.push_back(frame);
        }
        return it->second;
    };
    for (std::uint32_t m = 1; m < n; ++m) {
        const auto up = p.node_parent(m), frame = shape.image(p.node_frame(m));
        const bool kept = frame != stack_shaper::dropped;
        if (image[up] == none && !(kept && shape.is_focus(frame)))
            continue; // before any focus frame: not kept
        if (!kept || (image[up] != none && t.frame[image[up]] == frame && shape.merges(frame))) {
            image[m] = image[up];
            through[m] = through[up];
        } else if (!shape.focused() || through[up]) {
            image[m] = child(image[up], frame);
            through[m] = 1;
        } else if (shape.is_focus(frame)) {
            image[m] = child(0, frame); // the outermost call: the root's child
            through[m] = 1;
        }
    }
    t.self.assign(parent.size(), 0);
    t.samples.assign(parent.size(), 0);
    for (std::uint32_t m = 0; m < self.size(); ++m)
        if (image[m] != none && (!shape.focused() || through[m])) {
            t.self[image[m]] += self[m];
            t.samples[image[m]] += self_samples[m];
        }
    t.value = t.self;
    for (std::size_t x = parent.size(); x-- > 1;) {
        t.value[parent[x]] += t.value[x];
        t.samples[parent[x]] += t.samples[x];
    }
    t.kids = children_from_parents(parent);
    return t;
}

json::value tree_json(const profile& p, const view_filter& f, const call_tree& t,
                      const stack_shaper& names, int max_depth, double min_pct,
                      const json::storage_ptr& sp, std::uint64_t total) {
    const auto min_value = static_cast<std::uint64_t>(static_cast<double>(total) * min_pct / 100.0);
    json::object o = view_header(p, f, total, sp);
    // Iterative build: deep stacks cannot exhaust the call stack.
    json::object root({{"name", "all"},
                       {"module", ""},
                       {"value", t.value[0]},
                       {"self", t.self[0]},
                       {"samples", t.samples[0]}},
                      sp);
    struct item {
        std::uint32_t node;
        json::object* out;
        int depth;
    };
    std::vector<item> todo{{0, &root, 0}};
    std::uint64_t small_frames = 0, small_weight = 0; // left out for min_pct, with what is below
    while (!todo.empty()) {
        const item it = todo.back();
        todo.pop_back();
        json::array& children = (*it.out)["children"].emplace_array();
        if (it.depth >= max_depth)
            continue;
        std::vector<std::uint32_t> order(t.kids.child.begin() + t.kids.offset[it.node],
                                         t.kids.child.begin() + t.kids.offset[it.node + 1]);
        std::erase_if(order, [&](std::uint32_t c) {
            if (t.value[c] && t.value[c] < min_value) {
                ++small_frames;
                small_weight += t.value[c];
            }
            return !t.value[c] || t.value[c] < min_value;
        });
        std::sort(order.begin(), order.end(),
                  [&](std::uint32_t a, std::uint32_t b) { return t.value[a] > t.value[b]; });
        for (const auto c : order)
            children.push_back(json::object({{"name", names.name(t.frame[c])},
                                             {"module", names.module(t.frame[c])},
                                             {"value", t.value[c]},
                                             {"self", t.self[c]},
                                             {"samples", t.samples[c]}},
                                            sp));
        // Children were pushed in order; recurse into each (addresses are stable now).
        for (std::size_t i = 0; i < order.size(); ++i)
            todo.push_back({order[i], &children[i].as_object(), it.depth + 1});
    }
    o["root"] = std::move(root);
    o["small_frames_hidden"] = small_frames;
    o["small_weight_hidden"] = small_weight;
    return o;
}

} // namespace

namespace {

// A view's call tree as a shape makes it (see flamegraph_json), with the view's whole weight.
struct shaped_tree {
    call_tree tree;
    std::uint64_t total = 0;
    bool callers = false;
};

std::optional<shaped_tree> make_tree(const profile& p, const view_filter& f,
                                     const stack_shaper& shaper, const tree_shape& shape) {
    if (shaper.focus_missing())
        return std::nullopt;
    shaped_tree out;
    auto self = node_self_weights(p, f);
    view_filter by_samples = f;
    by_samples.by_period = false;
    shaper.keep_only_kept(self);
    auto self_samples = f.by_period ? node_self_weights(p, by_samples) : self;
    if (f.by_period)
        shaper.keep_only_kept(self_samples);
    for (const auto w : self)
        out.total += w;
    out.callers = shape.callers && shaper.focused();
    if (shape.inverted || out.callers) {
        out.tree = reshaped_tree(self, self_samples, shaper, shape.inverted, out.callers);
    } else if (!shaper.plain()) {
        out.tree = pruned_tree(p, self, self_samples, shaper);
    } else {
        call_tree& t = out.tree;
        t.value = inclusive_weights(p, self);
        t.samples = f.by_period ? inclusive_weights(p, std::move(self_samples)) : t.value;
        t.self = std::move(self);
        t.frame.resize(p.node_count());
        for (std::uint32_t n = 0; n < p.node_count(); ++n)
            t.frame[n] = p.node_frame(n);
        t.kids = children_of(p);
    }
    return out;
}

} // namespace

std::optional<json::value> flamegraph_json(const profile& p, const view_filter& f, int max_depth,
                                           double min_pct, const json::storage_ptr& sp,
                                           const tree_shape& shape) {
    const stack_shaper shaper(p, shape);
    const auto made = make_tree(p, f, shaper, shape);
    if (!made)
        return std::nullopt;
    auto o = tree_json(p, f, made->tree, shaper, max_depth, min_pct, sp, made->total);
    auto& obj = o.as_object();
    if (shape.inverted && !made->callers)
        obj["inverted"] = true;
    if (made->callers)
        obj["callers"] = true;
    say_shape(obj, shape);
    return o;
}

std::optional<json::value> sandwich_json(const profile& p, const view_filter& f,
                                         std::string_view name, std::string_view module,
                                         const json::storage_ptr& sp) {
    std::vector<std::uint32_t> frames;
    for (std::uint32_t i = 0; i < p.frame_count(); ++i)
        if (p.symbol(i) == name && (module.empty() || p.module(i) == module))
            frames.push_back(i);
    const auto t = sandwich(p, f, frames);
    if (!t.total)
        return std::nullopt;
    json::object o = view_header(p, f, t.total_weight, sp);
    o["function"] = json::object({{"name", name},
                                  {"module", frames.size() == 1 ? p.module(frames[0]) : module},
                                  {"self", t.self},
                                  {"total", t.total},
                                  {"self_pct", pct(t.self, t.total_weight)},
                                  {"total_pct", pct(t.total, t.total_weight)}},
                                 sp);
    // The heaviest 500 of each (a leaf called from 50 000 functions would otherwise answer
    // megabytes no one reads); "callers_more"/"callees_more" count the rest.
    constexpr std::size_t most = 500;
    auto rows = [&](const std::vector<function_row>& list, bool with_self) {
        json::array out(sp);
        for (const auto& r : list) {
            if (out.size() == most)
                break;
            json::object row({{"name", p.symbol(r.frame)},
                              {"module", p.module(r.frame)},
                              {"total", r.total},
                              {"total_pct", pct(r.total, t.total_weight)}},
                             sp);
            if (with_self) {
                row["self"] = r.self;
                row["self_pct"] = pct(r.self, t.total_weight);
            }
            out.push_back(std::move(row));
        }
        return out;
    };
    o["callers"] = rows(t.callers, false);
    o["callees"] = rows(t.callees, true);
    o["callers_more"] = t.callers.size() - std::min(t.callers.size(), most);
    o["callees_more"] = t.callees.size() - std::min(t.callees.size(), most);
    return json::value(std::move(o));
}

std::optional<json::value> addresses_json(const profile& p, const view_filter& f,
                                          std::string_view name, std::string_view module,
                                          std::size_t limit, const json::storage_ptr& sp) {
    std::vector<bool> mine(p.frame_count(), false);
    bool any = false;
    for (std::uint32_t i = 0; i < p.frame_count(); ++i)
        if (p.symbol(i) == name && (module.empty() || p.module(i) == module))
            any = mine[i] = true;
    if (!any)
        return std::nullopt;
    const auto weights = site_self_weights(p, f);
    std::uint64_t total = 0, self = 0, unplaced = 0;
    std::map<std::pair<std::uint32_t, std::uint32_t>, std::uint64_t> by_address; // frame, offset
    for (std::uint32_t s = 0; s < weights.size(); ++s) {
        total += weights[s];
        if (!weights[s] || !mine[p.site_frame(s)])
            continue;
        self += weights[s];
        if (p.site_offset(s) == profile::no_offset)
            unplaced += weights[s];
        else
            by_address[{p.site_frame(s), p.site_offset(s)}] += weights[s];
    }
    std::vector<std::pair<std::pair<std::uint32_t, std::uint32_t>, std::uint64_t>> rows(
        by_address.begin(), by_address.end());
    std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) {
        return a.second != b.second ? a.second > b.second : a.first < b.first;
    });
    json::object o = view_header(p, f, total, sp);
    o["function"] = name;
    o["self"] = self;
    o["self_pct"] = pct(self, total);
    o["unplaced"] = unplaced;
    o["addresses_total"] = rows.size();
    json::array out(sp);
    char hex[16];
    for (std::size_t i = 0; i < rows.size() && i < limit; ++i) {
        const auto [frame, offset] = rows[i].first;
        std::snprintf(hex, sizeof hex, "+0x%x", offset);
        // A nameless frame's offset is its address in the module; a named one's, into it.
        std::string label;
        if (name == "[unknown]") {
            const auto m = p.module(frame);
            label = std::string(m.substr(m.rfind('/') + 1)) + hex;
        } else {
            label = std::string(name) + hex;
        }
        out.push_back(json::object({{"label", label},
                                    {"module", p.module(frame)},
                                    {"offset", offset},
                                    {"self", rows[i].second},
                                    {"self_pct", pct(rows[i].second, total)}},
                                   sp));
    }
    o["addresses"] = std::move(out);
    return json::value(std::move(o));
}

baseline_shares baseline_of(const profile& p, const view_filter& f, const tree_shape& shape,
                            double min_pct) {
    baseline_shares b;
    const stack_shaper shaper(p, shape);
    if (!shaper.focus_missing()) {
        const auto t = shaped_functions(p, f, shaper);
        for (const auto& r : t.rows) {
            const auto name = shaper.name(r.frame), module = shaper.module(r.frame);
            b.functions[function_key(name, module)] = {std::string(name), std::string(module),
                                                       pct(r.self, t.total_weight),
                                                       pct(r.total, t.total_weight)};
        }
    }
    b.nodes.emplace_back();
    if (const auto made = make_tree(p, f, shaper, shape)) {
        const auto& t = made->tree;
        const auto keep = static_cast<double>(made->total) * min_pct / 1000.0;
        b.nodes[0].pct = pct(t.value[0], made->total);
        std::vector<std::pair<std::uint32_t, std::uint32_t>> todo{{0, 0}}; // tree node, b node
        while (!todo.empty()) {
            const auto [n, at] = todo.back();
            todo.pop_back();
            for (auto k = t.kids.offset[n]; k < t.kids.offset[n + 1]; ++k) {
                const auto c = t.kids.child[k];
                if (!t.value[c] || static_cast<double>(t.value[c]) < keep)
                    continue;
                const auto id = static_cast<std::uint32_t>(b.nodes.size());
                b.nodes.push_back({std::string(shaper.name(t.frame[c])),
                                   std::string(shaper.module(t.frame[c])),
                                   pct(t.value[c], made->total),
                                   {}});
                b.nodes[at].children.push_back(id);
                todo.emplace_back(c, id);
            }
        }
    }
    b.samples = view_samples(p, f);
    return b;
}

std::uint64_t view_samples(const profile& p, const view_filter& f) {
    std::uint64_t n = 0;
    for_each_sample(p, f, [&](const sample_row& s) { n += s.count; });
    return n;
}

namespace {

// Points within which two shares (percentages of n1 and n0 samples) differ by chance alone,
// 95 times in 100: 1.96 standard errors of the difference of two proportions, both drawn from
// the one share they have together (the pooled test: a function with a few samples on one
// side and none on the other is not called a change; a share of 0 has no spread of its own).
double noise_points(double now_pct, std::uint64_t n1, double base_pct, std::uint64_t n0) {
    if (!n1 || !n0)
        return 100.0;
    const double a = static_cast<double>(n1), b = static_cast<double>(n0);
    const double p = std::clamp((now_pct * a + base_pct * b) / (100.0 * (a + b)), 0.0, 1.0);
    return 196.0 * std::sqrt(p * (1 - p) * (1 / a + 1 / b));
}

} // namespace

void apply_baseline(json::value& body, const baseline_shares& b, const std::string& id,
                    std::uint64_t n1, double min_pct) {
    auto& o = body.as_object();
    const json::storage_ptr sp = o.storage();
    o["baseline"] = id;
    o["baseline_samples"] = b.samples;
    auto compare = [&](json::object& r, std::string_view key, double now, double base) {
        r[std::string("baseline_") + std::string(key)] = base;
        r[std::string("delta_") + std::string(key)] = now - base;
        r[std::string("noise_") + std::string(key)] = noise_points(now, n1, base, b.samples);
    };
    if (auto* fns = o.if_contains("functions")) {
        auto& rows = fns->as_array();
        std::unordered_set<std::string> seen;
        for (auto& row : rows) {
            auto& r = row.as_object();
            auto key = function_key(r.at("name").as_string(), r.at("module").as_string());
            const auto it = b.functions.find(key);
            const bool found = it != b.functions.end();
            compare(r, "self_pct", r.at("self_pct").as_double(), found ? it->second.self : 0.0);
            compare(r, "total_pct", r.at("total_pct").as_double(), found ? it->second.total : 0.0);
            seen.insert(std::move(key));
        }
        // What the baseline has and this view not: vanished, a row of its own.
        for (const auto& [key, share] : b.functions) {
            if (seen.count(key))
                continue;
            json::object r({{"name", share.name},
                            {"module", share.module},
                            {"self", 0},
                            {"total", 0},
                            {"self_pct", 0.0},
                            {"total_pct", 0.0}},
                           sp);
            compare(r, "self_pct", 0.0, share.self);
            compare(r, "total_pct", 0.0, share.total);
            rows.push_back(std::move(r));
        }
    }
    auto* root = o.if_contains("root");
    if (!root || b.nodes.empty())
        return;
    const double total = static_cast<double>(o.at("total").to_number<std::uint64_t>());
    const auto flame_pct = [&](const json::object& node) {
        return total ? 100.0 * static_cast<double>(node.at("value").to_number<std::uint64_t>()) /
                           total
                     : 0.0;
    };
    // A path the baseline has alone: a node of value 0, with its children as far as they
    // reach min_pct of the baseline (vanished too: this view has nothing below it).
    const auto vanished_node = [&](std::uint32_t at) {
        const auto& bn = b.nodes[at];
        json::object node({{"name", bn.name},
                           {"module", bn.module},
                           {"value", 0},
                           {"self", 0},
                           {"samples", 0},
                           {"baseline_pct", bn.pct},
                           {"delta_pct", -bn.pct},
                           {"noise_pct", noise_points(0.0, n1, bn.pct, b.samples)}},
                          sp);
        node["children"].emplace_array();
        return node;
    };
    const auto vanished = [&](std::uint32_t at) {
        json::value top = vanished_node(at);
        std::vector<std::pair<json::object*, std::uint32_t>> todo{{&top.as_object(), at}};
        while (!todo.empty()) {
            const auto [node, from] = todo.back();
            todo.pop_back();
            auto& kids = (*node)["children"].as_array();
            for (const auto c : b.nodes[from].children)
                if (b.nodes[c].pct >= min_pct)
                    kids.push_back(vanished_node(c));
            // Filled once, never grown again: the children's addresses hold.
            for (std::size_t i = 0; i < kids.size(); ++i)
                todo.emplace_back(&kids[i].as_object(), b.nodes[from].children[i]);
        }
        return top;
    };
    struct item {
        json::object* node;
        std::optional<std::uint32_t> base; // the baseline's node at the same path
    };
    {
        auto& top = root->as_object();
        const double now = flame_pct(top), was = b.nodes[0].pct;
        top["baseline_pct"] = was;
        top["delta_pct"] = now - was;
        top["noise_pct"] = noise_points(now, n1, was, b.samples);
    }
    std::vector<item> todo{{&root->as_object(), 0U}};
    std::unordered_map<std::string_view, std::uint32_t> by_name;
    std::vector<std::optional<std::uint32_t>> twins;
    while (!todo.empty()) {
        const auto [node, base] = todo.back();
        todo.pop_back();
        // A name twice under one node (one per module): the heavier one is its match.
        by_name.clear();
        if (base)
            for (const auto c : b.nodes[*base].children)
                by_name.try_emplace(b.nodes[c].name, c);
        auto& children = (*node)["children"].as_array();
        const std::size_t present = children.size();
        twins.assign(present, std::nullopt);
        for (std::size_t i = 0; i < present; ++i) {
            auto& child = children[i].as_object();
            const auto it = by_name.find(std::string_view(child.at("name").as_string()));
            if (it != by_name.end()) {
                twins[i] = it->second;
                by_name.erase(it);
            }
            const double now = flame_pct(child), was = twins[i] ? b.nodes[*twins[i]].pct : 0.0;
            child["baseline_pct"] = was;
            child["delta_pct"] = now - was;
            child["noise_pct"] = noise_points(now, n1, was, b.samples);
        }
        if (base)
            for (const auto c : b.nodes[*base].children)
                if (const auto it = by_name.find(b.nodes[c].name);
                    it != by_name.end() && it->second == c && b.nodes[c].pct >= min_pct)
                    children.push_back(vanished(c));
        // The array is whole now: the addresses of its elements hold.
        for (std::size_t i = 0; i < present; ++i)
            todo.push_back({&children[i].as_object(), twins[i]});
    }
}

} // namespace collector
