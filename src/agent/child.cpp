#include "agent/child.hpp"

#include "agent/overhead.hpp"

#include "protocol/descriptors.hpp"
#include "protocol/use_nothrow.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <fcntl.h>
#include <string_view>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

extern char** environ;

namespace agent {
using namespace asio::experimental::awaitable_operators;
using protocol::use_nothrow;

namespace {

boost::system::error_code errno_code(int e = errno) {
    return {e, boost::system::system_category()};
}

// A pipe whose read end goes to `reader` and whose write end is returned (both CLOEXEC; the
// child's dup2 clears it on the copy it keeps).
int pipe_into(asio::readable_pipe& reader, boost::system::error_code& ec) {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) < 0) {
        ec = errno_code();
        return -1;
    }
    reader.assign(fds[0], ec);
    return fds[1];
}

// The child's side of fork: its standard descriptors, signals and death signal, then exec.
// On failure errno goes through `report` and the child exits 127.
[[noreturn]] void exec_child(const char* path, char* const* argv, const int (&io)[4], int report,
                             pid_t parent) {
    int moved[4] = {-1, -1, -1, -1};
    // Above 3 first, so no dup2 below overwrites a later source (nor is one its own target:
    // dup2 onto itself would leave close-on-exec set).
    for (int i = 0; i < 4; ++i)
        if (io[i] >= 0 && (moved[i] = ::fcntl(io[i], F_DUPFD_CLOEXEC, 4)) < 0)
            goto failed;
    for (int i = 0; i < 3; ++i)
        if (::dup2(moved[i], i) < 0)
            goto failed;
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) // the agent died before the death signal was set
        ::_exit(127);
    for (int sig : {SIGPIPE, SIGINT, SIGTERM, SIGCHLD})
        ::signal(sig, SIG_DFL);
    {
        sigset_t none;
        sigemptyset(&none);
        ::sigprocmask(SIG_SETMASK, &none, nullptr);
    }
    protocol::close_on_exec_from_3();
    if (moved[3] >= 0 && ::dup2(moved[3], 3) < 0) // (without close-on-exec: the child's)
        goto failed;
    ::execve(path, argv, environ);
failed:
    const int e = errno;
    [[maybe_unused]] auto n = ::write(report, &e, sizeof e);
    ::_exit(127);
}

int exit_code_of(int status) {
    return WIFSIGNALED(status) ? 128 + WTERMSIG(status) : WEXITSTATUS(status);
}

} // namespace

std::string find_program(const std::string& name) {
    auto runnable = [](const std::string& p) {
        struct stat st {};
        return ::stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(p.c_str(), X_OK) == 0;
    };
    if (name.empty())
        return {};
    if (name.find('/') != std::string::npos)
        return runnable(name) ? name : std::string();
    const char* path = std::getenv("PATH");
    std::string_view dirs = path && *path ? path : "/usr/local/bin:/usr/bin:/bin";
    while (true) {
        const auto colon = dirs.find(':');
        const auto dir = dirs.substr(0, colon);
        const std::string candidate = std::string(dir.empty() ? "." : dir) + "/" + name;
        if (runnable(candidate))
            return candidate;
        if (colon == std::string_view::npos)
            return {};
        dirs.remove_prefix(colon + 1);
    }
}

