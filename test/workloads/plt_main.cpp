// A hot loop calling a shared library's function (plt_lib.cpp) through the PLT: many samples
// fall in the stub, which perf names plt_step@plt.
#include <chrono>
#include <cstdlib>

extern "C" unsigned plt_step(unsigned x);

namespace {
volatile unsigned sink;
} // namespace

int main(int argc, char** argv) {
    const double seconds = argc > 1 ? std::atof(argv[1]) : 2.0;
    const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    unsigned x = 1;
    while (std::chrono::steady_clock::now() < end) {
        for (int i = 0; i < 100000; ++i)
            x = plt_step(x);
        sink = x;
    }
    return 0;
}
