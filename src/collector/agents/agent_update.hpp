// Updating an agent to this collector's build for its architecture (dist/ or the agents
// folder, each build with its .sha256 and .version) when it is later than the agent's: the
// offer (signed with --agent-update-key when the collector has one; an agent pinned over TLS
// takes it unsigned too), the pieces, then the apply. The agent checks it, replaces itself and
// restarts; one that dials in comes back by itself, a dialled one is dialled again.
#pragma once

#include "collector/result.hpp"

#include <boost/asio/awaitable.hpp>
#include <boost/json/object.hpp>

#include <memory>
#include <string>

namespace collector {
class agent_link;
struct agent_binary;
struct app_context;
} // namespace collector

namespace collector::agents {

// The build this collector has for the agent's architecture when it is later than the
// agent's version; null otherwise.
const agent_binary* offered_update(const agent_link& link, const app_context& app);
// Why an update cannot be pushed to this agent, as the user should read it ("" when it can).
std::string update_blocked(const agent_link& link, const app_context& app);

// The whole update: {"ok", "from", "version", "id" (the target now: a dialled agent's new
// one), "error"?} — ok false when the agent refused it (the old agent keeps running). A
// failure when there is nothing to offer (no_update, update_refused: 409) or the build cannot
// be read (io: 500).
boost::asio::awaitable<result<boost::json::object>> update_agent(app_context& app,
                                                                 std::shared_ptr<agent_link> link);

} // namespace collector::agents
