#include "agent/child.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/process/v2/environment.hpp>

#include <csignal>
#include <fcntl.h>
#include <filesystem>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

namespace agent {
namespace bp = boost::process::v2;
using namespace asio::experimental::awaitable_operators;
constexpr auto use_nothrow = asio::as_tuple(asio::use_awaitable);

namespace {

// Runs in the child between fork and exec (the launcher then closes every other fd).
struct child_setup {
    int in, out, err; // -1: /dev/null

    template <class Launcher>
    boost::system::error_code on_exec_setup(Launcher&, const bp::filesystem::path&,
                                            const char* const*) const {
        const int null_fd = ::open("/dev/null", O_RDWR);
        const int fds[3] = {in, out, err};
        for (int target = 0; target < 3; ++target)
            if (::dup2(fds[target] >= 0 ? fds[target] : null_fd, target) < 0)
                return {errno, boost::system::system_category()};
        ::prctl(PR_SET_PDEATHSIG, SIGKILL);
        ::signal(SIGPIPE, SIG_DFL);
        ::signal(SIGINT, SIG_DFL);
        ::signal(SIGTERM, SIG_DFL);
        sigset_t none;
        sigemptyset(&none);
        ::sigprocmask(SIG_SETMASK, &none, nullptr);
        return {};
    }
};

// A pipe whose read end goes to `reader` and whose write end is returned (both CLOEXEC; the
// child's dup2 clears it on the copy it keeps).
int pipe_into(asio::readable_pipe& reader, boost::system::error_code& ec) {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) < 0) {
        ec = {errno, boost::system::system_category()};
        return -1;
    }
    reader.assign(fds[0], ec);
    return fds[1];
}

} // namespace

std::string find_program(const std::string& name) {
    if (name.find('/') != std::string::npos) {
        std::error_code ec;
        return std::filesystem::is_regular_file(name, ec) && ::access(name.c_str(), X_OK) == 0
                   ? name
                   : std::string();
    }
    return bp::environment::find_executable(name).string();
}

child::child(asio::any_io_executor ex)
    : out_(ex)
    , err_(ex) {}

boost::system::result<std::unique_ptr<child>> child::start(asio::any_io_executor ex,
                                                           const std::string& exe,
                                                           const std::vector<std::string>& args,
                                                           stdio io) {
    const std::string path = find_program(exe);
    if (path.empty())
        return boost::system::error_code(ENOENT, boost::system::generic_category());
    std::unique_ptr<child> c(new child(ex));
    boost::system::error_code ec;
    const int out_w = io.out >= 0 || io.discard_out ? -1 : pipe_into(c->out_, ec);
    const int err_w = ec ? -1 : pipe_into(c->err_, ec);
    if (!ec) {
        const child_setup setup{io.in, io.discard_out ? -1 : (io.out >= 0 ? io.out : out_w), err_w};
        c->process_.emplace(bp::default_process_launcher()(ex, ec, path, args, setup));
    }
    for (int fd : {out_w, err_w})
        if (fd >= 0)
            ::close(fd);
    if (ec) {
        c->process_.reset();
        return ec;
    }
    c->pid_ = c->process_->id();
    return c;
}

child::~child() {
    if (process_ && !exit_code_) {
        boost::system::error_code ec;
        if (process_->running(ec)) {
            ::kill(pid_, SIGKILL);
            int status = 0;
            ::waitpid(pid_, &status, 0);
        }
        process_->detach();
    }
}

bool child::running() {
    if (exit_code_ || !process_)
        return false;
    boost::system::error_code ec;
    return process_->running(ec);
}

void child::signal(int sig) noexcept {
    if (pid_ > 0 && !exit_code_)
        ::kill(pid_, sig);
}

asio::awaitable<int> child::wait() {
    if (exit_code_)
        co_return *exit_code_;
    auto [ec, code] = co_await process_->async_wait(use_nothrow);
    if (ec) {
        // Already reaped elsewhere or not waitable: report as lost.
        exit_code_ = -1;
    } else {
        const int native = process_->native_exit_code();
        exit_code_ = WIFSIGNALED(native) ? 128 + WTERMSIG(native) : code;
    }
    co_return *exit_code_;
}

asio::awaitable<int> child::stop(std::chrono::milliseconds grace) {
    if (exit_code_)
        co_return *exit_code_;
    signal(SIGINT);
    asio::steady_timer deadline(co_await asio::this_coro::executor, grace);
    auto first = co_await (wait() || deadline.async_wait(use_nothrow));
    if (first.index() == 0)
        co_return std::get<0>(first);
    signal(SIGKILL);
    co_return co_await wait();
}

asio::awaitable<std::string> read_all(asio::readable_pipe& pipe, std::size_t limit) {
    std::string out;
    std::vector<char> buf(16384);
    for (;;) {
        auto [ec, n] = co_await pipe.async_read_some(asio::buffer(buf), use_nothrow);
        if (n > 0 && out.size() < limit)
            out.append(buf.data(), std::min(n, limit - out.size()));
        if (ec)
            break;
    }
    co_return out;
}

asio::awaitable<run_result> run_command(const std::string& exe,
                                        const std::vector<std::string>& args,
                                        std::chrono::milliseconds timeout) {
    run_result r;
    auto ex = co_await asio::this_coro::executor;
    auto started = child::start(ex, exe, args, {});
    if (!started) {
        r.error = exe + ": " + started.error().message();
        co_return r;
    }
    auto& c = **started;
    // Readers run alongside the wait so a chatty child never blocks on a full pipe.
    auto out_reader = read_all(c.out());
    auto err_reader = read_all(c.err());
    asio::steady_timer deadline(ex, timeout);
    auto outcome = co_await ((std::move(out_reader) && std::move(err_reader) && c.wait()) ||
                             deadline.async_wait(use_nothrow));
    if (outcome.index() == 0) {
        auto& [out, err, code] = std::get<0>(outcome);
        r.out = std::move(out);
        r.err = std::move(err);
        r.exit_code = code;
    } else {
        r.timed_out = true;
        r.exit_code = co_await c.stop(std::chrono::milliseconds(500));
    }
    co_return r;
}

} // namespace agent
