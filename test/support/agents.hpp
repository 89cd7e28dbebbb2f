// Test helper: the two agent flavours, started the way a user starts them. The C++ agent is the
// built binary; the Python agent is src/agent/python/perfwire_agent.py run by the Debian
// interpreter (the one python3-zstandard is installed for). A test that holds for every agent
// takes its flavour from GENERATE(agent_flavour::cpp, agent_flavour::python).
#pragma once

#include "support/spawn.hpp"

#include <memory>
#include <ostream>
#include <string>
#include <vector>

namespace test_support {

enum class agent_flavour { cpp, python };

inline const char* name_of(agent_flavour f) {
    return f == agent_flavour::cpp ? "C++ agent" : "Python agent";
}

inline std::ostream& operator<<(std::ostream& out, agent_flavour f) {
    return out << name_of(f);
}

inline std::unique_ptr<spawned> start_agent(agent_flavour f, std::vector<std::string> args,
                                            const std::vector<std::string>& env = {}) {
    if (f == agent_flavour::cpp)
        return std::make_unique<spawned>(PERFWIRE_AGENT_BIN, args, "/dev/null", env);
    args.insert(args.begin(), PERFWIRE_PYTHON_AGENT);
    return std::make_unique<spawned>(PERFWIRE_PYTHON, args, "/dev/null", env);
}

} // namespace test_support
