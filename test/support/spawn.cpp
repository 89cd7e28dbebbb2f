#include "support/spawn.hpp"

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <dirent.h>
#include <fcntl.h>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string_view>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

namespace test_support {

spawned::spawned(const std::string& exe, const std::vector<std::string>& args,
                 const std::string& stdout_path, const std::vector<std::string>& env) {
    char tmpl[] = "/tmp/perfwire-test-stderr-XXXXXX";
    const int err_fd = ::mkstemp(tmpl);
    if (err_fd < 0)
        throw std::runtime_error("mkstemp failed");
    stderr_path_ = tmpl;
    std::vector<char*> argv;
    argv.push_back(const_cast<char*>(exe.c_str()));
    for (const auto& a : args)
        argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    // Built before fork: the child only calls async-signal-safe functions.
    std::vector<std::string> env_text = env;
    for (char** e = environ; *e; ++e) {
        const std::string_view entry(*e);
        const auto name = entry.substr(0, entry.find('=') + 1);
        const bool replaced = std::any_of(env.begin(), env.end(), [&](const std::string& o) {
            return o.compare(0, name.size(), name) == 0;
        });
        if (!replaced)
            env_text.emplace_back(entry);
    }
    std::vector<char*> envp;
    for (auto& e : env_text)
        envp.push_back(e.data());
    envp.push_back(nullptr);
    // A test that dies (a crash, a kill) takes what it started with it: the child is told to
    // stop (SIGTERM: an agent or a collector still stops its own children) when the thread that
    // forked it ends, which for the main thread is the test process itself.
    const bool from_main = ::gettid() == ::getpid();
    const pid_t parent = ::getpid();
    pid_ = ::fork();
    if (pid_ == 0) {
        if (from_main && (::prctl(PR_SET_PDEATHSIG, SIGTERM) != 0 || ::getppid() != parent))
            std::_Exit(127);
        const int out_fd = ::open(stdout_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
        ::dup2(out_fd, 1);
        ::dup2(err_fd, 2);
        ::execve(exe.c_str(), argv.data(), envp.data());
        std::_Exit(127);
    }
    ::close(err_fd);
    if (pid_ < 0)
        throw std::runtime_error("fork failed");
}

spawned::~spawned() {
    if (!status_ && pid_ > 0) {
        ::kill(pid_, SIGKILL);
        int st = 0;
        ::waitpid(pid_, &st, 0);
    }
    std::remove(stderr_path_.c_str());
}

void spawned::signal(int sig) const {
    if (!status_)
        ::kill(pid_, sig);
}

std::optional<int> spawned::wait(std::chrono::milliseconds timeout) {
    if (status_)
        return status_;
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    do {
        int st = 0;
        const pid_t r = ::waitpid(pid_, &st, WNOHANG);
        if (r == pid_) {
            status_ = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
            return status_;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    } while (std::chrono::steady_clock::now() < deadline);
    return std::nullopt;
}

std::string spawned::stderr_text() const {
    std::ifstream in(stderr_path_);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

std::optional<std::string> spawned::wait_for_stderr(const std::string& needle,
                                                    std::chrono::milliseconds timeout) const {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    do {
        const std::string text = stderr_text();
        const auto at = text.find(needle);
        if (at != std::string::npos) {
            const auto from = at + needle.size();
            const auto nl = text.find('\n', from);
            if (nl != std::string::npos)
                return text.substr(from, nl - from);
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    } while (std::chrono::steady_clock::now() < deadline);
    return std::nullopt;
}

std::string proc_file(int pid, const std::string& name) {
    // Not an ifstream: its buffer throws when read() fails, as it does with ESRCH for a
    // process that exited after its file was opened.
    const auto path = "/proc/" + std::to_string(pid) + "/" + name;
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return {};
    std::string text;
    char buf[1024];
    for (;;) {
        const auto n = ::read(fd, buf, sizeof buf);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            if (n < 0)
                text.clear(); // gone meanwhile
            break;
        }
        text.append(buf, static_cast<std::size_t>(n));
    }
    ::close(fd);
    return text;
}

std::vector<int> children_of(int parent, const std::string& prefix) {
    std::vector<int> out;
    DIR* d = ::opendir("/proc");
    if (!d)
        return out;
    while (const dirent* e = ::readdir(d)) {
        const int pid = std::atoi(e->d_name);
        if (pid <= 0)
            continue;
        const std::string text = proc_file(pid, "stat");
        const auto open = text.find('(');
        const auto close = text.rfind(')');
        if (open == std::string::npos || close == std::string::npos)
            continue;
        const std::string comm = text.substr(open + 1, close - open - 1);
        std::istringstream rest(text.substr(close + 2));
        char state = 0;
        int ppid = 0;
        rest >> state >> ppid;
        if (ppid == parent && comm.rfind(prefix, 0) == 0)
            out.push_back(pid);
    }
    ::closedir(d);
    return out;
}

bool process_exists(int pid) {
    if (::kill(pid, 0) != 0 && errno == ESRCH)
        return false;
    // A zombie still "exists" for kill(); treat it as gone.
    const std::string text = proc_file(pid, "stat");
    const auto close = text.rfind(')');
    return close != std::string::npos && close + 2 < text.size() && text[close + 2] != 'Z';
}

} // namespace test_support