std::string sleep_program() {
    if (auto found = find_program("sleep"); !found.empty())
        return found;
    for (const char* known : {"/bin/sleep", "/usr/bin/sleep", "/system/bin/sleep"})
        if (auto found = find_program(known); !found.empty())
            return found;
    return "sleep";
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
    const int null_fd = ::open("/dev/null", O_RDWR | O_CLOEXEC);
    const int out_w = io.out >= 0 || io.discard_out ? -1 : pipe_into(c->out_, ec);
    const int err_w = ec ? -1 : pipe_into(c->err_, ec);
    int report[2] = {-1, -1};
    if (!ec && null_fd < 0)
        ec = errno_code();
    if (!ec && ::pipe2(report, O_CLOEXEC) < 0)
        ec = errno_code();
    if (!ec) {
        // Everything the child needs is made before fork: after it, only system calls.
        std::vector<std::string> words;
        words.reserve(args.size() + 1);
        words.push_back(path);
        words.insert(words.end(), args.begin(), args.end());
        std::vector<char*> argv;
        for (auto& w : words)
            argv.push_back(w.data());
        argv.push_back(nullptr);
        const int fds[4] = {io.in >= 0 ? io.in : null_fd,
                            io.discard_out ? null_fd : (io.out >= 0 ? io.out : out_w), err_w,
                            io.control};
        const pid_t parent = ::getpid();
        const pid_t pid = ::fork();
        if (pid == 0)
            exec_child(path.c_str(), argv.data(), fds, report[1], parent);
        if (pid < 0) {
            ec = errno_code();
        } else {
            c->pid_ = pid;
            ::close(report[1]);
            report[1] = -1;
            // Closed by a successful exec; an errno when exec failed.
            int e = 0;
            ssize_t n;
            while ((n = ::read(report[0], &e, sizeof e)) < 0 && errno == EINTR) {
            }
            if (n == static_cast<ssize_t>(sizeof e)) {
                int status = 0;
                ::waitpid(pid, &status, 0);
                c->exit_code_ = 127;
                ec = errno_code(e);
            }
        }
    }
    for (int fd : {out_w, err_w, null_fd, report[0], report[1]})
        if (fd >= 0)
            ::close(fd);
    if (ec)
        return ec;
    return c;
}

namespace {

// Once `pid` has exited (waited for when `block`), and before it is reaped: its CPU, for the
// overhead meter (a zombie's /proc still has it; a reaped child's is gone).
void note_exit(pid_t pid, bool block) {
    siginfo_t info{};
    int r;
    while ((r = ::waitid(P_PID, static_cast<id_t>(pid), &info,
                         WEXITED | WNOWAIT | (block ? 0 : WNOHANG))) < 0 &&
           errno == EINTR) {
    }
    if (r == 0 && info.si_pid == pid)
        note_child_exit(pid);
}

} // namespace

child::~child() {
    if (pid_ > 0 && !reap()) {
        ::kill(pid_, SIGKILL);
        note_exit(pid_, true);
        int status = 0;
        while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
        }
    }
}

bool child::reap() {
    if (exit_code_)
        return true;
    if (pid_ <= 0)
        return true;
    note_exit(pid_, false);
    int status = 0;
    const pid_t r = ::waitpid(pid_, &status, WNOHANG);
    if (r == 0 || (r < 0 && errno == EINTR))
        return false;
    exit_code_ = r < 0 ? -1 : exit_code_of(status); // -1: reaped elsewhere, not ours to know
    return true;
}

bool child::running() {
    return !reap();
}

void child::signal(int sig) noexcept {
    if (pid_ > 0 && !exit_code_)
        ::kill(pid_, sig);
}

asio::awaitable<int> child::wait() {
    if (reap())
        co_return *exit_code_;
    auto ex = co_await asio::this_coro::executor;
#if defined(SYS_pidfd_open)
    if (const int fd = static_cast<int>(::syscall(SYS_pidfd_open, pid_, 0)); fd >= 0) {
        asio::posix::stream_descriptor exited(ex, fd);
        while (!reap()) {
            auto [ec] =
                co_await exited.async_wait(asio::posix::descriptor_base::wait_read, use_nothrow);
            if (ec == asio::error::operation_aborted) // cancelled: still running
                co_return -1;
        }
        co_return *exit_code_;
    }
#endif
    // No pidfd: polled, often at first (most children end soon), then every quarter second.
    auto interval = std::chrono::milliseconds(5);
    asio::steady_timer tick(ex);
    while (!reap()) {
        tick.expires_after(interval);
        auto [ec] = co_await tick.async_wait(use_nothrow);
        if (ec == asio::error::operation_aborted)
            co_return -1;
        interval = std::min(interval * 2, std::chrono::milliseconds(250));
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
