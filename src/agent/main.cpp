// perfwire-agent: flags -> config -> run. All logic lives in agent_core.
#include "agent/agent.hpp"
#include "agent/options.hpp"

#include <cstdlib>
#include <iostream>

int main(int argc, char** argv) {
    auto parsed = agent::parse_command_line(argc, argv, std::getenv("PERFWIRE_TOKEN"),
                                            std::getenv("PERFWIRE_ENROLL_TOKEN"));
    if (auto* done = std::get_if<agent::exit_now>(&parsed)) {
        (done->code == 0 ? std::cout : std::cerr) << done->output;
        return done->code;
    }
    return agent::run(std::get<agent::config>(parsed));
}
