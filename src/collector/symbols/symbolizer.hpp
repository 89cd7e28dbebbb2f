// Sample sites (leaf function + offset, in a module perf named) to source lines, and frames
// perf could not name (an address in a module) to functions.
//
// Per module and build: the file its symbols come from (locate.hpp: --binary, --sysroot,
// debug dirs, .gnu_debuglink, perf's build-id cache, debuginfod), that file's function
// symbols (from readelf) and load segments. They turn "sym+off" into an address in the
// binary's own address space, and a bare address into the function holding it. One
// long-lived `addr2line -a -f -i -C -e FILE` answers batches of addresses, each batch ended by
// a sentinel address so a variable number of inline lines is delimited. Answers are cached
// per file. Source lines run on the thread pool (they block); one mutex serializes them
// across sessions. Naming frames does not wait for them: it reads the symbol tables, loaded
// once per module under their own lock.
//
// Source paths from the debug info go through --path-map FROM=TO and are then looked for
// under each --source-dir.
#pragma once

#include "collector/symbols/elf_symbols.hpp"
#include "collector/symbols/kernel_symbols.hpp"
#include "collector/symbols/locate.hpp"
#include "collector/symbols/subprocess.hpp"

#include <chrono>
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
    std::vector<std::string> debug_dirs{"/usr/lib/debug"}; // each with .build-id/ab/cdef….debug
    std::string build_id_cache;                            // perf's; empty: $HOME/.debug
    // Device modules whose every frame is named here, not only those perf could not name
    // (the device's symbols are poor: perf gave exported names to static functions).
    std::vector<std::string> resymbolize;
    bool inline_frames = true;
    // Where the collector keeps what peers sent (the sessions folder): nothing under them is
    // ever opened as a program, debug or source file (locate.hpp, refuse_to_open). Set from
    // --sessions-dir, not from the UI.
    std::vector<std::string> peer_data_dirs;
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

// Modules (path + build-id) remembered; past it the one used longest ago is forgotten.
inline constexpr std::size_t max_modules = 4096;
// readelf's listing of one file's symbols; a larger one is not read.
inline constexpr std::size_t max_symbol_text = std::size_t{1} << 30;

class symbolizer {
public:
    explicit symbolizer(symbol_config c = {});

    // Neither waits for a symbolization in progress (so the I/O thread may call them); a new
    // configuration takes effect at once for naming and at the next resolve for lines, and
    // forgets every module and answer.
    symbol_config config() const;
    void configure(symbol_config c);
    // Counts configurations and new symbols (a debuginfod answer): a session named under an
    // older generation may name more now.
    std::uint64_t generation() const;

    // Debug files by build-id from a debuginfod server.
    void use_debuginfod(debuginfod_lookup lookup);
    // Forgets the modules still waiting for a debuginfod answer (the next use looks again)
    // and moves the generation on; what a debuginfod answer calls.
    void refresh();

    // Devices' kernel symbol tables, each distinct one held once.
    kernel_tables& kernels() noexcept { return kernels_; }
    const kernel_tables& kernels() const noexcept { return kernels_; }

    static constexpr std::size_t max_addr2line = 16;
    static constexpr std::chrono::seconds addr2line_idle{60};
    // Closes the addr2line processes idle for `idle`; skipped when a lookup holds them now
    // (never waits). Any thread. The processes left running. Also forgets the symbol tables
    // no lookup used for `table_idle` (the sessions that needed them are gone or saved).
    std::size_t close_idle(std::chrono::steady_clock::duration idle = addr2line_idle);
    static constexpr std::chrono::minutes table_idle{10};

    // What the modules' symbol tables may hold together (the sessions set a quarter of the
    // memory budget): past it the ones used longest ago are forgotten (read again when next
    // needed), and a file whose symbol listing alone would take half of it is not read (the
    // module's error says so). SIZE_MAX, the default: no bound.
    void set_table_limit(std::size_t bytes);
    // The bytes the symbol tables in memory hold, each file's once.
    std::size_t table_bytes() const;

    // A frame perf printed as "ADDR [unknown] (module)": the function holding it, from the
    // symbol file found for the module (build-id: the device's, may be empty). `address` is
    // perf's, a file offset; `offset` is the address's distance into the function.
    struct frame_name {
        std::string symbol;
        std::uint32_t offset = 0;
    };
    std::optional<frame_name> name_frame(const std::string& module, const std::string& build_id,
                                         std::uint64_t address);

    // Where functions of `module` share perf's name `symbol` and are told apart
    // (elf_symbols::same_named): each one's start in the symbol file and its own name. When
    // the module has such functions and `symbol` is one function's alone, that one's start (it
    // places the module in a process). Empty otherwise. Asks every module perf named, so it
    // reads only local symbol files (never debuginfod).
    struct function_start {
        std::uint64_t address = 0;
        std::string name;
    };
    std::vector<function_start> starts_of(const std::string& module, const std::string& build_id,
                                          const std::string& symbol);
    // Whether the table starts_of reads for `module` (build `build_id`) is in memory: reads
    // nothing, waits for no load. And the load itself (readelf: seconds for a large binary),
    // for a thread that may wait, before a parse that needs it (live_session.cpp).
    // `remote`: the table name_frame reads (debuginfod may be asked for it).
    bool has_table(const std::string& module, const std::string& build_id, bool remote = false);
    void load_table(const std::string& module, const std::string& build_id, bool remote = false);

