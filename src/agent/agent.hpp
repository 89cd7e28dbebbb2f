// perfwire-agent's entry point after flag parsing.
#pragma once

#include "agent/options.hpp"

namespace agent {

// Runs the mode chosen in `c` until it ends or SIGINT/SIGTERM arrives; returns the exit code.
int run(const config& c);

// What run() returns when a new build has replaced the agent's executable (EX_TEMPFAIL: a
// supervisor that restarts on failure starts the new build too).
inline constexpr int restart_exit_code = 75;

// Starts the executable at c.self_path with the same command line (through c.launcher when
// given), replacing this process; returns restart_exit_code only if that fails.
int restart(const config& c);

} // namespace agent
