#include "agent/version.hpp"

namespace agent {
std::string_view version() noexcept {
    return PERFWIRE_VERSION;
}
} // namespace agent
