// Child processes for the collector's tools (perf script for imports, readelf, addr2line).
// They run on the thread pool and block it, so these are plain POSIX: fork/exec with pipes,
// both directions drained together with poll() so no pipe can fill up and deadlock.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace collector {

struct capture {
    int code = -1; // exit code, 128+N for signal N, 127 when the program could not start
    std::string out, err;
};

// Runs argv[0] (looked up on PATH) to completion with stdin from /dev/null.
capture run_capture(const std::vector<std::string>& argv);

// Runs argv[0] with stdout handed to `out` block by block as it arrives; `out` returning
// false kills the child. stderr is kept (its first 64 KiB) in the result; `out` stays empty.
capture run_streaming(const std::vector<std::string>& argv,
                      const std::function<bool(std::string_view)>& out);

// A long-lived child fed on stdin and read on stdout line by line (addr2line).
class coprocess {
public:
    // Null when the program cannot be started.
    static std::unique_ptr<coprocess> start(const std::vector<std::string>& argv);
    coprocess(const coprocess&) = delete;
    coprocess& operator=(const coprocess&) = delete;
    ~coprocess(); // closes stdin, then kills and reaps the child

    // Writes `input` while reading lines until `done(line)` says the answer is complete.
    // False on EOF, error or `timeout` without progress; the child is then unusable.
    template <class Done>
    bool exchange(std::string_view input, std::vector<std::string>& lines, Done&& done,
                  std::chrono::milliseconds timeout);

private:
    coprocess(int pid, int in, int out)
        : pid_(pid)
        , in_(in)
        , out_(out) {}
    // One poll round: writes some of `pending`, appends whole lines read to `lines`.
    bool step(std::string_view& pending, std::vector<std::string>& lines,
              std::chrono::milliseconds timeout);

    int pid_ = -1, in_ = -1, out_ = -1;
    std::string partial_;
};

template <class Done>
bool coprocess::exchange(std::string_view input, std::vector<std::string>& lines, Done&& done,
                         std::chrono::milliseconds timeout) {
    std::size_t checked = lines.size();
    for (;;) {
        if (!step(input, lines, timeout))
            return false;
        for (; checked < lines.size(); ++checked)
            if (done(lines[checked]))
                return true;
    }
}

} // namespace collector
