// A target as the API and the browsers see it (docs/api.md, GET /api/targets): what the agent
// said of itself, what it is doing, its link, and the update this collector can offer it.
#pragma once

#include "collector/result.hpp"
#include "protocol/messages.hpp"

#include <boost/json/object.hpp>

namespace collector {
class agent_link;
struct app_context;
} // namespace collector

namespace collector::agents {

boost::json::object target_json(const agent_link& link, const app_context& app);
// The device's platform as its hello said it (also written into each session's metadata).
boost::json::object platform_json(const protocol::hello& hello);
// What asks for a run, as a start's `origin` says it: {job, url, commit, branch, pipeline, by},
// strings of at most 512 bytes, no control characters. Anything else is refused with the reason.
result<boost::json::object> origin_of(const boost::json::value& v);

} // namespace collector::agents
