// perfwire-agent's entry point after flag parsing.
#pragma once

#include "agent/options.hpp"

namespace agent {

// Runs the mode chosen in `c` until it ends or SIGINT/SIGTERM arrives; returns the exit code.
int run(const config& c);

} // namespace agent
