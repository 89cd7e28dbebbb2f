// GET /api/sessions/ID[/VIEW]: a session's detail, views and exports (docs/api.md). The query
// is parsed here; the view is computed on the session's strand (a baseline's shares on the
// baseline's), shaped by model/view_json.hpp and export/exports.hpp.
#pragma once

#include "collector/http/routes.hpp"
#include "collector/http/target.hpp"

#include <memory>
#include <string_view>

namespace collector {

struct session_entry;

// view: "" (the detail), functions, flamegraph, threads, metrics, source or export (?format=).
asio::awaitable<http_response> session_view(app_context& app, const http_request& req,
                                            const target_url& url, std::shared_ptr<session_entry> e,
                                            std::string_view view);

} // namespace collector
