// off_cpu: what recording where threads wait costs. The real agent (--output, the real perf)
// records a workload for a few seconds without and with --off-cpu; for each, the text bytes a
// second it makes (what goes over the link, before zstd), the wire bytes (that text compressed
// as the link sends it: a zstd frame per third of a second of it) and the CPU it takes: the
// agent's own process, and perf's (everything the agent ran, reaped by it). With --off-cpu the
// agent folds the switches into waits on the device (src/agent/wait_folder.hpp).
//
//   demo       perfwire-demo: busy threads, few switches
//   switcher   two threads of this program passing a byte back and forth through pipes,
//              paced to about --rate switches a second (the rate reached is printed)
//
// The goal (docs/benchmarks.md): with --off-cpu at 10 k switches a second, at most 2x the
// (wire) bytes of plain sampling and the agent at most 2 % of a core.
//
// Usage: off_cpu [--seconds N (5)] [--rate SWITCHES_PER_SECOND (10000)]
#include "protocol/compression.hpp"
#include "support.hpp"
#include "support/spawn.hpp"

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <sys/resource.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>
#include <vector>

namespace fs = std::filesystem;
using namespace std::chrono_literals;

namespace {

// Two threads passing a byte through two pipes: each pass is a switch out and one in, paced
// by a nap every `batch` passes so that the whole makes about `rate` switches a second.
[[noreturn]] void switcher(int rate) {
    int ab[2], ba[2];
    if (pipe(ab) != 0 || pipe(ba) != 0)
        std::exit(1);
    std::thread echo([&] {
        char c;
        while (read(ab[0], &c, 1) == 1)
            (void)!write(ba[1], &c, 1);
    });
    const int per_ms = std::max(1, rate / 1000 / 2); // two switches a pass at least
    for (;;) {
        const auto t0 = std::chrono::steady_clock::now();
        for (int i = 0; i < per_ms; ++i) {
            char c = 'x';
            (void)!write(ab[1], &c, 1);
            (void)!read(ba[0], &c, 1);
        }
        std::this_thread::sleep_until(t0 + 1ms);
    }
}

// Voluntary and involuntary context switches of every thread of `pid` so far.
std::uint64_t switches(int pid) {
    std::uint64_t n = 0;
    std::error_code ec;
    for (const auto& t : fs::directory_iterator("/proc/" + std::to_string(pid) + "/task", ec)) {
        std::ifstream in(t.path() / "status");
        std::string line;
        while (std::getline(in, line))
            if (line.starts_with("voluntary_ctxt_switches:") ||
                line.starts_with("nonvoluntary_ctxt_switches:"))
                n += std::strtoull(line.substr(line.find(':') + 1).c_str(), nullptr, 10);
    }
    return n;
}

struct cost {
    double bytes_per_s = 0, wire_per_s = 0, agent_pct = 0, perf_pct = 0;
};

// `text` as the link carries it: a zstd frame per third of a second of it, each ending on a
// sample boundary (a blank line).
std::size_t wire_bytes(const std::string& text, int seconds) {
    const std::size_t piece = std::max<std::size_t>(1, text.size() / (3 * seconds));
    std::size_t wire = 0;
    for (std::size_t at = 0; at < text.size();) {
        auto end = text.find("\n\n", std::min(text.size(), at + piece));
        end = end == std::string::npos ? text.size() : end + 2;
        wire += protocol::compress(std::string_view(text).substr(at, end - at)).size();
        at = end;
    }
    return wire;
}

// The agent recording `pid` for `seconds` (one round), with --off-cpu or not.
cost record(int pid, int seconds, bool off_cpu, const fs::path& work) {
    const auto out = work / (off_cpu ? "off.txt" : "plain.txt");
    std::vector<std::string> args = {PERFWIRE_AGENT_BIN,
                                     "--output",
                                     out.string(),
                                     "--pid",
                                     std::to_string(pid),
                                     "--duration",
                                     std::to_string(seconds),
                                     "--state-dir",
                                     (work / "state").string()};
    if (off_cpu)
        args.push_back("--off-cpu");
    rusage before{};
    getrusage(RUSAGE_CHILDREN, &before);
    const auto t0 = std::chrono::steady_clock::now();
    const pid_t agent = fork();
    if (agent == 0) {
        std::vector<char*> argv;
        for (auto& a : args)
            argv.push_back(a.data());
        argv.push_back(nullptr);
        execv(argv[0], argv.data());
        _exit(127);
    }
    double own = 0;
    int status = 0;
    while (waitpid(agent, &status, WNOHANG) == 0) {
        own = std::max(own, bench::cpu_seconds(agent)); // (0 once it is gone)
        std::this_thread::sleep_for(50ms);
    }
    const double wall =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    rusage after{};
    getrusage(RUSAGE_CHILDREN, &after);
    const auto secs = [](const timeval& t) {
        return static_cast<double>(t.tv_sec) + t.tv_usec / 1e6;
    };
    const double all =
        secs(after.ru_utime) - secs(before.ru_utime) + secs(after.ru_stime) - secs(before.ru_stime);
    cost c;
    std::error_code ec;
    c.bytes_per_s = static_cast<double>(fs::file_size(out, ec)) / seconds;
    std::ifstream in(out);
    std::stringstream text;
    text << in.rdbuf();
    c.wire_per_s = static_cast<double>(wire_bytes(text.str(), seconds)) / seconds;
    c.agent_pct = 100 * own / wall;
    c.perf_pct = 100 * std::max(0.0, all - own) / wall;
    return c;
}

} // namespace

