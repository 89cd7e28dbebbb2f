// Where the collector finds the symbols of a module that ran on a device: the device runs a
// stripped build, the developer's machine has the unstripped one or its debug files. In order:
//
//   --binary        a local copy with the device's build-id, else with the module's file name
//   --sysroot       the device's path under it (--sysroot / : the device is this machine;
//                   without one, an imported recording's path here, never an agent's)
//   debug dirs      DIR/.build-id/ab/cdef….debug (--debug-dir, repeatable; /usr/lib/debug)
//   .gnu_debuglink  of the local copy: next to it, in its .debug/, under each debug dir
//   build-id cache  perf's ~/.debug/.build-id/ab/cdef…
//   debuginfod      DEBUGINFOD_URLS, through libdebuginfod and its cache
//
// A file is taken only when its build-id is the one the agent reported (when it reported
// one); another build is refused and said so. The first with a symbol table wins; a stripped
// match is kept only when nothing better is found (its dynamic symbols still name exports).
#pragma once

#include "protocol/build_id.hpp"

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace collector {

struct symbol_config;

struct symbol_source {
    std::string path;   // the file symbols and lines are read from; empty when none was found
    std::string origin; // where it was found: "--binary", "--sysroot", "debug dir", …
    std::string build_id;
    protocol::elf_facts facts;
    std::vector<std::string> tried; // each place looked at and why it was not taken
    std::string fix;                // when nothing with a symbol table was found: what to do
    bool pending = false;           // a debuginfod answer is on its way
};

// A debuginfod client: the path of the debug file for a build-id once it is here; nullopt
// with `why` otherwise ("asked, waiting", "not on the server", …), and `pending` when an
// answer is still to come.
using debuginfod_lookup = std::function<std::optional<std::string>(
    const std::string& build_id, std::string& why, bool& pending)>;

// Given as the device's build-id for a recording the owner imported (no agent reported one):
// the module's path on this machine is then looked at even without a build-id to check. For
// an agent's session it never is: a file only the agent named is not read.
inline constexpr std::string_view owner_recording = "owner-recording";

// Whether `id` looks like a build-id (lowercase hex, 2 to 128 digits): an agent's word is
// only made into a path when it does.
bool plausible_build_id(const std::string& id);

// Why the collector may not open `path` as a program, debug or source file on the word of a
// device or of debug info, or nothing: only a regular file, never the kernel's (/proc, /sys,
// /dev) nor one under `peer_data_dirs` (the sessions folder: what peers sent, stored). `real`
// gets the resolved path, which is what is read (no link followed after the check).
std::string refuse_to_open(const std::string& path, const std::vector<std::string>& peer_data_dirs,
                           std::string& real);

// `device_build_id` may be empty (the agent did not report one): then nothing is refused for
// its build, and the build-id places are not looked at.
symbol_source locate_symbols(const symbol_config& c, const std::string& module,
                             const std::string& device_build_id,
                             const debuginfod_lookup& debuginfod = {});

} // namespace collector
