// perfwire-collector: flags -> config -> run. All logic lives in collector_core.
#include "collector/app.hpp"
#include "collector/options.hpp"

#include <cstdlib>
#include <iostream>

int main(int argc, char** argv) {
    auto parsed = collector::parse_command_line(argc, argv, std::getenv("PERFWIRE_TOKEN"),
                                                std::getenv("HOME"));
    if (auto* done = std::get_if<collector::exit_now>(&parsed)) {
        (done->code == 0 ? std::cout : std::cerr) << done->output;
        return done->code;
    }
    return collector::run(std::get<collector::config>(parsed));
}
