// Test helper: runs one of the project's binaries as a real child process, with stderr in a
// file the test can read while it runs. Killed (SIGKILL) and reaped on destruction.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <vector>

namespace test_support {

class spawned {
public:
    // `env` entries ("NAME=value") replace or add to the test's own environment.
    spawned(const std::string& exe, const std::vector<std::string>& args,
            const std::string& stdout_path = "/dev/null", const std::vector<std::string>& env = {});
    ~spawned();
    spawned(const spawned&) = delete;
    spawned& operator=(const spawned&) = delete;

    int pid() const { return pid_; }
    void signal(int sig) const;
    // Exit status (code, or 128 + signal) if it exits within `timeout`.
    std::optional<int> wait(std::chrono::milliseconds timeout);
    std::string stderr_text() const;
    // Polls stderr until it contains `needle`; returns the text after it up to end of line.
    std::optional<std::string> wait_for_stderr(const std::string& needle,
                                               std::chrono::milliseconds timeout) const;

private:
    int pid_ = -1;
    std::string stderr_path_;
    std::optional<int> status_;
};

// Child pids of `parent` whose comm starts with `prefix` (from /proc/*/stat).
std::vector<int> children_of(int parent, const std::string& prefix);
bool process_exists(int pid);
// /proc/PID/NAME ("stat", "cmdline") as the kernel gives it; "" when the process is gone,
// however late it went (a process may exit between a listing of /proc and the read).
std::string proc_file(int pid, const std::string& name);

} // namespace test_support
