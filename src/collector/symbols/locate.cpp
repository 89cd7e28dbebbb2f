#include "collector/symbols/locate.hpp"

#include "collector/symbols/symbolizer.hpp"

#include <cstdlib>
#include <filesystem>
#include <system_error>

namespace collector {
namespace fs = std::filesystem;
namespace {

bool is_under(const fs::path& real, const fs::path& root) {
    const auto rel = real.lexically_relative(root);
    return !rel.empty() && *rel.begin() != "..";
}

} // namespace

std::string refuse_to_open(const std::string& path, const std::vector<std::string>& peer_data_dirs,
                           std::string& real_path) {
    std::error_code ec;
    const fs::path real = fs::canonical(path, ec);
    if (ec || !fs::is_regular_file(real, ec))
        return "not found";
    for (const char* kernel : {"/proc", "/sys", "/dev"})
        if (is_under(real, kernel))
            return "the kernel's, never read";
    for (const auto& dir : peer_data_dirs) {
        const fs::path root = fs::weakly_canonical(dir, ec);
        if (!dir.empty() && !ec && is_under(real, root))
            return "written by the collector from what peers sent, never read as a program, "
                   "debug or source file";
    }
    real_path = real.string();
    return {};
}

namespace {

std::string without_deleted(std::string m) {
    if (const auto del = m.find(" (deleted)"); del != std::string::npos)
        m.erase(del);
    return m;
}

class search {
public:
    search(const std::string& device_build_id, const std::vector<std::string>& peer_data_dirs,
           symbol_source& out)
        : device_(device_build_id)
        , peer_data_dirs_(peer_data_dirs)
        , out_(out) {}

    // Looks at one candidate; true once one with a symbol table is taken.
    bool consider(const std::string& path, const std::string& origin) {
        if (path.empty())
            return false;
        const std::string where = origin + " " + path;
        std::string real;
        if (auto why = refuse_to_open(path, peer_data_dirs_, real); !why.empty()) {
            out_.tried.push_back(where + ": " + why);
            return false;
        }
        auto facts = protocol::read_elf_facts(real);
        if (!facts) {
            out_.tried.push_back(where + ": not an ELF file");
            return false;
        }
        const std::string id = facts->build_id.value_or("");
        if (!device_.empty() && id != device_) {
            out_.tried.push_back(where + ": another build (build-id " + (id.empty() ? "none" : id) +
                                 ", the device ran " + device_ + "), not used");
            return false;
        }
        if (!local_)
            local_ = symbol_source{real, origin, id, *facts, {}, {}, false};
        if (!facts->symtab) {
            out_.tried.push_back(where + ": stripped (no symbol table)");
            return false;
        }
        out_.path = real;
        out_.origin = origin;
        out_.build_id = id;
        out_.facts = std::move(*facts);
        return true;
    }

    // The first matching file seen, even a stripped one: its .gnu_debuglink names the rest,
    // its segments are where the binary's bytes are, and without anything better its dynamic
    // symbols are taken.
    const std::optional<symbol_source>& local_copy() const { return local_; }

