#include "collector/symbols/symbolizer.hpp"

#include "protocol/build_id.hpp"

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <filesystem>
#include <set>
#include <system_error>

namespace collector {
namespace fs = std::filesystem;
namespace {

constexpr std::uint64_t sentinel = ~std::uint64_t{0};
constexpr std::string_view sentinel_text = "0xffffffffffffffff";
constexpr std::size_t batch_size = 4096;
constexpr auto tool_timeout = std::chrono::seconds(60); // big DWARF can take a while to load

bool is_address_line(std::string_view l) {
    if (l.size() < 3 || l[0] != '0' || l[1] != 'x')
        return false;
    for (std::size_t i = 2; i < l.size(); ++i)
        if (!std::isxdigit(static_cast<unsigned char>(l[i])))
            return false;
    return true;
}

// "file:line", "file:line (discriminator 3)", "??:0", "file:?"
std::optional<std::pair<std::string, std::uint32_t>> parse_location(std::string_view l) {
    if (const auto d = l.find(" (discriminator"); d != std::string_view::npos)
        l = l.substr(0, d);
    const auto colon = l.rfind(':');
    if (colon == std::string_view::npos || colon == 0)
        return std::nullopt;
    const auto file = l.substr(0, colon);
    std::uint32_t line = 0;
    for (char c : l.substr(colon + 1)) {
        if (c < '0' || c > '9')
            return std::nullopt;
        line = line * 10 + static_cast<std::uint32_t>(c - '0');
    }
    if (line == 0 || file == "??")
        return std::nullopt;
    return std::pair{std::string(file), line};
}

} // namespace

std::vector<source_chain> parse_addr2line(const std::vector<std::string>& lines) {
    std::vector<source_chain> out;
    std::size_t i = 0;
    while (i < lines.size()) {
        if (!is_address_line(lines[i])) {
            ++i;
            continue;
        }
        if (lines[i] == sentinel_text)
            break;
        ++i;
        source_chain chain;
        // Pairs of (function, file:line), innermost first.
        for (; i + 1 < lines.size() && !is_address_line(lines[i]); i += 2)
            if (auto where = parse_location(lines[i + 1]))
                chain.push_back({std::move(where->first), where->second, lines[i]});
        out.push_back(std::move(chain));
    }
    return out;
}

symbolizer::symbolizer(symbol_config c)
    : config_(c)
    , lines_config_(std::move(c)) {}

symbol_config symbolizer::config() const {
    std::lock_guard lock(config_mutex_);
    return config_;
}

std::uint64_t symbolizer::generation() const {
    std::lock_guard lock(config_mutex_);
    return generation_;
}

void symbolizer::configure(symbol_config c) {
    std::lock_guard lock(config_mutex_);
    config_ = std::move(c);
    ++generation_;
    tables_.clear();
    files_.clear(); // toolchain_prefix may have changed
}

void symbolizer::refresh() {
    std::lock_guard lock(config_mutex_);
    ++generation_;
    for (auto it = tables_.begin(); it != tables_.end();)
        it = it->second->value && it->second->value->source.pending ? tables_.erase(it)
                                                                    : std::next(it);
}

void symbolizer::use_debuginfod(debuginfod_lookup lookup) {
    std::lock_guard lock(config_mutex_);
    debuginfod_ = std::move(lookup);
}

bool symbolizer::usable(const module_slot& slot, bool remote) {
    // Local files are looked at first: one found without debuginfod is the one it would give.
    return slot.value && (!remote || !slot.local_only || slot.value->symbols);
}

bool symbolizer::stale(const module_slot& slot, std::chrono::steady_clock::time_point now) const {
    return slot.value && slot.value->source.pending &&
           (slot.generation != generation_ || now - slot.loaded_at > std::chrono::seconds(2));
}

std::shared_ptr<const symbolizer::module_symbols>
symbolizer::table(const std::string& module, const std::string& build_id, bool remote) {
    std::shared_ptr<module_slot> slot;
    symbol_config c;
    debuginfod_lookup debuginfod;
    std::uint64_t generation = 0;
    const auto now = std::chrono::steady_clock::now();
    {
        std::lock_guard lock(config_mutex_);
        const std::string key = module + '\0' + build_id;
        auto it = tables_.find(key);
        if (it == tables_.end()) {
            // Module paths and build-ids come from agents: past the bound, the one used
            // longest ago is forgotten (looked up again if it is asked for again).
            if (tables_.size() >= max_modules) {
                auto oldest = tables_.begin();
                for (auto t = tables_.begin(); t != tables_.end(); ++t)
                    if (t->second->used < oldest->second->used)
                        oldest = t;
                tables_.erase(oldest);
            }
            it = tables_.emplace(key, std::make_shared<module_slot>()).first;
        }
        slot = it->second;
        slot->used = ++use_clock_;
        slot->last_use = now;
        // An answer still on its way (debuginfod): looked for again now and then, and at
        // once when one arrived since (a lookup in flight then may have missed it).
        if (stale(*slot, now))
            slot->value.reset();
        if (usable(*slot, remote))
            return slot->value;
        c = config_;
        debuginfod = debuginfod_;
        generation = generation_;
    }
    std::lock_guard loading(slot->loading);
    {
        std::lock_guard lock(config_mutex_);
        if (usable(*slot, remote) && !stale(*slot, now))
            return slot->value;
    }
    auto m = std::make_shared<module_symbols>();
    m->module = module;
    m->device_build_id = build_id;
    m->source = locate_symbols(c, module, build_id, remote ? debuginfod : debuginfod_lookup());
    if (m->source.path.empty())
        m->error = "no symbols found for " + module;
    else
        m->symbols = file_symbols(c, m->source, m->error);
    std::lock_guard lock(config_mutex_);
    slot->value = m;
    slot->loaded_at = now;
    slot->generation = generation;
    slot->local_only = !remote;
    fit_tables_locked(slot.get());
    return m;
}

void symbolizer::set_table_limit(std::size_t bytes) {
    std::lock_guard lock(config_mutex_);
    table_limit_ = bytes;
    fit_tables_locked(nullptr);
}

std::size_t symbolizer::table_bytes() const {
    std::lock_guard lock(config_mutex_);
    return table_bytes_locked();
}

std::size_t symbolizer::table_bytes_locked() const {
    std::set<const elf_symbols*> held; // (modules may share a file's table)
    std::size_t bytes = 0;
    for (const auto& [key, slot] : tables_)
        if (slot->value && slot->value->symbols && held.insert(slot->value->symbols.get()).second)
            bytes += slot->value->symbols->memory_bytes();
    return bytes;
}

void symbolizer::fit_tables_locked(const module_slot* keep) {
    if (table_limit_ == SIZE_MAX)
        return;
    // Counted once; a forgotten table's bytes taken off unless another module still holds it.
    for (std::size_t held = table_bytes_locked(); held > table_limit_;) {
        auto oldest = tables_.end();
        for (auto t = tables_.begin(); t != tables_.end(); ++t)
            if (t->second.get() != keep && t->second->value && t->second->value->symbols &&
                (oldest == tables_.end() || t->second->used < oldest->second->used))
                oldest = t;
        if (oldest == tables_.end())
            return;
        const auto table = oldest->second->value->symbols;
        tables_.erase(oldest);
        if (std::none_of(tables_.begin(), tables_.end(), [&](const auto& t) {
                return t.second->value && t.second->value->symbols == table;
            }))
            held -= std::min(held, table->memory_bytes());
    }
}

bool symbolizer::has_table(const std::string& module, const std::string& build_id, bool remote) {
    std::lock_guard lock(config_mutex_);
    const auto it = tables_.find(module + '\0' + build_id);
    return it != tables_.end() && usable(*it->second, remote) &&
           !stale(*it->second, std::chrono::steady_clock::now());
}

void symbolizer::load_table(const std::string& module, const std::string& build_id, bool remote) {
    (void)table(module, build_id, remote);
}

std::shared_ptr<const elf_symbols>
symbolizer::file_symbols(const symbol_config& c, const symbol_source& source, std::string& error) {
    // One table per file, whichever modules and builds it serves.
    const bool thumb = source.facts.machine == 40; // EM_ARM: its symbols read differently
    const std::string key = source.path + (thumb ? "\0thumb" : "");
    std::size_t text_limit = max_symbol_text;
    {
        std::lock_guard lock(config_mutex_);
        if (const auto it = files_.find(key); it != files_.end())
            if (auto shared = it->second.lock())
                return shared;
        text_limit = std::min(text_limit, table_limit_ / 2);
    }
    // The listing is read up to half of what all tables may hold: the table made from it
    // takes about as much again.
    readelf_text kept;
    bool too_big = false;
    const auto r = run_streaming({c.toolchain_prefix + "readelf", "-SrsW", source.path},
                                 [&](std::string_view block) {
                                     kept.append(block);
                                     too_big = kept.size() > text_limit;
                                     return !too_big;
                                 });
    const std::string text = kept.finish();
    if (too_big) {
        error = "the symbol table of " + source.path + " is larger than " +
                std::to_string(text_limit >> 20) + " MiB of text" +
                (text_limit < max_symbol_text
                     ? ", half of what the collector keeps for symbol tables (a quarter of "
                       "--memory-budget)"
                     : "");
        return nullptr;
    }
    if (r.code != 0) {
        error = "readelf failed on " + source.path + ": " + r.err.substr(0, 200);
        return nullptr;
    }
    auto table =
        std::make_shared<const elf_symbols>(elf_symbols::parse_readelf(text, source.facts.machine));
    std::lock_guard lock(config_mutex_);
    for (auto it = files_.begin(); it != files_.end();) // the forgotten ones
        it = it->second.expired() ? files_.erase(it) : std::next(it);
    files_[key] = table;
    return table;
}

std::optional<symbolizer::frame_name> symbolizer::name_frame(const std::string& module,
                                                             const std::string& build_id,
                                                             std::uint64_t address) {
    const auto m = table(module, build_id);
    if (!m->symbols)
        return std::nullopt;
    const auto vaddr = protocol::file_offset_to_vaddr(m->source.facts.loads, address);
    if (!vaddr)
        return std::nullopt;
    const auto f = m->symbols->at(*vaddr);
    if (!f || *vaddr - f->start >= 0xFFFFFFFFULL)
        return std::nullopt;
    return frame_name{std::string(f->name), static_cast<std::uint32_t>(*vaddr - f->start)};
}

std::vector<symbolizer::function_start> symbolizer::starts_of(const std::string& module,
                                                              const std::string& build_id,
                                                              const std::string& symbol) {
    const auto m = table(module, build_id, false);
    std::vector<function_start> out;
    if (!m->symbols || !m->symbols->has_same_named())
        return out;
    for (const auto& f : m->symbols->same_named(symbol))
        out.push_back({f.start, std::string(f.name)});
    if (out.empty())
        if (const auto at = m->symbols->alone(symbol))
            out.push_back({*at, symbol});
    return out;
}

symbolizer::binary& symbolizer::lines_for(const module_symbols& m) {
    binary& b = binaries_.try_emplace(m.source.path).first->second;
    b.used = std::chrono::steady_clock::now();
    return b;
}

void symbolizer::start_addr2line(binary& b, const std::string& path) {
    // Room for one more process: the least recently used other one is closed.
    std::size_t running = 0;
    binary* oldest = nullptr;
    for (auto& [file, other] : binaries_)
        if (other.addr2line && &other != &b) {
            ++running;
            if (!oldest || other.used < oldest->used)
                oldest = &other;
        }
    if (running >= max_addr2line && oldest)
        oldest->addr2line.reset();
    std::vector<std::string> argv{lines_config_.toolchain_prefix + "addr2line", "-a", "-f", "-C"};
    if (lines_config_.inline_frames)
        argv.push_back("-i");
    argv.insert(argv.end(), {"-e", path});
    b.addr2line = coprocess::start(argv);
    b.error.clear();
    b.retry_at.reset();
    if (!b.addr2line) {
        b.error = "cannot start " + argv[0];
        b.retry_at = std::chrono::steady_clock::now() + addr2line_retry;
    }
}

void symbolizer::lookup(binary& b, const std::string& path,
                        const std::vector<std::uint64_t>& addresses) {
    if (addresses.empty())
        return; // answered from what it said before: no process needed
    if (!b.addr2line &&
        (b.error.empty() || (b.retry_at && std::chrono::steady_clock::now() >= *b.retry_at)))
        start_addr2line(b, path);
    for (std::size_t at = 0; at < addresses.size() && b.addr2line; at += batch_size) {
        const auto end = std::min(addresses.size(), at + batch_size);
        std::string input;
        char buf[24];
        for (std::size_t i = at; i < end; ++i) {
            std::snprintf(buf, sizeof buf, "0x%llx\n",
                          static_cast<unsigned long long>(addresses[i]));
            input += buf;
        }
        input += "0xffffffffffffffff\n"; // answered with "??" "??:0" after everything else
        std::vector<std::string> lines;
        int after_sentinel = -1;
        const bool ok = b.addr2line->exchange(
            input, lines,
            [&](const std::string& line) {
                if (after_sentinel >= 0)
                    return ++after_sentinel == 2;
                if (line == sentinel_text)
                    after_sentinel = 0;
                return false;
            },
            tool_timeout);
        if (!ok) {
            b.error = "addr2line stopped answering for " + path;
            b.addr2line.reset();
            return;
        }
        auto found = parse_addr2line(lines);
        for (std::size_t i = at; i < end; ++i)
            b.cache[addresses[i]] =
                i - at < found.size() ? std::move(found[i - at]) : source_chain{};
    }
}

std::vector<symbolizer::placement> symbolizer::resolve(const std::vector<site>& sites) {
    std::lock_guard lock(mutex_);
    {
        std::lock_guard config_lock(config_mutex_);
        if (lines_generation_ != generation_) {
            lines_generation_ = generation_;
            lines_config_ = config_;
            binaries_.clear();
        }
    }
    std::vector<placement> out(sites.size());
    // Per module: the addresses not cached yet, then one pass through addr2line.
    std::map<std::pair<std::string, std::string>, std::vector<std::size_t>> by_module;
    for (std::size_t i = 0; i < sites.size(); ++i)
        by_module[{sites[i].module, sites[i].build_id}].push_back(i);
    for (const auto& [key, indices] : by_module) {
        const auto m = table(key.first, key.second);
        if (!m->symbols)
            continue;
        binary& b = lines_for(*m);
        std::vector<std::uint64_t> address(indices.size(), sentinel);
        std::vector<std::uint64_t> missing;
        for (std::size_t k = 0; k < indices.size(); ++k) {
            const auto& s = sites[indices[k]];
            if (const auto base = m->symbols->address_of(s.symbol)) {
                address[k] = *base + s.offset;
                if (!b.cache.count(address[k]))
                    missing.push_back(address[k]);
            }
        }
        std::sort(missing.begin(), missing.end());
        missing.erase(std::unique(missing.begin(), missing.end()), missing.end());
        lookup(b, m->source.path, missing);
        for (std::size_t k = 0; k < indices.size(); ++k) {
            if (address[k] == sentinel)
                continue;
            out[indices[k]].address = address[k];
            if (auto it = b.cache.find(address[k]); it != b.cache.end())
                out[indices[k]].chain = it->second;
        }
    }
    return out;
}

namespace {

// objdump -d's lines for one function: "  4011a6:\tmov    %edi,%eax" (the code only; the
// headers and labels around it are left out).
std::vector<symbolizer::instruction> parse_objdump(std::string_view text, std::uint64_t start) {
    std::vector<symbolizer::instruction> out;
    while (!text.empty()) {
        const auto nl = text.find('\n');
        std::string_view line = text.substr(0, nl);
        text = nl == std::string_view::npos ? std::string_view() : text.substr(nl + 1);
        const auto first = line.find_first_not_of(' ');
        const auto colon = line.find(":\t");
        if (first == std::string_view::npos || colon == std::string_view::npos || colon <= first)
            continue;
        std::uint64_t address = 0;
        const auto hex = line.substr(first, colon - first);
        if (std::from_chars(hex.data(), hex.data() + hex.size(), address, 16).ptr !=
                hex.data() + hex.size() ||
            address < start)
            continue;
        std::string code(line.substr(colon + 2));
        for (char& c : code)
            if (c == '\t')
                c = ' ';
        out.push_back({address - start, std::move(code)});
    }
    return out;
}

} // namespace

symbolizer::disassembly symbolizer::disassemble(const std::string& module,
                                                const std::string& build_id,
                                                const std::string& symbol) {
    disassembly d;
    const auto m = table(module, build_id);
    if (!m->symbols) {
        d.error = m->error.empty() ? "no symbols found for " + module : m->error;
        return d;
    }
    d.file = m->source.path;
    if (!m->source.facts.text_in_file) {
        d.error = d.file + " is a separate debug file, without the code: give the collector the "
                           "binary itself (--binary) to disassemble it";
        return d;
    }
    const auto start = m->symbols->address_of(symbol);
    if (!start) {
        d.error = "no symbol " + symbol + " in " + d.file;
        return d;
    }
    d.start = *start;
    // A function is a few kilobytes at most; one past 256 KiB is not disassembled whole.
    const std::uint64_t size = std::min<std::uint64_t>(m->symbols->extent_at(*start), 256 << 10);
    if (!size) {
        d.error = "the symbol " + symbol + " has no size in " + d.file;
        return d;
    }
    const std::string key = d.file + '\0' + symbol;
    {
        std::lock_guard lock(disassembled_mutex_);
        if (const auto it = disassembled_.find(key); it != disassembled_.end())
            return it->second;
    }
    const auto hex = [](std::uint64_t v) {
        char buf[24];
        std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(v));
        return std::string(buf);
    };
    std::string prefix;
    {
        std::lock_guard lock(config_mutex_);
        prefix = config_.toolchain_prefix;
    }
    std::string text;
    constexpr std::size_t max_text = std::size_t{8} << 20;
    const auto r = run_streaming({prefix + "objdump", "-d", "--no-show-raw-insn", "-C",
                                  "--start-address=" + hex(*start),
                                  "--stop-address=" + hex(*start + size), d.file},
                                 [&](std::string_view block) {
                                     text.append(block.substr(0, max_text - text.size()));
                                     return text.size() < max_text;
                                 });
    d.code = parse_objdump(text, *start);
    if (d.code.empty()) {
        d.error = prefix + "objdump could not disassemble " + symbol + " in " + d.file +
                  (r.err.empty() ? std::string() : ": " + r.err.substr(0, r.err.find('\n')));
        return d;
    }
    std::lock_guard lock(disassembled_mutex_);
    if (disassembled_.size() >= 16)
        disassembled_.clear();
    disassembled_.emplace(key, d);
    return d;
}

