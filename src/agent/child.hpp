// The perf children: started with fork and exec, awaited without ever blocking the agent.
//
// Every child gets PR_SET_PDEATHSIG=SIGKILL, so no perf survives the agent even if the agent is
// killed outright, the default SIGPIPE disposition back, and no descriptor of the agent's but
// its three standard ones. A running child is stopped the way perf wants: SIGINT so it
// flushes, a deadline, then SIGKILL. Waiting uses a pidfd where the kernel has one (5.3 and
// later) and a short poll where it has not (the 4.x kernels many devices still run); every
// wake-up is checked with waitpid(WNOHANG), so a readiness meant for another descriptor
// cannot stop the agent in a blocking wait.
#pragma once

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/readable_pipe.hpp>
#include <boost/system/result.hpp>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace agent {

namespace asio = boost::asio;

class child {
public:
    struct stdio {
        int in = -1;              // fd for stdin; -1: /dev/null
        int out = -1;             // fd for stdout; -1: a pipe readable through out()
        bool discard_out = false; // stdout to /dev/null instead
        int control = -1;         // given to the child as descriptor 3 (perf's --control fd:3)
    };

    // Starts `exe` (a path, or a name looked up on PATH). Errors: not found, exec failure.
    static boost::system::result<std::unique_ptr<child>> start(asio::any_io_executor ex,
                                                               const std::string& exe,
                                                               const std::vector<std::string>& args,
                                                               stdio io);

    ~child(); // a child still running is killed (SIGKILL) and reaped

    int pid() const noexcept { return pid_; }
    asio::readable_pipe& out() noexcept { return out_; }
    asio::readable_pipe& err() noexcept { return err_; }
    bool running(); // false once it has exited (it is reaped then)

    void signal(int sig) noexcept;

    // Exit code (128+N for signal N) once the child has exited.
    asio::awaitable<int> wait();

    // SIGINT, up to `grace` for the child to exit, then SIGKILL.
    asio::awaitable<int> stop(std::chrono::milliseconds grace);

private:
    child(asio::any_io_executor ex);

    asio::readable_pipe out_;
    asio::readable_pipe err_;
    bool reap(); // true once it has exited; never blocks
    int pid_ = -1;
    std::optional<int> exit_code_;
};

// Reads a pipe to EOF, keeping at most `limit` bytes (the rest is read and dropped).
asio::awaitable<std::string> read_all(asio::readable_pipe& pipe, std::size_t limit = 1 << 20);

struct run_result {
    int exit_code = -1;
    std::string out, err;
    bool timed_out = false;
    std::string error; // set when the program could not be started
};

// Runs a command to completion (or `timeout`, then stop()) collecting stdout and stderr.
asio::awaitable<run_result> run_command(const std::string& exe,
                                        const std::vector<std::string>& args,
                                        std::chrono::milliseconds timeout);

// The absolute path of `name` on PATH (or `name` itself when it contains a '/'); empty if none.
std::string find_program(const std::string& name);

// The `sleep` that bounds a probe or a round of perf record: from PATH, else where systems keep
// it (an agent started with a narrow PATH still probes), else the bare name.
std::string sleep_program();

} // namespace agent
