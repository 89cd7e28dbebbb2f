#include "collector/log.hpp"

#include "collector/result.hpp"

#include <iostream>
#include <stdexcept>
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

std::ostream& operator<<(std::ostream& os, const failure& f) {
    return os << f.code << ": " << f.message;
}

void throw_exception_from_error(const failure& f, const boost::source_location&) {
    throw std::runtime_error(f.code + ": " + f.message);
}

} // namespace collector
