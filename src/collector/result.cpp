#include "collector/result.hpp"

#include <ostream>
#include <stdexcept>

namespace collector {

std::ostream& operator<<(std::ostream& os, const failure& f) {
    return os << f.code << ": " << f.message;
}

void throw_exception_from_error(const failure& f, const boost::source_location&) {
    throw std::runtime_error(f.code + ": " + f.message);
}

} // namespace collector
