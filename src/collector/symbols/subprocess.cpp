#include "collector/symbols/subprocess.hpp"

#include "protocol/descriptors.hpp"

#include <cerrno>
#include <csignal>
#include <cstring>
#include <fcntl.h>
#include <optional>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>
#include <utility>

namespace collector {
namespace {

// In the child, between fork and exec: only async-signal-safe calls.
[[noreturn]] void exec_child(const std::vector<char*>& argv, int in, int out, int err) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL); // never outlive the collector
    ::signal(SIGPIPE, SIG_DFL);
    ::dup2(in, 0);
    ::dup2(out, 1);
    ::dup2(err, 2);
    protocol::close_on_exec_from_3(); // none of the collector's sockets (descriptors.hpp)
    ::execvp(argv[0], argv.data());
    std::_Exit(127);
}

std::vector<char*> c_argv(const std::vector<std::string>& args) {
    std::vector<char*> argv;
    for (const auto& a : args)
        argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    return argv;
}

// A started child's ends of the pipes the parent asked for (-1 where the child has /dev/null).
struct spawned {
    pid_t pid = -1;
    int in = -1, out = -1, err = -1;
};

// Starts argv with each of stdin, stdout and stderr either a pipe to the parent or /dev/null.
// On failure every descriptor is closed again and `error` says why.
std::optional<spawned> spawn(const std::vector<std::string>& args, bool pipe_in, bool pipe_out,
                             bool pipe_err, std::string& error) {
    const bool wanted[3] = {pipe_in, pipe_out, pipe_err};
    int fds[3][2] = {{-1, -1}, {-1, -1}, {-1, -1}}; // [stream][read end, write end]
    auto close_all = [&] {
        for (auto& pair : fds)
            for (int& fd : pair)
                if (fd >= 0)
                    ::close(std::exchange(fd, -1));
    };
    for (int i = 0; i < 3; ++i) {
        bool ok;
        if (wanted[i]) {
            ok = ::pipe2(fds[i], O_CLOEXEC) == 0;
        } else {
            // Only the child's end: it reads stdin from [0][0], writes the others to [i][1].
            int& child_end = i == 0 ? fds[i][0] : fds[i][1];
            child_end = ::open("/dev/null", (i == 0 ? O_RDONLY : O_WRONLY) | O_CLOEXEC);
            ok = child_end >= 0;
        }
        if (!ok) {
            error = std::strerror(errno);
            close_all();
            return std::nullopt;
        }
    }
    // The child reads stdin from [0][0] and writes stdout/stderr to [1][1] and [2][1].
    const auto argv = c_argv(args);
    const pid_t pid = ::fork();
    if (pid == 0)
        exec_child(argv, fds[0][0], fds[1][1], fds[2][1]);
    if (pid < 0) {
        error = std::strerror(errno);
        close_all();
        return std::nullopt;
    }
    spawned s{pid, std::exchange(fds[0][1], -1), std::exchange(fds[1][0], -1),
              std::exchange(fds[2][0], -1)};
    close_all(); // the child's ends
    return s;
}

int reap(int pid) {
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

} // namespace

capture run_streaming(const std::vector<std::string>& args,
                      const std::function<bool(std::string_view)>& out) {
    constexpr std::size_t stderr_cap = 64 << 10;
    capture c;
    const auto child = spawn(args, false, true, true, c.err);
    if (!child)
        return c;
    pollfd fds[2] = {{child->out, POLLIN, 0}, {child->err, POLLIN, 0}};
    int open_fds = 2;
    std::vector<char> buf(1 << 20);
    bool stopped = false;
    while (open_fds > 0) {
        if (::poll(fds, 2, -1) < 0) {
            if (errno == EINTR)
                continue;
            break;
        }
        for (int i = 0; i < 2; ++i) {
            if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR)))
                continue;
            const ssize_t n = ::read(fds[i].fd, buf.data(), buf.size());
            if (n > 0) {
                const std::string_view block(buf.data(), static_cast<std::size_t>(n));
                if (i == 1)
                    c.err.append(block.substr(0, stderr_cap - std::min(stderr_cap, c.err.size())));
                else if (!stopped && !out(block)) {
                    stopped = true;
                    ::kill(child->pid, SIGKILL);
                }
            } else if (n == 0 || errno != EINTR) {
                ::close(fds[i].fd);
                fds[i].fd = -1;
                --open_fds;
            }
        }
    }
    for (auto& f : fds)
        if (f.fd >= 0)
            ::close(f.fd);
    c.code = reap(child->pid);
    return c;
}

capture run_capture(const std::vector<std::string>& args) {
    std::string out;
    capture c = run_streaming(args, [&out](std::string_view block) {
        out.append(block);
        return true;
    });
    c.out = std::move(out);
    return c;
}

std::unique_ptr<coprocess> coprocess::start(const std::vector<std::string>& args) {
    std::string error;
    const auto child = spawn(args, true, true, false, error);
    if (!child)
        return nullptr;
    ::fcntl(child->in, F_SETFL, ::fcntl(child->in, F_GETFL) | O_NONBLOCK);
    ::fcntl(child->out, F_SETFL, ::fcntl(child->out, F_GETFL) | O_NONBLOCK);
    return std::unique_ptr<coprocess>(new coprocess(child->pid, child->in, child->out));
}

coprocess::~coprocess() {
    if (in_ >= 0)
        ::close(in_);
    if (out_ >= 0)
        ::close(out_);
    if (pid_ > 0) {
        ::kill(pid_, SIGKILL);
        reap(pid_);
    }
}

bool coprocess::step(std::string_view& pending, std::vector<std::string>& lines,
                     std::chrono::milliseconds timeout) {
    if (pid_ < 0)
        return false;
    pollfd fds[2] = {{out_, POLLIN, 0}, {pending.empty() ? -1 : in_, POLLOUT, 0}};
    const int ready = ::poll(fds, 2, static_cast<int>(timeout.count()));
    if (ready < 0 && errno == EINTR)
        return true;
    if (ready <= 0)
        return false; // no progress within the timeout: the child is stuck
    if (fds[1].revents & (POLLOUT | POLLERR | POLLHUP)) {
        const ssize_t n = ::write(in_, pending.data(), pending.size());
        if (n < 0 && errno != EAGAIN && errno != EINTR)
            return false;
        if (n > 0)
            pending.remove_prefix(static_cast<std::size_t>(n));
    }
    if (fds[0].revents & (POLLIN | POLLHUP | POLLERR)) {
        char buf[1 << 16];
        const ssize_t n = ::read(out_, buf, sizeof buf);
        if (n == 0)
            return false; // the child exited
        if (n < 0)
            return errno == EAGAIN || errno == EINTR;
        partial_.append(buf, static_cast<std::size_t>(n));
        std::size_t start = 0;
        for (auto nl = partial_.find('\n'); nl != std::string::npos;
             nl = partial_.find('\n', start)) {
            lines.emplace_back(partial_, start, nl - start);
            start = nl + 1;
        }
        partial_.erase(0, start);
    }
    return true;
}

} // namespace collector
