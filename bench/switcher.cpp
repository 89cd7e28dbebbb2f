// A workload whose hot function changes at known instants, for bench/live_latency: it spins in
// hot_00, then hot_01, … for a fixed time each, and before each switch prints
// "<k> <wall-clock ns>" (CLOCK_REALTIME) on stdout, flushed, so a reader knows when each
// function became the hot one.
//
//   perfwire-switcher [milliseconds per function, default 1500] [functions, default 40]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>

namespace {

volatile unsigned long sink;

using clock_type = std::chrono::steady_clock;

// The same loop under forty names. noinline and extern "C": each is a frame of its own that
// perf names plainly.
#define PERFWIRE_HOT(N)                                                                            \
    extern "C" __attribute__((noinline)) void hot_##N(clock_type::time_point until) {              \
        unsigned long x = 0;                                                                       \
        while (clock_type::now() < until)                                                          \
            for (int i = 0; i < 10000; ++i)                                                        \
                x = x * 6364136223846793005UL + 1442695040888963407UL;                             \
        sink = x;                                                                                  \
    }
PERFWIRE_HOT(00)
PERFWIRE_HOT(01)
PERFWIRE_HOT(02)
PERFWIRE_HOT(03)
PERFWIRE_HOT(04)
PERFWIRE_HOT(05)
PERFWIRE_HOT(06)
PERFWIRE_HOT(07)
PERFWIRE_HOT(08)
PERFWIRE_HOT(09)
PERFWIRE_HOT(10)
PERFWIRE_HOT(11)
PERFWIRE_HOT(12)
PERFWIRE_HOT(13)
PERFWIRE_HOT(14)
PERFWIRE_HOT(15)
PERFWIRE_HOT(16)
PERFWIRE_HOT(17)
PERFWIRE_HOT(18)
PERFWIRE_HOT(19)
PERFWIRE_HOT(20)
PERFWIRE_HOT(21)
PERFWIRE_HOT(22)
PERFWIRE_HOT(23)
PERFWIRE_HOT(24)
PERFWIRE_HOT(25)
PERFWIRE_HOT(26)
PERFWIRE_HOT(27)
PERFWIRE_HOT(28)
PERFWIRE_HOT(29)
PERFWIRE_HOT(30)
PERFWIRE_HOT(31)
PERFWIRE_HOT(32)
PERFWIRE_HOT(33)
PERFWIRE_HOT(34)
PERFWIRE_HOT(35)
PERFWIRE_HOT(36)
PERFWIRE_HOT(37)
PERFWIRE_HOT(38)
PERFWIRE_HOT(39)
#undef PERFWIRE_HOT

using hot_fn = void (*)(clock_type::time_point);
constexpr hot_fn hot[] = {
    hot_00, hot_01, hot_02, hot_03, hot_04, hot_05, hot_06, hot_07, hot_08, hot_09,
    hot_10, hot_11, hot_12, hot_13, hot_14, hot_15, hot_16, hot_17, hot_18, hot_19,
    hot_20, hot_21, hot_22, hot_23, hot_24, hot_25, hot_26, hot_27, hot_28, hot_29,
    hot_30, hot_31, hot_32, hot_33, hot_34, hot_35, hot_36, hot_37, hot_38, hot_39,
};
constexpr int max_functions = sizeof hot / sizeof hot[0];

} // namespace

int main(int argc, char** argv) {
    const int ms = argc > 1 ? std::atoi(argv[1]) : 1500;
    int n = argc > 2 ? std::atoi(argv[2]) : max_functions;
    if (ms <= 0 || n <= 0 || n > max_functions) {
        std::fprintf(stderr, "usage: perfwire-switcher [ms per function] [functions, 1-%d]\n",
                     max_functions);
        return 2;
    }
    for (int k = 0; k < n; ++k) {
        timespec now{};
        ::clock_gettime(CLOCK_REALTIME, &now);
        std::printf("%d %lld\n", k,
                    static_cast<long long>(now.tv_sec) * 1000000000LL + now.tv_nsec);
        std::fflush(stdout);
        hot[k](clock_type::now() + std::chrono::milliseconds(ms));
    }
    return 0;
}
