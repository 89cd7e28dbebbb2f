// Test and benchmark helper: a field of /proc/PID/status in kB ("VmHWM:", "VmRSS:"), -1 when
// the process or the field is not there.
#pragma once

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>

namespace test_support {

inline long status_kb(int pid, const char* field) {
    std::ifstream in("/proc/" + std::to_string(pid) + "/status");
    for (std::string line; std::getline(in, line);)
        if (line.rfind(field, 0) == 0)
            return std::atol(line.c_str() + std::strlen(field));
    return -1;
}

} // namespace test_support
