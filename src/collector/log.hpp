// The collector's log: one line per event on stderr, "perfwire-collector: [peer] what".
#pragma once

#include <string_view>

namespace collector {

void log(std::string_view what);
void log(std::string_view who, std::string_view what);

} // namespace collector
