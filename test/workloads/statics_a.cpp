// Two files, each with a static work() of its own (the other is in statics_b.cpp): perf names
// both "work", the collector tells them apart by where each starts. This file's work() costs
// about three times the other's. Built like callsites.cpp (test/workloads/CMakeLists.txt).
#include <chrono>
#include <cstdlib>

unsigned run_b(unsigned x); // statics_b.cpp

namespace {
volatile unsigned sink;
} // namespace

// work() ends in a call so that it keeps its frame pointer (see callsites.cpp).
__attribute__((noinline)) unsigned mix_a(unsigned x) {
    return x ^ 0x9e3779b9U;
}

// Each work() starts a page (so does statics_b.cpp's): their place in a page does not tell
// them apart, where the program is loaded does.
static __attribute__((noinline, aligned(4096))) unsigned work(unsigned x) {
    for (int i = 0; i < 30000; ++i)
        x = x * 1664525U + 1013904223U; // statics_a: the costly loop
    return mix_a(x);
}

int main(int argc, char** argv) {
    const double seconds = argc > 1 ? std::atof(argv[1]) : 2.0;
    const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    while (std::chrono::steady_clock::now() < end)
        for (int i = 0; i < 20; ++i)
            sink = run_b(work(sink)); // main calls its work()
    return 0;
}
