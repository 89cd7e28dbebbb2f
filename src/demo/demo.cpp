// perfwire-demo: the workload the README's demo and the integration tests profile.
//
//   main ── worker "demo-matrix"  : matrix_multiply        (~40 % of CPU, one hot inner loop)
//        ├─ worker "demo-hash"    : hash_strings           (~30 %)
//        ├─ worker "demo-recurse" : recursive_fib          (~20 %, deep recursion)
//        └─ main thread           : demo::sorter<int>::run (~10 %, a C++ template name)
//
// Usage: perfwire-demo [seconds]   (default: run until killed)
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <pthread.h>
#include <string>
#include <thread>
#include <vector>

namespace {

std::atomic<bool> stop{false};
volatile std::uint64_t sink; // keeps results alive without an optimizer barrier per call

__attribute__((noinline)) void matrix_multiply(const std::vector<double>& a,
                                               const std::vector<double>& b, std::vector<double>& c,
                                               int n) {
    for (int i = 0; i < n; ++i)
        for (int j = 0; j < n; ++j) {
            double sum = 0;
            for (int k = 0; k < n; ++k)
                sum += a[i * n + k] * b[k * n + j]; // the hot line
            c[i * n + j] = sum;
        }
}

__attribute__((noinline)) std::uint64_t hash_strings(const std::vector<std::string>& words) {
    std::uint64_t h = 1469598103934665603ULL;
    for (const auto& w : words)
        for (unsigned char ch : w)
            h = (h ^ ch) * 1099511628211ULL;
    return h;
}

__attribute__((noinline)) std::uint64_t recursive_fib(int n) {
    return n < 2 ? static_cast<std::uint64_t>(n) : recursive_fib(n - 1) + recursive_fib(n - 2);
}

void name_thread(const char* name) {
    pthread_setname_np(pthread_self(), name);
}

void matrix_worker() {
    name_thread("demo-matrix");
    const int n = 96;
    std::vector<double> a(n * n, 1.5), b(n * n, 0.5), c(n * n);
    while (!stop) {
        matrix_multiply(a, b, c, n);
        sink = static_cast<std::uint64_t>(c[7]);
    }
}

void hash_worker() {
    name_thread("demo-hash");
    std::vector<std::string> words;
    for (int i = 0; i < 20000; ++i)
        words.push_back("word-" + std::to_string(i * 7919));
    while (!stop)
        sink = hash_strings(words);
}

void recurse_worker() {
    name_thread("demo-recurse");
    while (!stop)
        sink = recursive_fib(24);
}

} // namespace

namespace demo {

template <class T>
struct sorter {
    __attribute__((noinline)) static void run(std::vector<T>& v, unsigned seed) {
        for (auto& x : v)
            x = static_cast<T>(seed = seed * 1103515245U + 12345U);
        std::sort(v.begin(), v.end());
    }
};

} // namespace demo

namespace {

// "2", "0.5": seconds to run; anything else (a flag, "1x", "-3") is refused.
bool parse_seconds(const char* text, double& out) {
    char* end = nullptr;
    out = std::strtod(text, &end);
    return end != text && *end == '\0' && out >= 0 && out < 1e9;
}

} // namespace

int main(int argc, char** argv) {
    const char* usage = "usage: perfwire-demo [seconds]   (a number; without it, run until "
                        "killed)\n";
    double seconds = 0;
    if (argc == 2 && (std::string(argv[1]) == "--help" || std::string(argv[1]) == "-h")) {
        std::fputs(usage, stdout);
        return 0;
    }
    if (argc > 2 || (argc == 2 && !parse_seconds(argv[1], seconds))) {
        std::fputs(usage, stderr);
        return 2;
    }
    std::vector<std::thread> threads;
    threads.emplace_back(matrix_worker);
    threads.emplace_back(hash_worker);
    threads.emplace_back(recurse_worker);

    const auto start = std::chrono::steady_clock::now();
    std::vector<int> v(4096);
    unsigned seed = 1;
    while (seconds <= 0 ||
           std::chrono::steady_clock::now() - start < std::chrono::duration<double>(seconds)) {
        demo::sorter<int>::run(v, seed++);
        std::this_thread::sleep_for(std::chrono::microseconds(300)); // lighter than the workers
    }
    stop = true;
    for (auto& t : threads)
        t.join();
    std::printf("perfwire-demo: done after %.1f s\n", seconds);
    return 0;
}
