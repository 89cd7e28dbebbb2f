// symbolize: how fast sample sites become source lines.
//
// Takes every function symbol of a binary with debug info (default: the collector itself,
// a few MB of Boost and project code), makes one site per 16 bytes of each function, and
// resolves them all through the symbolizer twice:
//   cold   readelf + a fresh addr2line + every address through it (a view's first open)
//   warm   the same sites again, answered from the cache (every later refresh)
//
// Usage: symbolize [binary] [max sites, default 50000]
#include "collector/symbols/symbolizer.hpp"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>

using namespace collector;
using clock_type = std::chrono::steady_clock;

int main(int argc, char** argv) {
    const std::string binary = argc > 1 ? argv[1] : PERFWIRE_COLLECTOR_BIN;
    const std::size_t max_sites = argc > 2 ? std::strtoul(argv[2], nullptr, 10) : 50000;

    // Functions and their sizes from readelf (Value Size Type ... Name).
    const auto elf = run_capture({"readelf", "-sW", binary});
    if (elf.code != 0) {
        std::fprintf(stderr, "symbolize: readelf failed on %s\n", binary.c_str());
        return 1;
    }
    std::vector<symbolizer::site> sites;
    std::istringstream in(elf.out);
    for (std::string line; std::getline(in, line) && sites.size() < max_sites;) {
        std::istringstream f(line);
        std::string num, value, size, type, bind, vis, ndx, name;
        if (!(f >> num >> value >> size >> type >> bind >> vis >> ndx >> name) || type != "FUNC" ||
            ndx == "UND")
            continue;
        const auto bytes = std::strtoul(size.c_str(), nullptr, 10);
        const auto perf_name = perf_symbol_name(name);
        for (std::uint32_t off = 0; off < bytes && sites.size() < max_sites; off += 16)
            sites.push_back(
                {binary, perf_name, off, std::string(owner_recording)}); // the owner's own binary
    }

    symbolizer sym;
    auto t0 = clock_type::now();
    const auto cold = sym.resolve(sites);
    auto t1 = clock_type::now();
    const auto warm = sym.resolve(sites);
    auto t2 = clock_type::now();

    std::size_t placed = 0, inlined = 0;
    bool same = cold.size() == warm.size();
    for (std::size_t i = 0; i < cold.size(); ++i) {
        placed += !cold[i].chain.empty();
        inlined += cold[i].chain.size() > 1;
        same = same && cold[i].chain == warm[i].chain && cold[i].address == warm[i].address;
    }
    const double cold_s = std::chrono::duration<double>(t1 - t0).count();
    const double warm_s = std::chrono::duration<double>(t2 - t1).count();
    std::printf("binary: %s\n", binary.c_str());
    std::printf("sites: %zu (%zu placed on a line, %zu inside inlined code)\n", sites.size(),
                placed, inlined);
    std::printf("cold: %.2f s, %.0f sites/s (readelf, addr2line start, every address)\n", cold_s,
                static_cast<double>(sites.size()) / cold_s);
    std::printf("warm: %.3f s, %.0f sites/s (cached)\n", warm_s,
                static_cast<double>(sites.size()) / warm_s);
    return same ? 0 : 1;
}
