// This agent's version, as its hello and --version say it. Defined in version.cpp; a build
// that links its own definition before agent_core (the tests' "newer build") overrides it.
#pragma once

#include <string_view>

namespace agent {
std::string_view version() noexcept;
} // namespace agent
