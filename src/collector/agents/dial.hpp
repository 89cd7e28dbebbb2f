// Dialling an agent that listens (the Live Debug wizard, and again after its update): the
// connection, TLS pinned to the key its owner read off the device (a man in the middle
// presents another and is refused before the pairing code is sent), then an agent_link that
// serves it like an inbound one.
#pragma once

#include "collector/result.hpp"

#include <boost/asio/awaitable.hpp>

#include <optional>
#include <string>

namespace collector {
struct app_context;
}

namespace collector::agents {

struct dial_request {
    std::string host, port;
    std::optional<std::string> token; // the pairing code (none: the collector's --token)
    std::optional<std::string> pin;   // the agent's key: TLS, refusing any other
};

// The new target's id once the connection is up and the agent accepted the pairing code; a
// failure (connect_failed, 502) that says why otherwise.
boost::asio::awaitable<result<std::string>> dial(app_context& app, dial_request to);

// A dialled agent's link dropped mid-run (its session parked in the run book under `run_key`):
// dialled again, after 1, 2, 4 … 30 s, with the same address, code and key, until its run is
// back (the agent's hello names it), it was given up, or the collector stops.
void redial_for_run(app_context& app, dial_request to, std::string run_key);

} // namespace collector::agents
