// Continuous profiling (--continuous): the agent profiles the whole system at a low rate
// whenever it is idle, and a user's run takes its place. Both workflows are written against a
// command_link, so they are tested without sockets.
#pragma once

#include "collector/agents/command_link.hpp"

#include <chrono>
#include <memory>

namespace collector::agents {

struct keeper_settings {
    unsigned hz = 0;      // --continuous's rate (0: no continuous profiling)
    unsigned chunk_s = 5; // a run's duration argument: the agent's chunks
    std::chrono::milliseconds ready_wait{60'000};    // between looks at a slow pairing
    std::chrono::milliseconds refused_pause{60'000}; // after a refused start
    std::chrono::milliseconds resume_pause{2'000};   // after a run ended (a user's may follow)
};

// Starts the agent whenever it is idle (it just connected, or a user's run ended), until the
// link closes. A refusal is said once in the log and asked again every refused_pause.
boost::asio::awaitable<void> keep_profiling(std::shared_ptr<command_link> link,
                                            keeper_settings settings);

// A command as a user asks it. A user's start takes the place of continuous profiling, which
// resumes when it ends: the continuous run is stopped first, undrained (perf script naming
// what is left of a whole system's samples can take tens of seconds on a busy device: its last
// moments are dropped, the user's run starts at once), and the start follows; a continuous
// start the agent answered first ("already profiling") is stopped in turn. All of it answers
// within takeover_deadline(). Any other command is sent as it is.
boost::asio::awaitable<protocol::command_response>
run_command(std::shared_ptr<command_link> link, std::string cmd, boost::json::object args);

} // namespace collector::agents
