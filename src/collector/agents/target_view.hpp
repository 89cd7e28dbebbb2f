// A target as the API and the browsers see it (docs/api.md, GET /api/targets): what the agent
// said of itself, what it is doing, its link, and the update this collector can offer it.
#pragma once

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

} // namespace collector::agents
