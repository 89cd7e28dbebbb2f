// The collector's status (GET /api/status, and the live stream's `status` events): its
// version, listeners, what it holds against its connection, memory and disk limits, the fleet
// store's state.
#pragma once

#include "collector/context.hpp"

#include <boost/json/object.hpp>

namespace collector {

boost::json::object status_json(const app_context& app);

} // namespace collector
