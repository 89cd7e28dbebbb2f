// Test helper: the programs under test, those this suite was built with or those named by
// PERFWIRE_TEST_COLLECTOR / PERFWIRE_TEST_AGENT (the test command runs the collector and agent
// of a ThreadSanitizer build under this suite that way).
#pragma once

#include <cstdlib>
#include <string>

namespace test_support {

inline std::string program(const char* env, const char* built) {
    const char* v = std::getenv(env);
    return v && *v ? v : built;
}

inline std::string collector_bin() {
    return program("PERFWIRE_TEST_COLLECTOR", PERFWIRE_COLLECTOR_BIN);
}

inline std::string agent_bin() {
    return program("PERFWIRE_TEST_AGENT", PERFWIRE_AGENT_BIN);
}

} // namespace test_support
