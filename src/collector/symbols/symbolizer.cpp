#include "collector/symbols/symbolizer.hpp"

#include "protocol/build_id.hpp"

#include <algorithm>
#include <cstdio>
#include <filesystem>
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

bool is_regular_file(const std::string& path) {
    std::error_code ec;
    return !path.empty() && fs::is_regular_file(path, ec);
}

// Why binutils may not read `path`, or nothing: only a regular ELF file is handed to readelf
// and addr2line, never a device, FIFO or kernel file that a hostile agent names as a module.
// `real` gets the resolved path, which is what the tools are given (no link followed later).
std::string unreadable_binary(const std::string& path, std::string& real_path) {
    std::error_code ec;
    const fs::path real = fs::canonical(path, ec);
    real_path = real.string();
    if (ec || !fs::is_regular_file(real, ec))
        return "binary not found: " + path + " (set --binary or --sysroot)";
    for (const char* kernel : {"/proc", "/sys", "/dev"})
        if (real == kernel || real.native().rfind(std::string(kernel) + "/", 0) == 0)
            return "not a binary: " + real.string();
    char magic[4] = {};
    if (std::FILE* f = std::fopen(real.c_str(), "rb")) {
        const auto n = std::fread(magic, 1, sizeof magic, f);
        std::fclose(f);
        if (n == sizeof magic && std::string_view(magic, 4) == "\x7f"
                                                               "ELF")
            return {};
    }
    return "not an ELF file: " + real.string();
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
    , next_config_(std::move(c)) {}

symbol_config symbolizer::config() const {
    std::lock_guard lock(next_mutex_);
    return next_config_;
}

void symbolizer::configure(symbol_config c) {
    std::lock_guard lock(next_mutex_);
    next_config_ = std::move(c);
    ++next_generation_;
}

void symbolizer::refresh_config() {
    std::lock_guard lock(next_mutex_);
    if (generation_ == next_generation_)
        return;
    config_ = next_config_;
    generation_ = next_generation_;
    binaries_.clear();
}

std::string symbolizer::local_binary(const std::string& module) const {
    std::string m = module;
    if (const auto del = m.find(" (deleted)"); del != std::string::npos)
        m.erase(del);
    const auto name = fs::path(m).filename();
    for (const auto& b : config_.binaries)
        if (b == m || fs::path(b).filename() == name)
            return b;
    if (!config_.sysroot.empty())
        return (fs::path(config_.sysroot) / fs::path(m).relative_path()).string();
    return m;
}

symbolizer::binary& symbolizer::load(const std::string& module) {
    if (auto it = binaries_.find(module); it != binaries_.end())
        return *it->second;
    auto b = std::make_unique<binary>();
    b->path = local_binary(module);
    if (module.empty() || module.front() == '[') {
        b->error = "no binary for " + module; // kernel, vdso, unknown
    } else if (std::string real, why = unreadable_binary(b->path, real); !why.empty()) {
        b->error = std::move(why);
    } else {
        b->path = std::move(real);
        auto c = run_capture({config_.toolchain_prefix + "readelf", "-sW", b->path});
        if (c.code != 0) {
            b->error = "readelf failed on " + b->path + ": " + c.err.substr(0, 200);
        } else {
            b->symbols = elf_symbols::parse_readelf(c.out);
            b->build_id = protocol::read_build_id(b->path).value_or("");
            std::vector<std::string> argv{config_.toolchain_prefix + "addr2line", "-a", "-f", "-C"};
            if (config_.inline_frames)
                argv.push_back("-i");
            argv.insert(argv.end(), {"-e", b->path});
            b->addr2line = coprocess::start(argv);
            if (!b->addr2line)
                b->error = "cannot start " + argv[0];
        }
    }
    return *binaries_.emplace(module, std::move(b)).first->second;
}

void symbolizer::lookup(binary& b, const std::vector<std::uint64_t>& addresses) {
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
            b.error = "addr2line stopped answering for " + b.path;
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
    refresh_config();
    std::vector<placement> out(sites.size());
    // Per module: the addresses not cached yet, then one pass through addr2line.
    std::map<std::string, std::vector<std::size_t>, std::less<>> by_module;
    for (std::size_t i = 0; i < sites.size(); ++i)
        by_module[sites[i].module].push_back(i);
    for (const auto& [module, indices] : by_module) {
        binary& b = load(module);
        std::vector<std::uint64_t> address(indices.size(), sentinel);
        std::vector<std::uint64_t> missing;
        for (std::size_t k = 0; k < indices.size(); ++k) {
            const auto& s = sites[indices[k]];
            if (const auto base = b.symbols.address_of(s.symbol)) {
                address[k] = *base + s.offset;
                if (!b.cache.count(address[k]))
                    missing.push_back(address[k]);
            }
        }
        std::sort(missing.begin(), missing.end());
        missing.erase(std::unique(missing.begin(), missing.end()), missing.end());
        lookup(b, missing);
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

std::vector<symbolizer::binary_status> symbolizer::binaries() const {
    std::lock_guard lock(mutex_);
    std::vector<binary_status> out;
    for (const auto& [module, b] : binaries_)
        out.push_back({module, b->path, b->error, b->symbols.size(), b->build_id});
    return out;
}

std::optional<std::string> symbolizer::source_path(const std::string& file) const {
    std::lock_guard lock(mutex_); // the config that placed the lines
    std::string mapped = file;
    for (const auto& [from, to] : config_.path_map)
        if (!from.empty() && mapped.rfind(from, 0) == 0) {
            mapped = to + mapped.substr(from.size());
            break;
        }
    if (is_regular_file(mapped) && fs::path(mapped).is_absolute())
        return mapped;
    // Under a source dir: the whole path, then ever shorter tails of it.
    const fs::path p = fs::path(mapped).relative_path();
    std::vector<fs::path> parts(p.begin(), p.end());
    for (const auto& dir : config_.source_dirs)
        for (std::size_t skip = 0; skip < parts.size(); ++skip) {
            fs::path candidate = dir;
            for (std::size_t i = skip; i < parts.size(); ++i)
                candidate /= parts[i];
            if (is_regular_file(candidate.string()))
                return candidate.string();
        }
    return std::nullopt;
}

} // namespace collector
