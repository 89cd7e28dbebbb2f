// import: end-to-end import of a large perf script text over HTTP, against a naive stack
// collapser measured in the same run.
//
//   naive      one pass of memchr over the text in memory: each sample's frames joined into a
//              "a;b;c" key and counted in a hash map (what a flame-graph script does)
//   import     the real perfwire-collector: POST /api/sessions/import of the file (sent with
//              sendfile, so the client costs little) until GET .../functions answers
//   ratio      import MB/s / naive MB/s (target >= 0.5)
//   peak RSS   the collector's VmHWM minus its RSS before the upload (target <= 128 MB)
//   concurrent the same upload twice at once: both finish; the collector's peak again
//
// Usage: import [megabytes, default 150]
#include "capture.hpp"
#include "support/proc_status.hpp"

#include <arpa/inet.h>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <netinet/in.h>
#include <string>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>
#include <unordered_map>
#include <vector>

namespace fs = std::filesystem;
using clock_type = std::chrono::steady_clock;

namespace {

double seconds_since(clock_type::time_point t) {
    return std::chrono::duration<double>(clock_type::now() - t).count();
}

// The baseline: memchr from line to line; a header starts a sample, frame lines add their
// symbol, a blank line counts the joined stack.
std::size_t naive_collapse(std::string_view text) {
    std::unordered_map<std::string, std::uint64_t> stacks;
    std::string key;
    const char* p = text.data();
    const char* end = p + text.size();
    while (p < end) {
        const char* nl = static_cast<const char*>(std::memchr(p, '\n', end - p));
        if (!nl)
            nl = end;
        const std::string_view line(p, nl - p);
        if (line.empty()) {
            if (!key.empty())
                ++stacks[key];
            key.clear();
        } else if (line[0] == '\t') {
            // "\t ip sym+off (dso)": the symbol is between the ip and the dso.
            auto rest = line.substr(line.find_first_not_of("\t "));
            rest = rest.substr(rest.find(' ') + 1);
            const auto dso = rest.rfind(" (");
            if (!key.empty())
                key.insert(0, ";");
            key.insert(0, rest.substr(0, dso));
        }
        p = nl + 1;
    }
    return stacks.size();
}

int connect_port(int port) {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<std::uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
        ::close(fd);
        return -1;
    }
    return fd;
}

std::string read_all(int fd) {
    std::string out;
    char buf[65536];
    for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) > 0;)
        out.append(buf, static_cast<std::size_t>(n));
    return out;
}

std::string request(int port, const std::string& head) {
    const int fd = connect_port(port);
    if (fd < 0)
        return {};
    (void)!::write(fd, head.data(), head.size());
    auto out = read_all(fd);
    ::close(fd);
    return out;
}

// POSTs the file; the answer's body.
std::string upload(int port, const std::string& path) {
    const int file = ::open(path.c_str(), O_RDONLY);
    struct stat st {};
    ::fstat(file, &st);
    const int fd = connect_port(port);
    const std::string head = "POST /api/sessions/import HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                             "Connection: close\r\nContent-Length: " +
                             std::to_string(st.st_size) + "\r\n\r\n";
    (void)!::write(fd, head.data(), head.size());
    off_t offset = 0;
    while (offset < st.st_size)
        if (::sendfile(fd, file, &offset, static_cast<std::size_t>(st.st_size - offset)) <= 0)
            break;
    ::close(file);
    auto out = read_all(fd);
    ::close(fd);
    return out.substr(out.find("\r\n\r\n") + 4);
}

std::string field(const std::string& json, const std::string& name) {
    const auto at = json.find("\"" + name + "\":");
    if (at == std::string::npos)
        return {};
    auto v = json.substr(at + name.size() + 3);
    if (!v.empty() && v[0] == '"')
        return v.substr(1, v.find('"', 1) - 1);
    return v.substr(0, v.find_first_of(",}"));
}

} // namespace

