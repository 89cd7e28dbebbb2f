// perfwire-collector's entry point after flag parsing.
#pragma once

#include "collector/options.hpp"

namespace collector {

// Serves agents and browsers until SIGINT/SIGTERM; returns the exit code.
int run(const config& c);

} // namespace collector
