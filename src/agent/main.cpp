// perfwire-agent: flags -> config -> run. All logic lives in agent_core.
#include "agent/agent.hpp"
#include "agent/options.hpp"
#include "agent/update.hpp"

#include <cstdlib>
#include <iostream>

int main(int argc, char** argv) {
    auto parsed = agent::parse_command_line(argc, argv, std::getenv("PERFWIRE_TOKEN"),
                                            std::getenv("PERFWIRE_ENROLL_TOKEN"));
    if (auto* done = std::get_if<agent::exit_now>(&parsed)) {
        (done->code == 0 ? std::cout : std::cerr) << done->output;
        return done->code;
    }
    auto& cfg = std::get<agent::config>(parsed);
    cfg.self_path = agent::own_executable().string();
    const int code = agent::run(cfg);
    return code == agent::restart_exit_code ? agent::restart(cfg) : code;
}
