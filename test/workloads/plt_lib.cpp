// The shared library of the PLT workload (plt_main.cpp): one small function, called through
// the program's PLT.
extern "C" unsigned plt_step(unsigned x) {
    return x * 2654435761U + 1U;
}
