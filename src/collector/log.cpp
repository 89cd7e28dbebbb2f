#include "collector/log.hpp"

#include <iostream>
#include <string>

namespace collector {

void log(std::string_view what) {
    std::string line = "perfwire-collector: ";
    line += what;
    line += '\n';
    std::cerr << line; // one write: lines from the pool's threads do not interleave
}

void log(std::string_view who, std::string_view what) {
    std::string line = "[";
    line += who;
    line += "] ";
    line += what;
    log(line);
}

} // namespace collector
