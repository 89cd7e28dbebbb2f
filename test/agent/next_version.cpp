// The tests' "later build" of the agent: the same code under a later version, linked before
// agent_core so this definition is the one used.
#include "agent/version.hpp"

namespace agent {
std::string_view version() noexcept {
    return PERFWIRE_VERSION ".1";
}
} // namespace agent
