// Sample sites (leaf function + offset, in a module perf named) to source lines.
//
// Per binary: its function symbols (from readelf) turn "sym+off" into an address in the
// binary's own address space, and one long-lived `addr2line -a -f -i -C -e BIN` answers batches
// of addresses, each batch ended by a sentinel address so a variable number of inline lines is
// delimited. Answers are cached per binary. Runs on the thread pool (it blocks); one mutex
// serializes it across sessions.
//
// Where files are: a module's path on the device may differ from the collector's. --binary
// names local copies (matched by file name), --sysroot is prepended to module paths (like
// perf --symfs); source paths from the debug info go through --path-map FROM=TO and are then
// looked for under each --source-dir.
#pragma once

#include "collector/symbols/elf_symbols.hpp"
#include "collector/symbols/subprocess.hpp"

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace collector {

struct symbol_config {
    std::vector<std::string> binaries;
    std::vector<std::string> source_dirs;
    std::vector<std::pair<std::string, std::string>> path_map; // from -> to
    std::string toolchain_prefix;                              // e.g. "aarch64-linux-gnu-"
    std::string sysroot;
    bool inline_frames = true;
};

struct source_location {
    std::string file;
    std::uint32_t line = 0;
    std::string function;
    bool operator==(const source_location&) const = default;
};
// Where an address is: the innermost (inlined) location first, then the lines it was inlined
// at, out to the function that holds the code. Empty when addr2line cannot place it.
using source_chain = std::vector<source_location>;

// `addr2line -a -f [-i]` output for a batch -> one chain per address, in order.
std::vector<source_chain> parse_addr2line(const std::vector<std::string>& lines);

class symbolizer {
public:
    explicit symbolizer(symbol_config c = {});

    // Neither waits for a symbolization in progress (so the I/O thread may call them); a new
    // configuration takes effect at the next resolve, which forgets every binary and answer.
    symbol_config config() const;
    void configure(symbol_config c);

    struct site {
        std::string module, symbol;
        std::uint32_t offset = 0;
    };
    struct placement {
        std::optional<std::uint64_t> address; // in the binary's own address space
        source_chain chain;
    };
    // One placement per site, in order: the address when the local binary names the symbol,
    // the source lines when its debug info places that address.
    std::vector<placement> resolve(const std::vector<site>& sites);

    // The local binary used for a module, or why there is none.
    struct binary_status {
        std::string module, path, error;
        std::size_t symbols = 0;
        std::string build_id; // of the local copy; empty when it has none
    };
    std::vector<binary_status> binaries() const;

    // The readable local path of a source file named by the debug info, if any.
    std::optional<std::string> source_path(const std::string& file) const;

private:
    struct binary {
        std::string path, error, build_id;
        elf_symbols symbols;
        std::unique_ptr<coprocess> addr2line;
        std::unordered_map<std::uint64_t, source_chain> cache;
    };
    void refresh_config(); // under mutex_
    binary& load(const std::string& module);
    std::string local_binary(const std::string& module) const;
    void lookup(binary& b, const std::vector<std::uint64_t>& addresses);

    mutable std::mutex mutex_; // the binaries and the config in use
    symbol_config config_;
    mutable std::mutex next_mutex_; // the latest configuration
    symbol_config next_config_;
    std::uint64_t next_generation_ = 0, generation_ = 0;
    std::map<std::string, std::unique_ptr<binary>, std::less<>> binaries_; // by module
};

} // namespace collector
