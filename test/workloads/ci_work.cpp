// A benchmark as a CI job runs it: a fixed amount of work in three functions (parse_input 30 %,
// hash_blocks 45 %, render_output 25 % of the rounds' time), on two threads, so its samples
// are set by the work, not by the machine's load. A variant makes one function slower by a
// share of its work: `perfwire-ci-work ROUNDS [FUNCTION:PERCENT]`, e.g. hash_blocks:30.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

namespace {

volatile std::uint64_t sink;
double slower[3] = {1, 1, 1};
const char* const names[3] = {"parse_input", "hash_blocks", "render_output"};

// A dependent chain the compiler cannot shorten: time in proportion to `n`.
std::uint64_t spin(std::uint64_t n, std::uint64_t x) {
    for (std::uint64_t i = 0; i < n; ++i) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
    }
    return x;
}

constexpr std::uint64_t unit = 20000; // iterations in a round per share point

__attribute__((noinline)) std::uint64_t parse_input(std::uint64_t x) {
    return spin(static_cast<std::uint64_t>(30 * unit * slower[0]), x);
}
__attribute__((noinline)) std::uint64_t hash_blocks(std::uint64_t x) {
    return spin(static_cast<std::uint64_t>(45 * unit * slower[1]), x);
}
__attribute__((noinline)) std::uint64_t render_output(std::uint64_t x) {
    return spin(static_cast<std::uint64_t>(25 * unit * slower[2]), x);
}

__attribute__((noinline)) void run_benchmark(long rounds, std::uint64_t seed) {
    std::uint64_t x = seed | 1;
    for (long r = 0; r < rounds; ++r)
        x = render_output(hash_blocks(parse_input(x)));
    sink = x;
}

} // namespace

int main(int argc, char** argv) {
    if (argc < 2) {
        std::fprintf(stderr, "usage: perfwire-ci-work ROUNDS [FUNCTION:PERCENT]\n");
        return 2;
    }
    const long rounds = std::atol(argv[1]);
    for (int a = 2; a < argc; ++a) {
        const char* colon = std::strchr(argv[a], ':');
        bool known = false;
        for (int f = 0; colon && f < 3; ++f)
            if (std::string(argv[a], static_cast<std::size_t>(colon - argv[a])) == names[f]) {
                slower[f] = 1 + std::atof(colon + 1) / 100;
                known = true;
            }
        if (!known) {
            std::fprintf(stderr, "perfwire-ci-work: no function %s\n", argv[a]);
            return 2;
        }
    }
    std::thread other(run_benchmark, rounds / 2, 7);
    run_benchmark(rounds - rounds / 2, 11);
    other.join();
    return 0;
}
