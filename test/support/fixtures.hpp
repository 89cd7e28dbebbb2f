// Reads committed fixtures (real captures) from test/<area>/fixtures/.
#pragma once

#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>

namespace test_support {

inline std::string fixture(const std::string& relative) {
    std::ifstream in(std::string(PERFWIRE_TEST_DIR) + "/" + relative, std::ios::binary);
    if (!in)
        throw std::runtime_error("missing fixture " + relative);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

} // namespace test_support
