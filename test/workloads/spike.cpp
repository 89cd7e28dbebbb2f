// A workload that idles, then spikes, for the flight recorder's tests: "ticks" a little
// (2 ms of work every 100 ms, so the quiet time has samples) until SIGUSR1 comes (or its first
// argument's seconds pass), then spins in spike_hot() until it had its second's of CPU, then
// ticks again for its third's. It
// prints "spiking" as the spike begins, and "spike <tid> <cpu ns> <start ns> <end ns>" once it is
// over: the spike's own CPU time
// (CLOCK_THREAD_CPUTIME_ID) and when it began and ended (CLOCK_MONOTONIC, perf's clock).
// Built with frame pointers, nothing inlined.
#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <unistd.h>

namespace {

std::atomic<bool> go{false};

long long now_ns(clockid_t clock) {
    timespec t{};
    clock_gettime(clock, &t);
    return t.tv_sec * 1000000000LL + t.tv_nsec;
}

__attribute__((noinline)) void work_for(long long ns) {
    const auto end = now_ns(CLOCK_MONOTONIC) + ns;
    volatile unsigned x = 0;
    while (now_ns(CLOCK_MONOTONIC) < end)
        for (int i = 0; i < 1000; ++i)
            x = x * 3 + 1;
}

__attribute__((noinline)) void idle_tick(double seconds, bool until_told = false) {
    const auto end = now_ns(CLOCK_MONOTONIC) + static_cast<long long>(seconds * 1e9);
    while (now_ns(CLOCK_MONOTONIC) < end && !(until_told && go)) {
        work_for(2'000'000);
        usleep(98'000);
    }
}

// Until the thread has had `seconds` of CPU (a loaded machine gives it less than a core),
// at most ten times as long on the clock.
__attribute__((noinline)) void spike_hot(double seconds) {
    const auto cpu_end = now_ns(CLOCK_THREAD_CPUTIME_ID) + static_cast<long long>(seconds * 1e9);
    const auto wall_end = now_ns(CLOCK_MONOTONIC) + static_cast<long long>(10 * seconds * 1e9);
    while (now_ns(CLOCK_THREAD_CPUTIME_ID) < cpu_end && now_ns(CLOCK_MONOTONIC) < wall_end)
        work_for(1'000'000);
}

} // namespace

int main(int argc, char** argv) {
    const double quiet = argc > 1 ? std::atof(argv[1]) : 25,
                 spike = argc > 2 ? std::atof(argv[2]) : 3,
                 after = argc > 3 ? std::atof(argv[3]) : 15;
    signal(SIGUSR1, [](int) { go = true; });
    idle_tick(quiet, true);
    std::printf("spiking\n");
    std::fflush(stdout);
    const auto cpu0 = now_ns(CLOCK_THREAD_CPUTIME_ID), t0 = now_ns(CLOCK_MONOTONIC);
    spike_hot(spike);
    const auto cpu1 = now_ns(CLOCK_THREAD_CPUTIME_ID), t1 = now_ns(CLOCK_MONOTONIC);
    std::printf("spike %d %lld %lld %lld\n", static_cast<int>(gettid()), cpu1 - cpu0, t0, t1);
    std::fflush(stdout);
    idle_tick(after);
    return 0;
}
