// A workload whose cost sits at one call site among several, for the call-site tests: work()
// calls cheap() twice and costly() once; nearly all of its time is below the costly() call.
// Built with frame pointers and debug info, nothing inlined (test/workloads/CMakeLists.txt).
#include <chrono>
#include <cstdlib>

namespace {

volatile unsigned sink;

// Each loop ends in a call, so that it is no leaf: a compiler leaves the frame pointer out of
// a leaf even with -fno-omit-frame-pointer, and perf's unwinding would then skip its caller.
__attribute__((noinline)) unsigned finish(unsigned x) {
    return x ^ 0x5bd1e995U;
}

__attribute__((noinline)) unsigned cheap(unsigned x) {
    for (int i = 0; i < 50; ++i)
        x = x * 3 + 1;
    return finish(x);
}

__attribute__((noinline)) unsigned costly(unsigned x) {
    for (int i = 0; i < 20000; ++i)
        x = x * 1664525U + 1013904223U;
    return finish(x);
}

__attribute__((noinline)) void work() {
    const unsigned a = cheap(1);  // the first cheap call
    const unsigned b = costly(a); // the costly call
    const unsigned c = cheap(b);  // the second cheap call
    sink = a + b + c;
}

} // namespace

int main(int argc, char** argv) {
    const double seconds = argc > 1 ? std::atof(argv[1]) : 2.0;
    const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    while (std::chrono::steady_clock::now() < end)
        for (int i = 0; i < 100; ++i)
            work();
    return 0;
}
