// Test helper: the two agent flavours, started the way a user starts them. The C++ agent is the
// built binary; the Python agent is src/agent/python/perfwire_agent.py run by the Debian
// interpreter (the one python3-zstandard is installed for). A test that holds for every agent
// takes its flavour from each_agent().
#pragma once

#include "protocol/messages.hpp"
#include "support/fixtures.hpp"
#include "support/framing_peer.hpp"
#include "support/programs.hpp"
#include "support/spawn.hpp"

#include <catch2/catch.hpp>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <ostream>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
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
        return std::make_unique<spawned>(agent_bin(), args, "/dev/null", env);
    args.insert(args.begin(), PERFWIRE_PYTHON_AGENT);
    return std::make_unique<spawned>(PERFWIRE_PYTHON, args, "/dev/null", env);
}

// The demo workload, running for `seconds`.
inline std::unique_ptr<spawned> start_demo(double seconds) {
    auto demo = std::make_unique<spawned>(PERFWIRE_DEMO_BIN,
                                          std::vector<std::string>{std::to_string(seconds)});
    std::this_thread::sleep_for(std::chrono::milliseconds(200)); // let its threads start
    return demo;
}

// The flavour under test: a test case that calls this runs once with each. PERFWIRE_TEST_AGENTS=cpp
// runs the C++ agent's only (the sanitizer build's run: the Python agent is the same program in
// every build, run once by the first).
inline std::vector<agent_flavour> agent_flavours() {
    const char* only = std::getenv("PERFWIRE_TEST_AGENTS");
    if (only && std::string_view(only) == "cpp")
        return {agent_flavour::cpp};
    return {agent_flavour::cpp, agent_flavour::python};
}
inline agent_flavour each_agent() {
    return GENERATE(Catch::Generators::from_range(agent_flavours()));
}

// What `script` prints, run by the Python agent's interpreter with the agent importable as
// `import perfwire_agent as a` (done before it); a clean exit within a minute is required.
// The tests that hold the two agents to the same answers use it.
inline std::string python_agent_output(const std::string& script) {
    temp_dir dir;
    const auto out = dir.path / "out";
    spawned python(
        PERFWIRE_PYTHON,
        {"-c", "import sys; sys.path.insert(0, sys.argv[1]); import perfwire_agent as a\n" + script,
         std::filesystem::path(PERFWIRE_PYTHON_AGENT).parent_path().string()},
        out.string());
    REQUIRE(python.wait(std::chrono::seconds(60)) == 0);
    std::ifstream got(out);
    std::stringstream text;
    text << got.rdbuf();
    return text.str();
}

// The hello an agent sends first.
inline protocol::hello read_hello(framing_peer& peer) {
    auto f = peer.next(std::chrono::seconds(5));
    REQUIRE(f);
    REQUIRE(f->flag == protocol::frame_flag::response);
    auto h = protocol::parse_hello(f->payload);
    REQUIRE(h.has_value());
    return *h;
}

// A command's refusal: it must have been answered, and not ok.
inline std::string error_of(const std::optional<protocol::command_response>& r) {
    REQUIRE(r);
    CHECK_FALSE(r->ok);
    return r->error;
}

inline bool ok(const std::optional<protocol::command_response>& r) {
    return r && r->ok;
}

} // namespace test_support
