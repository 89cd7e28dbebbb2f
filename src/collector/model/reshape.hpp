// A view's samples as a profile of their own: what an export writes when the view is reshaped
// or filtered by text, so the file holds what the screen shows.
#pragma once

#include "collector/model/view_json.hpp"

#include <memory>
#include <string_view>

namespace collector {

struct reshaped_view {
    profile prof;
    view_filter filter; // of `prof`: its one event, the weight asked for
};

// The rows `f` keeps (event, thread, window), each with its stack as `shape` makes it (focus,
// hidden functions, collapsed recursion and modules; not its direction), and with `match`
// only the stacks holding a frame whose name or module holds it (ASCII case folded). Times,
// threads, periods and the instruction offsets of the frames kept stay as recorded. nullptr
// when the focus names no function.
std::unique_ptr<reshaped_view> reshape(const profile& p, const view_filter& f,
                                       const tree_shape& shape, std::string_view match);

} // namespace collector
