// Test helper (the suite and bench/compare_noise): perfwire-ci-work recorded with real perf —
// cpu-clock at 10 kHz, so its samples are set by its fixed work, not by the machine's load —
// as DIR/NAME.data and perf script's text beside it, DIR/NAME.txt. Needs PERFWIRE_CI_WORK_BIN.
#pragma once

#include "support/spawn.hpp"

#include <chrono>
#include <filesystem>
#include <string>
#include <vector>

namespace test_support {

// "" when both were written; else what failed. `binary`: another build of the workload (a
// stripped copy); `env`: perf's ("HOME=…": its build-id cache elsewhere).
inline std::string record_ci_work(const std::filesystem::path& dir, const std::string& name,
                                  int rounds, const std::string& variant = {},
                                  const std::string& binary = PERFWIRE_CI_WORK_BIN,
                                  const std::vector<std::string>& env = {}) {
    const auto data = (dir / (name + ".data")).string();
    std::vector<std::string> args{"record", "-q",    "-e",   "cpu-clock",
                                  "-F",     "10000", "-g",   "-o",
                                  data,     "--",    binary, std::to_string(rounds)};
    if (!variant.empty())
        args.push_back(variant);
    spawned perf("/usr/bin/perf", args, "/dev/null", env);
    if (perf.wait(std::chrono::seconds(300)) != 0)
        return "perf record failed: " + perf.stderr_text();
    spawned script("/usr/bin/perf", {"script", "-i", data}, (dir / (name + ".txt")).string(), env);
    if (script.wait(std::chrono::seconds(300)) != 0)
        return "perf script failed: " + script.stderr_text();
    return {};
}

} // namespace test_support
