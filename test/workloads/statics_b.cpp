// The other static work() (see statics_a.cpp), a third of that one's cost.
__attribute__((noinline)) unsigned mix_b(unsigned x) {
    return x + 0x7f4a7c15U;
}

static __attribute__((noinline, aligned(4096))) unsigned work(unsigned x) {
    for (int i = 0; i < 10000; ++i)
        x = x * 22695477U + 1U; // statics_b: the cheap loop
    return mix_b(x);
}

__attribute__((noinline)) unsigned run_b(unsigned x) {
    return work(x) + 1; // run_b calls its work()
}