std::size_t symbolizer::close_idle(std::chrono::steady_clock::duration idle) {
    const auto now = std::chrono::steady_clock::now();
    {
        std::lock_guard tables(config_mutex_);
        std::erase_if(tables_, [&](const auto& kv) {
            return kv.second->value && kv.second->value->symbols &&
                   now - kv.second->last_use >= table_idle;
        });
    }
    std::unique_lock lock(mutex_, std::try_to_lock);
    if (!lock)
        return 0;
    std::size_t running = 0;
    for (auto& [path, b] : binaries_) {
        if (b.addr2line && now - b.used >= idle)
            b.addr2line.reset();
        running += b.addr2line != nullptr;
    }
    return running;
}

std::vector<symbolizer::binary_status> symbolizer::binaries() const {
    std::vector<std::shared_ptr<const module_symbols>> tables;
    {
        std::lock_guard lock(config_mutex_);
        for (const auto& [key, slot] : tables_)
            if (slot->value)
                tables.push_back(slot->value);
    }
    std::lock_guard lock(mutex_);
    std::vector<binary_status> out;
    for (const auto& m : tables) {
        binary_status s{m->module,
                        m->source.path,
                        m->source.origin,
                        m->error,
                        m->source.fix,
                        m->source.tried,
                        m->symbols ? m->symbols->size() : 0,
                        m->source.build_id,
                        m->device_build_id,
                        m->source.pending};
        if (const auto b = binaries_.find(m->source.path);
            s.error.empty() && b != binaries_.end() && !b->second.error.empty())
            s.error = b->second.error;
        out.push_back(std::move(s));
    }
    return out;
}

std::optional<std::string> symbolizer::source_path(const std::string& file) const {
    const auto c = config();
    // A file the debug info names, as the kernel's files and the sessions folder never are.
    const auto readable = [&](const std::string& path) -> std::optional<std::string> {
        std::string real;
        if (refuse_to_open(path, c.peer_data_dirs, real).empty())
            return real;
        return std::nullopt;
    };
    std::string mapped = file;
    for (const auto& [from, to] : c.path_map)
        if (!from.empty() && mapped.rfind(from, 0) == 0) {
            mapped = to + mapped.substr(from.size());
            break;
        }
    if (fs::path(mapped).is_absolute())
        if (auto real = readable(mapped))
            return real;
    // Under a source dir: the whole path, then ever shorter tails of it.
    const fs::path p = fs::path(mapped).relative_path();
    std::vector<fs::path> parts(p.begin(), p.end());
    for (const auto& dir : c.source_dirs)
        for (std::size_t skip = 0; skip < parts.size(); ++skip) {
            fs::path candidate = dir;
            for (std::size_t i = skip; i < parts.size(); ++i)
                candidate /= parts[i];
            if (auto real = readable(candidate.string()))
                return real;
        }
    return std::nullopt;
}

} // namespace collector
