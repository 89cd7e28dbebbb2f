#include "collector/symbols/subprocess.hpp"

#include <cerrno>
#include <csignal>
#include <cstring>
#include <fcntl.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

namespace collector {
namespace {

// In the child, between fork and exec: only async-signal-safe calls.
[[noreturn]] void exec_child(const std::vector<char*>& argv, int in, int out, int err) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL); // never outlive the collector
    ::signal(SIGPIPE, SIG_DFL);
    ::dup2(in, 0);
    ::dup2(out, 1);
    ::dup2(err, 2);
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

int reap(int pid) {
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

} // namespace

capture run_capture(const std::vector<std::string>& args) {
    capture c;
    int out[2], err[2];
    if (::pipe2(out, O_CLOEXEC) != 0) {
        c.err = std::strerror(errno);
        return c;
    }
    if (::pipe2(err, O_CLOEXEC) != 0) {
        c.err = std::strerror(errno);
        ::close(out[0]);
        ::close(out[1]);
        return c;
    }
    const int null_fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    const auto argv = c_argv(args);
    const pid_t pid = ::fork();
    if (pid == 0)
        exec_child(argv, null_fd, out[1], err[1]);
    ::close(null_fd);
    ::close(out[1]);
    ::close(err[1]);
    if (pid < 0) {
        c.err = std::strerror(errno);
        ::close(out[0]);
        ::close(err[0]);
        return c;
    }
    pollfd fds[2] = {{out[0], POLLIN, 0}, {err[0], POLLIN, 0}};
    std::string* sinks[2] = {&c.out, &c.err};
    int open_fds = 2;
    std::vector<char> buf(1 << 16);
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
                sinks[i]->append(buf.data(), static_cast<std::size_t>(n));
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
    c.code = reap(pid);
    return c;
}

std::unique_ptr<coprocess> coprocess::start(const std::vector<std::string>& args) {
    int in[2], out[2];
    if (::pipe2(in, O_CLOEXEC) != 0)
        return nullptr;
    if (::pipe2(out, O_CLOEXEC) != 0) {
        ::close(in[0]);
        ::close(in[1]);
        return nullptr;
    }
    const int null_fd = ::open("/dev/null", O_WRONLY | O_CLOEXEC);
    const auto argv = c_argv(args);
    const pid_t pid = ::fork();
    if (pid == 0)
        exec_child(argv, in[0], out[1], null_fd);
    ::close(null_fd);
    ::close(in[0]);
    ::close(out[1]);
    if (pid < 0) {
        ::close(in[1]);
        ::close(out[0]);
        return nullptr;
    }
    ::fcntl(in[1], F_SETFL, ::fcntl(in[1], F_GETFL) | O_NONBLOCK);
    ::fcntl(out[0], F_SETFL, ::fcntl(out[0], F_GETFL) | O_NONBLOCK);
    return std::unique_ptr<coprocess>(new coprocess(pid, in[1], out[0]));
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
