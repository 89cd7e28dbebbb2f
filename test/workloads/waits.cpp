// A workload whose waits are known, for the off-cpu tests: thread "napper" sleeps 20 ms at a
// time in nap(), thread "reader" blocks in read_pipe() on a pipe that thread "feeder" writes a
// byte to every 30 ms, thread "waiter" blocks in take_lock() on a mutex that thread "holder"
// keeps 15 ms at a time, and thread "spinner" burns CPU. Each waiting thread measures its own
// waits (the wall time of each nanosleep and read), and at the end (its argument's seconds, or
// SIGTERM) the program prints per thread "<name> <tid> <waits> <total ns> <alive ns>" for the
// tests to hold the profile against. Built with frame pointers, nothing inlined.
#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <pthread.h>
#include <thread>
#include <unistd.h>

namespace {

std::atomic<bool> stop{false};
int fds[2];

struct measured {
    const char* name;
    std::atomic<long> tid{0};
    std::atomic<unsigned long long> waits{0}, total_ns{0};
    std::atomic<long long> born_ns{0}, alive_ns{0}; // the thread's life, to its loop's end
};
measured napper{"napper"}, reader{"reader"}, waiter{"waiter"};
pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

long long now_ns() {
    timespec t{};
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1000000000LL + t.tv_nsec;
}

void named(const char* name, measured* m) {
    pthread_setname_np(pthread_self(), name);
    if (m) {
        m->tid = gettid();
        m->born_ns = now_ns();
    }
}

__attribute__((noinline)) void nap() {
    const timespec t{0, 20'000'000};
    const auto t0 = now_ns();
    nanosleep(&t, nullptr);
    napper.total_ns += static_cast<unsigned long long>(now_ns() - t0);
    ++napper.waits;
}

__attribute__((noinline)) bool read_pipe() {
    char c;
    const auto t0 = now_ns();
    const auto n = read(fds[0], &c, 1);
    reader.total_ns += static_cast<unsigned long long>(now_ns() - t0);
    ++reader.waits;
    return n == 1;
}

__attribute__((noinline)) void take_lock() {
    // Free (the holder between its turns, as a loaded machine may make it): no wait to count,
    // and none perf sees.
    if (pthread_mutex_trylock(&lock) == 0) {
        pthread_mutex_unlock(&lock);
        return;
    }
    const auto t0 = now_ns();
    pthread_mutex_lock(&lock);
    waiter.total_ns += static_cast<unsigned long long>(now_ns() - t0);
    ++waiter.waits;
    pthread_mutex_unlock(&lock);
}

__attribute__((noinline)) void spin_a_while() {
    volatile unsigned x = 0;
    for (int i = 0; i < 100000; ++i)
        x = x * 3 + 1;
}

} // namespace

int main(int argc, char** argv) {
    const double seconds = argc > 1 ? std::atof(argv[1]) : 10.0;
    signal(SIGTERM, [](int) { stop = true; });
    if (pipe(fds) != 0)
        return 1;
    std::thread a([] {
        named("napper", &napper);
        while (!stop)
            nap();
        napper.alive_ns = now_ns() - napper.born_ns;
    });
    std::thread b([] {
        named("reader", &reader);
        while (!stop && read_pipe()) {
        }
        reader.alive_ns = now_ns() - reader.born_ns;
    });
    std::thread c([] {
        named("feeder", nullptr);
        while (!stop) {
            const timespec t{0, 30'000'000};
            nanosleep(&t, nullptr);
            (void)!write(fds[1], "x", 1);
        }
        close(fds[1]); // the reader's read ends
    });
    std::thread e([] {
        named("holder", nullptr);
        while (!stop) {
            pthread_mutex_lock(&lock);
            const timespec held{0, 15'000'000}, between{0, 2'000'000};
            nanosleep(&held, nullptr);
            pthread_mutex_unlock(&lock);
            nanosleep(&between, nullptr);
        }
    });
    std::thread f([] {
        named("waiter", &waiter);
        const timespec between{0, 3'000'000}; // (back while the holder holds it)
        while (!stop) {
            take_lock();
            nanosleep(&between, nullptr);
        }
        waiter.alive_ns = now_ns() - waiter.born_ns;
    });
    std::thread d([] {
        named("spinner", nullptr);
        while (!stop)
            spin_a_while();
    });
    const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    while (!stop && std::chrono::steady_clock::now() < end)
        usleep(10000);
    stop = true;
    for (auto* t : {&a, &b, &c, &d, &e, &f})
        t->join();
    for (const auto* m : {&napper, &reader, &waiter})
        std::printf("%s %ld %llu %llu %lld\n", m->name, m->tid.load(), m->waits.load(),
                    m->total_ns.load(), m->alive_ns.load());
    return 0;
}