int main(int argc, char** argv) {
    const std::size_t target_mb = argc > 1 ? std::strtoul(argv[1], nullptr, 10) : 150;
    const fs::path work =
        fs::temp_directory_path() / ("perfwire-bench-import-" + std::to_string(::getpid()));
    fs::create_directories(work / "sessions");
    const std::string capture = bench::build_capture(bench::base_capture(), target_mb);
    const std::string file = (work / "capture.txt").string();
    std::ofstream(file, std::ios::binary) << capture;
    const double mb = static_cast<double>(capture.size()) / 1e6;
    std::printf("capture: %.1f MB of perf script text (rewritten real captures)\n", mb);

    auto t0 = clock_type::now();
    const auto distinct = naive_collapse(capture);
    const double naive_s = seconds_since(t0);
    std::printf("naive collapser: %.0f MB/s (%.2f s, %zu distinct stacks)\n", mb / naive_s, naive_s,
                distinct);

    int pipefd[2];
    if (::pipe(pipefd) != 0)
        return 1;
    const pid_t pid = ::fork();
    if (pid == 0) {
        ::dup2(pipefd[1], 2);
        ::close(pipefd[0]);
        ::execl(PERFWIRE_COLLECTOR_BIN, PERFWIRE_COLLECTOR_BIN, "--sessions-dir",
                (work / "sessions").c_str(), "--http-port", "0", "--agent-port", "0",
                "--agent-bind", "127.0.0.1", "--http-auth", "none", // a benchmark, not a user
                static_cast<char*>(nullptr));
        std::_Exit(127);
    }
    ::close(pipefd[1]);
    std::string log;
    int port = 0;
    while (!port) {
        char buf[512];
        const ssize_t n = ::read(pipefd[0], buf, sizeof buf);
        if (n <= 0)
            break;
        log.append(buf, static_cast<std::size_t>(n));
        const auto at = log.find("API on http://127.0.0.1:");
        if (at != std::string::npos && log.find('\n', at) != std::string::npos)
            port = std::atoi(log.c_str() + at + 24);
    }
    if (!port) {
        std::fprintf(stderr, "the collector did not start: %s\n", log.c_str());
        return 1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    const long idle_kb = test_support::status_kb(pid, "VmRSS:");

    t0 = clock_type::now();
    const std::string answer = upload(port, file);
    const double upload_s = seconds_since(t0);
    const std::string id = field(answer, "session_id");
    const std::string functions = request(port, "GET /api/sessions/" + id +
                                                    "/functions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                                                    "Connection: close\r\n\r\n");
    const double import_s = seconds_since(t0);
    const long peak_kb = test_support::status_kb(pid, "VmHWM:");
    const bool ok = !id.empty() && functions.rfind("HTTP/1.1 200", 0) == 0;
    std::printf("import over HTTP: %.0f MB/s (%.2f s to the answer, %.2f s to the function "
                "table; %s samples)%s\n",
                mb / import_s, upload_s, import_s, field(answer, "samples").c_str(),
                ok ? "" : " FAILED");
    std::printf("ratio import / naive: %.2f (target >= 0.5)\n", naive_s / import_s);
    std::printf("collector peak RSS: %.0f MB above idle (%.0f MB idle; target <= 128 MB)\n",
                static_cast<double>(peak_kb - idle_kb) / 1024.0,
                static_cast<double>(idle_kb) / 1024.0);

    // Two at once (the most the collector runs together).
    t0 = clock_type::now();
    std::string a, b;
    std::thread other([&] { b = upload(port, file); });
    a = upload(port, file);
    other.join();
    const double both_s = seconds_since(t0);
    const bool both = !field(a, "session_id").empty() && !field(b, "session_id").empty();
    std::printf("two concurrent imports: %.2f s, %s; collector peak RSS %.0f MB above idle\n",
                both_s, both ? "both stored" : ("FAILED: " + a + " / " + b).c_str(),
                static_cast<double>(test_support::status_kb(pid, "VmHWM:") - idle_kb) / 1024.0);

    ::kill(pid, SIGTERM);
    ::waitpid(pid, nullptr, 0);
    fs::remove_all(work);
    return ok && both ? 0 : 1;
}
