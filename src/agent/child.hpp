// One small wrapper over Boost.Process v2 for the perf children.
//
// Every child gets PR_SET_PDEATHSIG=SIGKILL, so no perf survives the agent even if the agent is
// killed outright, and the default SIGPIPE disposition back. A running child is stopped the
// way perf wants: SIGINT so it flushes, a deadline, then SIGKILL.
#pragma once

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/readable_pipe.hpp>
#include <boost/process/v2/process.hpp>
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
    bool running();

    void signal(int sig) noexcept;

    // Exit code (128+N for signal N) once the child has exited.
    asio::awaitable<int> wait();

    // SIGINT, up to `grace` for the child to exit, then SIGKILL.
    asio::awaitable<int> stop(std::chrono::milliseconds grace);

private:
    child(asio::any_io_executor ex);

    asio::readable_pipe out_;
    asio::readable_pipe err_;
    std::optional<boost::process::v2::process> process_;
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

} // namespace agent