    struct site {
        std::string module, symbol;
        std::uint32_t offset = 0;
        std::string build_id = {}; // the device's, when known
    };
    struct placement {
        std::optional<std::uint64_t> address; // in the binary's own address space
        source_chain chain;
    };
    // One placement per site, in order: the address when the symbol file names the symbol,
    // the source lines when its debug info places that address.
    std::vector<placement> resolve(const std::vector<site>& sites);

    // The machine code of function `symbol` in `module` (build-id: the device's), as the
    // toolchain's objdump disassembles it from the symbol file found for the module: each
    // instruction's distance into the function and its text. `error` says why there is none
    // (no symbols found, a debug file without the code, objdump failed). Blocks: on the pool.
    struct instruction {
        std::uint64_t offset = 0;
        std::string text;
    };
    struct disassembly {
        std::string file, error;
        std::uint64_t start = 0; // the function's address in the file
        std::vector<instruction> code;
    };
    disassembly disassemble(const std::string& module, const std::string& build_id,
                            const std::string& symbol);

    // For each module looked up so far: the file used and where it was found, or what was
    // tried and the fix.
    struct binary_status {
        std::string module, path, origin, error, fix;
        std::vector<std::string> tried;
        std::size_t symbols = 0;
        std::string build_id;        // of the file used; empty when it has none
        std::string device_build_id; // what the agent reported; empty when it did not
        bool pending = false;        // a debuginfod answer is on its way
    };
    std::vector<binary_status> binaries() const;

    // The readable local path of a source file named by the debug info, if any.
    std::optional<std::string> source_path(const std::string& file) const;

private:
    // One module (path + device build-id): where its symbols come from, and the table.
    struct module_symbols {
        std::string module, device_build_id;
        symbol_source source;
        std::shared_ptr<const elf_symbols> symbols; // nullptr: none (error says why)
        std::string error;
    };
    struct module_slot {
        std::mutex loading;
        std::shared_ptr<const module_symbols> value;
        std::uint64_t used = 0; // the symbolizer's use clock at the last lookup
        std::chrono::steady_clock::time_point last_use;
        std::chrono::steady_clock::time_point loaded_at;
        std::uint64_t generation = 0; // the symbolizer's generation the value was looked up in
        bool local_only = false;      // looked up without debuginfod
    };
    std::shared_ptr<const elf_symbols>
    file_symbols(const symbol_config& c, const symbol_source& source, std::string& error);
    // `remote`: debuginfod may be asked (when nothing local has the module's symbols). A
    // table looked up without it is looked up again when one with it is wanted and it has no
    // symbols.
    std::shared_ptr<const module_symbols> table(const std::string& module,
                                                const std::string& build_id, bool remote = true);
    // A debuginfod answer was pending when `slot` was filled, and it was filled before the
    // last answer arrived or long enough ago to ask again. Under config_mutex_.
    bool stale(const module_slot& slot, std::chrono::steady_clock::time_point now) const;
    // `slot` holds a table a lookup with (`remote`) or without debuginfod may use.
    static bool usable(const module_slot& slot, bool remote);
    // Lines: an addr2line per symbol file, while it is in use. At most `max_addr2line` run at
    // once (the least recently used is closed for a new one) and one idle for `addr2line_idle`
    // is closed (close_idle); what they answered stays cached, and a closed one starts again
    // when its file is asked about.
    struct binary {
        std::string error;
        // A process that could not start (descriptors or memory short for a moment) is tried
        // again after this; one that stopped answering is not (each try would hold a view).
        std::optional<std::chrono::steady_clock::time_point> retry_at;
        std::unique_ptr<coprocess> addr2line;
        std::unordered_map<std::uint64_t, source_chain> cache;
        std::chrono::steady_clock::time_point used{};
    };
    binary& lines_for(const module_symbols& m);
    static constexpr std::chrono::seconds addr2line_retry{30};
    void start_addr2line(binary& b, const std::string& path);
    void lookup(binary& b, const std::string& path, const std::vector<std::uint64_t>& addresses);

    // The last functions disassembled (file + symbol), a live view asking again each second.
    std::mutex disassembled_mutex_;
    std::map<std::string, disassembly> disassembled_;
    mutable std::mutex config_mutex_; // config_, generation_, tables_, the debuginfod hooks
    symbol_config config_;
    std::uint64_t generation_ = 0;
    std::map<std::string, std::shared_ptr<module_slot>, std::less<>> tables_; // module \0 id
    std::size_t table_limit_ = SIZE_MAX;
    // Under config_mutex_: the tables' bytes, and the ones used longest ago (never `keep`)
    // forgotten until they are within table_limit_.
    std::size_t table_bytes_locked() const;
    void fit_tables_locked(const module_slot* keep);
    std::uint64_t use_clock_ = 0;
    std::map<std::string, std::weak_ptr<const elf_symbols>> files_; // by file path
    debuginfod_lookup debuginfod_;

    kernel_tables kernels_;

    mutable std::mutex mutex_; // source lines: the addr2line processes
    std::uint64_t lines_generation_ = 0;
    symbol_config lines_config_;
    std::map<std::string, binary, std::less<>> binaries_; // by symbol file path
};

} // namespace collector