int main(int argc, char** argv) {
    int seconds = 5, rate = 10000;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (std::strcmp(argv[i], "--seconds") == 0)
            seconds = std::max(1, std::atoi(argv[i + 1]));
        else if (std::strcmp(argv[i], "--rate") == 0)
            rate = std::max(100, std::atoi(argv[i + 1]));
        else if (std::strcmp(argv[i], "--switcher") == 0)
            switcher(std::atoi(argv[i + 1]));
    }
    const fs::path work =
        fs::temp_directory_path() / ("perfwire-offcpu-" + std::to_string(getpid()));
    fs::create_directories(work);
    test_support::spawned demo(PERFWIRE_DEMO_BIN, {"600"});
    test_support::spawned sw(argv[0], {"--switcher", std::to_string(rate)});
    std::this_thread::sleep_for(500ms);
    // The probe once, kept for the runs (each run then records at once).
    (void)record(demo.pid(), 1, false, work);
    const auto s0 = switches(sw.pid());
    const auto t0 = std::chrono::steady_clock::now();
    std::this_thread::sleep_for(1s);
    const double reached =
        static_cast<double>(switches(sw.pid()) - s0) /
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("recording where threads wait: the agent --output for %d s, without and with "
                "--off-cpu\n",
                seconds);
    std::printf("%-22s %12s %12s %10s %10s\n", "workload", "bytes/s", "wire B/s", "agent %",
                "perf %");
    for (const auto& [name, pid] :
         {std::pair{"demo", demo.pid()}, std::pair{"switcher", sw.pid()}}) {
        const auto plain = record(pid, seconds, false, work);
        const auto off = record(pid, seconds, true, work);
        std::printf("%-22s %12.0f %12.0f %10.2f %10.2f\n", (std::string(name) + ", plain").c_str(),
                    plain.bytes_per_s, plain.wire_per_s, plain.agent_pct, plain.perf_pct);
        std::printf("%-22s %12.0f %12.0f %10.2f %10.2f   (%.2fx the bytes, %.2fx on the wire)\n",
                    (std::string(name) + ", --off-cpu").c_str(), off.bytes_per_s, off.wire_per_s,
                    off.agent_pct, off.perf_pct,
                    plain.bytes_per_s > 0 ? off.bytes_per_s / plain.bytes_per_s : 0.0,
                    plain.wire_per_s > 0 ? off.wire_per_s / plain.wire_per_s : 0.0);
        std::fflush(stdout);
    }
    std::printf("the switcher made %.0f switches a second (asked %d)\n", reached, rate);
    fs::remove_all(work);
    return 0;
}