    // Nothing with symbols: that local copy, if any.
    void settle() {
        if (out_.path.empty() && local_) {
            out_.path = local_->path;
            out_.origin = local_->origin;
            out_.build_id = local_->build_id;
            out_.facts = local_->facts;
        }
    }

private:
    const std::string& device_;
    const std::vector<std::string>& peer_data_dirs_;
    symbol_source& out_;
    std::optional<symbol_source> local_;
};

std::string home_debug_cache() {
    const char* home = std::getenv("HOME");
    return home && *home ? std::string(home) + "/.debug" : std::string();
}

} // namespace

bool plausible_build_id(const std::string& id) {
    if (id.size() < 2 || id.size() > 128)
        return false;
    for (const char c : id)
        if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')))
            return false;
    return true;
}

symbol_source locate_symbols(const symbol_config& c, const std::string& module_path,
                             const std::string& device_build_id,
                             const debuginfod_lookup& debuginfod) {
    symbol_source out;
    if (module_path.empty() || module_path.front() != '/') {
        out.tried.push_back(module_path + ": not a file (the kernel, vdso, JIT code)");
        return out;
    }
    // The agent's words: a path as the kernel writes it (no "..", "." or "//"), a build-id
    // that is hex; anything else is looked up nowhere.
    const std::string module = without_deleted(module_path);
    if (fs::path(module).lexically_normal().string() != module ||
        module.find("/..") != std::string::npos) {
        out.tried.push_back(module + ": not a plain path, not looked up");
        return out;
    }
    const bool own = device_build_id == owner_recording;
    if (!own && !device_build_id.empty() && !plausible_build_id(device_build_id)) {
        out.tried.push_back("the agent reported a build-id that is not one; not looked up");
        return out;
    }
    const std::string id = own ? std::string() : device_build_id;
    const fs::path name = fs::path(module).filename();
    search s(id, c.peer_data_dirs, out);

    // --binary: the device's build first, then by file name (which the build-id check may
    // still refuse).
    bool done = false;
    if (!id.empty())
        for (const auto& b : c.binaries)
            if (!done && protocol::read_build_id(b).value_or("") == id)
                done = s.consider(b, "--binary");
    for (const auto& b : c.binaries)
        if (!done && (b == module || fs::path(b).filename() == name))
            done = s.consider(b, "--binary");
    if (!done) {
        if (!c.sysroot.empty()) {
            // Inside the sysroot, links included.
            std::error_code ec;
            const auto root = fs::weakly_canonical(c.sysroot, ec);
            const auto under =
                fs::weakly_canonical(fs::path(c.sysroot) / fs::path(module).relative_path(), ec);
            const auto rel = under.lexically_relative(root);
            if (!ec && !rel.empty() && *rel.begin() != "..")
                done = s.consider(under.string(), "--sysroot");
            else
                out.tried.push_back("--sysroot " + c.sysroot + module + ": leads outside it");
        } else if (own) {
            // The owner's own recording: the module's path on this machine. An agent's word
            // is looked up only where the owner said the device's files are (--sysroot /
            // when the agent runs on this machine).
            done = s.consider(module, "the device's path");
        }
    }
    const std::string hex_head = id.size() > 2 ? id.substr(0, 2) : std::string();
    const std::string hex_tail = id.size() > 2 ? id.substr(2) : std::string();
    if (!done && !id.empty())
        for (const auto& dir : c.debug_dirs)
            if (!done && !dir.empty())
                done = s.consider(dir + "/.build-id/" + hex_head + "/" + hex_tail + ".debug",
                                  "debug dir");
    if (!done && s.local_copy()) {
        const std::string& link = s.local_copy()->facts.debuglink;
        if (!link.empty() && link.find('/') == std::string::npos && link != "." && link != "..") {
            const fs::path dir = fs::path(s.local_copy()->path).parent_path();
            for (const fs::path& p : {dir / link, dir / ".debug" / link})
                if (!done)
                    done = s.consider(p.string(), ".gnu_debuglink");
            for (const auto& d : c.debug_dirs)
                if (!done && !d.empty())
                    done = s.consider(
                        (fs::path(d) / fs::path(module).parent_path().relative_path() / link)
                            .string(),
                        ".gnu_debuglink");
        }
    }
    if (!done && !id.empty()) {
        const std::string cache = c.build_id_cache.empty() ? home_debug_cache() : c.build_id_cache;
        if (!cache.empty()) {
            // Newer perf keeps a directory per build-id (elf, debug); older a link to the file.
            const std::string entry = cache + "/.build-id/" + hex_head + "/" + hex_tail;
            std::error_code ec;
            if (fs::is_directory(entry, ec)) {
                for (const char* f : {"/debug", "/elf"})
                    if (!done)
                        done = s.consider(entry + f, "perf's build-id cache");
            } else {
                done = s.consider(entry, "perf's build-id cache");
            }
        }
    }
    if (!done && !id.empty() && debuginfod) {
        std::string why;
        bool pending = false;
        if (auto path = debuginfod(id, why, pending))
            done = s.consider(*path, "debuginfod");
        else
            out.tried.push_back("debuginfod: " + why);
        out.pending = pending;
    }
    s.settle();
    // A debug file has lost where the binary's segments were: a local copy of that build
    // still knows; otherwise they are laid out again as the linker did.
    if (!out.path.empty() && protocol::offsets_lost(out.facts)) {
        const auto& local = s.local_copy();
        out.facts.loads = local && !protocol::offsets_lost(local->facts)
                              ? local->facts.loads
                              : protocol::rebuild_offsets(std::move(out.facts.loads));
    }
    if (!done)
        out.fix = id.empty() ? "no build-id is known for " + module +
                                   " (none reported): give its unstripped copy with --binary"
                             : "give the unstripped build with --binary, its debug files with "
                               "--debug-dir DIR (DIR/.build-id/" +
                                   hex_head + "/" + hex_tail +
                                   ".debug), install its -dbgsym package, set DEBUGINFOD_URLS, "
                                   "or --sysroot / when the device is this machine";
    return out;
}

} // namespace collector
