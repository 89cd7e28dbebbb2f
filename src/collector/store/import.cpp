#include "collector/store/import.hpp"

#include "collector/parse/perf_script.hpp"
#include "protocol/compression.hpp"

#include <cerrno>
#include <chrono>
#include <cstring>
#include <fcntl.h>
#include <fstream>
#include <poll.h>
#include <sstream>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

namespace collector {
namespace {

// Runs argv, returns (exit code, stdout, stderr). Both pipes are drained together so a chatty
// perf cannot deadlock on a full pipe.
struct capture {
    int code = -1;
    std::string out, err;
};

capture run_capture(const std::vector<std::string>& args) {
    capture c;
    int out[2], err[2];
    if (::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(err, O_CLOEXEC) != 0) {
        c.err = std::strerror(errno);
        return c;
    }
    std::vector<char*> argv;
    for (const auto& a : args)
        argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    const pid_t pid = ::fork();
    if (pid == 0) {
        ::dup2(out[1], 1);
        ::dup2(err[1], 2);
        const int null_fd = ::open("/dev/null", O_RDONLY);
        ::dup2(null_fd, 0);
        ::execvp(argv[0], argv.data());
        std::_Exit(127);
    }
    ::close(out[1]);
    ::close(err[1]);
    pollfd fds[2] = {{out[0], POLLIN, 0}, {err[0], POLLIN, 0}};
    std::string* sinks[2] = {&c.out, &c.err};
    int open_fds = 2;
    std::vector<char> buf(1 << 16);
    while (open_fds > 0 && ::poll(fds, 2, -1) > 0) {
        for (int i = 0; i < 2; ++i) {
            if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP)))
                continue;
            const ssize_t n = ::read(fds[i].fd, buf.data(), buf.size());
            if (n > 0) {
                sinks[i]->append(buf.data(), static_cast<std::size_t>(n));
            } else {
                ::close(fds[i].fd);
                fds[i].fd = -1;
                --open_fds;
            }
        }
    }
    int status = 0;
    ::waitpid(pid, &status, 0);
    c.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    return c;
}

} // namespace

import_result import_recording(session_store& store, const std::string& path,
                               const std::string& display_name, const std::string& perf) {
    import_result r;
    std::ifstream in(path, std::ios::binary);
    if (!in) {
        r.error = "cannot read " + display_name;
        return r;
    }
    char magic[8] = {};
    in.read(magic, sizeof magic);
    std::string text;
    if (std::string_view(magic, 8) == "PERFILE2") {
        auto c = run_capture({perf, "script", "-i", path, "--show-lost-events", "-F",
                              "comm,tid,pid,time,period,event,ip,sym,symoff,dso"});
        if (c.code != 0) // recorded without some field, or an old perf: default format
            c = run_capture({perf, "script", "-i", path, "--show-lost-events"});
        if (c.code != 0) {
            r.error = "perf script failed on " + display_name + ": " + c.err.substr(0, 300);
            return r;
        }
        text = std::move(c.out);
    } else {
        in.seekg(0);
        std::stringstream ss;
        ss << in.rdbuf();
        text = ss.str();
    }

    profile check;
    script_parser parser(check);
    parser.feed(text);
    parser.finish();
    if (parser.stats().samples == 0) {
        r.error = display_name + " holds no perf script samples";
        return r;
    }
    const double now =
        std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
    boost::json::object meta{{"agent", "import"},
                             {"hostname", ""},
                             {"source", display_name},
                             {"started_at", now},
                             {"ended_at", now},
                             {"live", false},
                             {"samples", parser.stats().samples}};
    auto w = store.create("import", meta);
    if (!w) {
        r.error = "cannot create the session: " + w.error().message();
        return r;
    }
    if (auto ec = w->write_chunk(true, protocol::compress(text))) {
        r.error = "cannot store the session: " + ec.message();
        return r;
    }
    r.session_id = w->id();
    return r;
}

} // namespace collector
