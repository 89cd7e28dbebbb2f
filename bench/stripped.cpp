// stripped: naming, at the collector, the frames a device running a stripped binary could not.
//
// The binary is the collector itself (tens of thousands of functions); its stripped copy is
// "the device's". A capture of 8-frame stacks, every frame "ADDR [unknown] (the copy)" at one
// of many distinct addresses inside its functions, is made in memory.
//
//   naming   the capture parsed with no symbols (baseline), then with the unstripped binary
//            found by the build-id the agent reported: cold (its symbol table read first)
//            and warm (a second session, the table loaded). Frames named per second, the time
//            as a ratio to the baseline's, and every name checked against the symbol table
//            (the benchmark fails on a wrong one). In place: the capture parsed before the
//            binary is known, then named where it is (session_model::name_again), as a
//            ratio to the warm parse a replay would make; it fails unless every function's
//            figures equal that parse's.
//   live     a collector process; a loopback agent streams the capture into a live session
//            with the build-id in its metrics. Then a debug dir (objcopy --only-keep-debug, in
//            the .build-id layout) is added over PUT /api/config: the time until
//            GET /functions shows under 1 % unnamed, and the slowest /functions answer
//            meanwhile (asked every 20 ms), as a ratio to the named session's own answer time.
//
// Usage: stripped [samples, default 200000] [distinct addresses, default 100000]
#include "collector/model/views.hpp"
#include "collector/session_model.hpp"
#include "collector/symbols/elf_symbols.hpp"
#include "collector/symbols/subprocess.hpp"
#include "collector/symbols/symbolizer.hpp"
#include "protocol/build_id.hpp"
#include "protocol/compression.hpp"
#include "protocol/frame.hpp"
#include "protocol/messages.hpp"
#include "support.hpp"
#include "support/framing_peer.hpp"
#include "support/http_client.hpp"
#include "support/spawn.hpp"

#include <boost/json/parse.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <unistd.h>
#include <vector>

namespace fs = std::filesystem;
namespace json = boost::json;
using namespace std::chrono_literals;
using clock_type = std::chrono::steady_clock;
using namespace collector;

namespace {

double seconds_since(clock_type::time_point t0) {
    return std::chrono::duration<double>(clock_type::now() - t0).count();
}

struct function {
    std::uint64_t start = 0, size = 0;
};

// The share of a session's weight in frames no symbol named ("[unknown]"), in percent.
double unnamed_pct(std::uint16_t http, const std::string& session, double& answer_ms) {
    const auto t0 = clock_type::now();
    const auto r = test_support::http_call(http, "GET",
                                           "/api/sessions/" + session + "/functions?limit=100000");
    answer_ms = seconds_since(t0) * 1000;
    if (r.status != 200)
        return -1;
    double pct = 0;
    const json::value answer = json::parse(r.body);
    for (const auto& f : answer.at("functions").as_array())
        if (f.at("name").as_string() == "[unknown]")
            pct += f.at("self_pct").to_number<double>();
    return pct;
}

} // namespace

int main(int argc, char** argv) {
    const std::size_t samples = argc > 1 ? std::strtoul(argv[1], nullptr, 10) : 200000;
    const std::size_t distinct = argc > 2 ? std::strtoul(argv[2], nullptr, 10) : 100000;
    const std::string binary = PERFWIRE_COLLECTOR_BIN;
    const fs::path work =
        fs::temp_directory_path() / ("perfwire-stripped-" + std::to_string(::getpid()));
    fs::create_directories(work / "home");
    const std::string device = (work / "perfwire-collector").string();
    if (run_capture({"strip", "--strip-all", "-o", device, binary}).code != 0) {
        std::fprintf(stderr, "stripped: strip failed\n");
        return 1;
    }
    const auto facts = protocol::read_elf_facts(binary);
    const auto build_id = protocol::read_build_id(binary);
    if (!facts || !build_id) {
        std::fprintf(stderr, "stripped: %s has no build-id\n", binary.c_str());
        return 1;
    }

    // Functions, and the names perf would give each start (aliases included).
    const auto elf = run_capture({"readelf", "-sW", binary});
    std::vector<function> functions;
    std::map<std::uint64_t, std::set<std::string>> names_at;
    std::istringstream in(elf.out);
    for (std::string line; std::getline(in, line);) {
        std::istringstream f(line);
        std::string num, value, size, type, bind, vis, ndx, name;
        if (!(f >> num >> value >> size >> type >> bind >> vis >> ndx >> name) || type != "FUNC" ||
            ndx == "UND")
            continue;
        const auto start = std::strtoull(value.c_str(), nullptr, 16);
        const auto bytes = std::strtoull(size.c_str(), nullptr, 0);
        if (start == 0 || bytes == 0)
            continue;
        functions.push_back({start, bytes});
        names_at[start].insert(perf_symbol_name(name));
    }
    // A name the collector gave, as perf would name that start: functions perf names alike
    // are told apart by their file ("work (a.c)") or their parameters ("ns::f(int)").
    const auto named_as = [](const std::set<std::string>& perf_names, const std::string& name) {
        if (perf_names.count(name) || perf_names.count(strip_parameters(name)))
            return true;
        const auto file = name.rfind(" (");
        return file != std::string::npos && name.ends_with(")") &&
               perf_names.count(name.substr(0, file));
    };
    // Distinct addresses inside them, as perf prints them: file offsets.
    std::mt19937_64 rng(42);
    std::vector<std::uint64_t> pool, vaddr_of;
    std::map<std::uint64_t, std::uint64_t> start_of; // file offset -> its function's start
    while (pool.size() < distinct && !functions.empty()) {
        const auto& fn = functions[rng() % functions.size()];
        const auto vaddr = fn.start + rng() % fn.size;
        std::uint64_t offset = 0;
        bool found = false;
        for (const auto& s : facts->loads)
            if (vaddr >= s.vaddr && vaddr - s.vaddr < s.filesz) {
                offset = vaddr - s.vaddr + s.offset;
                found = true;
            }
        if (found && start_of.emplace(offset, fn.start).second)
            pool.push_back(offset);
    }
    std::string text;
    char line[160];
    for (std::size_t i = 0; i < samples; ++i) {
        std::snprintf(line, sizeof line, "app %zu/%zu %zu.%06zu: 1000000 cpu-clock:\n",
                      std::size_t{100}, 100 + i % 8, 1000 + i / 1000000, i % 1000000);
        text += line;
        for (int k = 0; k < 8; ++k) {
            std::snprintf(line, sizeof line, "\t%llx [unknown] (%s)\n",
                          static_cast<unsigned long long>(pool[rng() % pool.size()]),
                          device.c_str());
            text += line;
        }
        text += '\n';
    }
    const std::size_t frames = samples * 8;
    const std::string metrics = protocol::serialize(
        protocol::health_metrics{protocol::binaries_metrics{1, 100, {{device, *build_id}}}});
    std::printf("capture: %zu samples, %zu frames at %zu distinct addresses in %zu functions, "
                "%.0f MB of text\n",
                samples, frames, pool.size(), functions.size(), text.size() / 1e6);

    // Parses the capture in 4 MB pieces, as chunks arrive.
    const auto parse = [&](session_model& m) {
        m.note_metrics(metrics);
        const auto t0 = clock_type::now();
        for (std::size_t at = 0; at < text.size();) {
            auto end = std::min(text.size(), at + (std::size_t{4} << 20));
            end = text.find("\n\n", end);
            end = end == std::string::npos ? text.size() : end + 2;
            m.ingest(false, std::string_view(text).substr(at, end - at));
            at = end;
        }
        return seconds_since(t0);
    };
    session_model plain;
    const double baseline_s = parse(plain);
    symbol_config config;
    config.binaries = {binary};
    config.debug_dirs.clear();
    config.build_id_cache = (work / "home").string();
    symbolizer symbols(config);
    session_model cold_model(&symbols);
    const double cold_s = parse(cold_model);
    session_model warm_model(&symbols);
    const double warm_s = parse(warm_model);

    // Every frame named, each by the function holding its address.
    std::size_t wrong = 0, unnamed = 0;
    const auto& p = warm_model.prof;
    for (std::uint32_t f = 0; f < p.frame_count(); ++f)
        if (p.symbol(f) == "[unknown]" && p.module(f) == device)
            ++unnamed;
    for (std::size_t i = 0; i < std::min<std::size_t>(pool.size(), 20000); ++i) {
        const auto got = symbols.name_frame(device, *build_id, pool[i]);
        const auto start = start_of[pool[i]];
        if (!got || !named_as(names_at[start], got->symbol))
            ++wrong;
    }
    std::printf("naming (one core, in process)\n");
    std::printf("  baseline  %.2f s  no symbols: %.1f M frames/s, all [unknown]\n", baseline_s,
                frames / baseline_s / 1e6);
    std::printf("  cold      %.2f s  %.1f M frames/s (%.2fx the baseline's time), the symbol "
                "table read first\n",
                cold_s, frames / cold_s / 1e6, cold_s / baseline_s);
    std::printf("  warm      %.2f s  %.1f M frames/s (%.2fx the baseline's time)\n", warm_s,
                frames / warm_s / 1e6, warm_s / baseline_s);
    std::printf("  names     %zu distinct addresses named at %.0f k/s (warm, beyond the "
                "baseline's parse); %zu of 20000 checked wrong; %zu unnamed frames left\n",
                pool.size(), warm_s > baseline_s ? pool.size() / (warm_s - baseline_s) / 1e3 : 0.0,
                wrong, unnamed);

    // In place: the capture parsed before the collector has the binary, then named where it
    // is once it has (its symbol table read first, as the warm parse had it), against the new
    // parse a replay from disk would make (warm, less the disk).
    symbol_config none = config;
    none.binaries.clear();
    symbolizer later(none);
    session_model late(&later);
    // Parsed while the device's copy is away too: its .dynsym would name a few frames, and
    // with the symbol table their names become others (then only a new parse is exact).
    fs::rename(device, device + ".away");
    (void)parse(late);
    fs::rename(device + ".away", device);
    const auto nameless_bytes = late.memory_bytes();
    const auto nameless_sites = late.prof.site_count();
    later.configure(config);
    (void)later.name_frame(device, *build_id, pool.front());
    const auto t_place = clock_type::now();
    const auto placed = late.name_again();
    const double place_s = seconds_since(t_place);
    const auto table = [](const profile& of) {
        std::map<std::string, std::pair<std::uint64_t, std::uint64_t>> out;
        for (const auto& r : collector::functions(of, {}).rows)
            out[std::string(of.symbol(r.frame))] = {r.self, r.total};
        return out;
    };
    // Past the allowance of nameless call sites callers kept no address: only a new parse
    // names them (what the collector then does).
    const bool reparse =
        placed == script_parser::renaming::reparse && late.parser.stats().call_sites_dropped > 0;
    const bool same = placed == script_parser::renaming::renamed &&
                      table(late.prof) == table(warm_model.prof) &&
                      late.prof.site_count() == warm_model.prof.site_count();
    if (reparse)
        std::printf("  in place  not exact: %llu samples' callers kept no address (past the "
                    "allowance of nameless call sites), so the session is parsed again\n",
                    static_cast<unsigned long long>(late.parser.stats().call_sites_dropped));
    else
        std::printf("  in place  %.2f s  (%.2fx a new parse's time with the symbols), named after "
                    "the parse: %s\n",
                    place_s, place_s / warm_s,
                    same ? "every function's figures as the new parse's"
                         : "DIFFERENT from the new parse");
    std::printf("  memory    %.1f MB, %zu call sites before (every nameless frame at its "
                "address); %.1f MB, %zu sites after; %.1f MB the new parse\n",
                nameless_bytes / 1e6, nameless_sites, late.memory_bytes() / 1e6,
                late.prof.site_count(), warm_model.memory_bytes() / 1e6);
    if (!same && !reparse)
        return 1;

    // Live: a collector process, the capture streamed by a loopback agent, then a debug dir.
    const std::string debug_dir = (work / "debug").string();
    fs::create_directories(work / "debug" / ".build-id" / build_id->substr(0, 2));
    const std::string debug_file =
        debug_dir + "/.build-id/" + build_id->substr(0, 2) + "/" + build_id->substr(2) + ".debug";
    run_capture({"objcopy", "--only-keep-debug", binary, debug_file});
    // The device's copy is not on this machine (as when the device is another): nothing
    // names the session's frames before the debug dir comes, and it is named in place then.
    fs::rename(device, device + ".away");
    const auto started =
        bench::start_collector(PERFWIRE_COLLECTOR_BIN, work / "sessions",
                               {"--browse-root", "/", "--debug-dir", (work / "home").string()},
                               {"HOME=" + (work / "home").string(), "DEBUGINFOD_URLS="});
    if (!started)
        return 1;
    const test_support::spawned& coll = *started->proc;
    const auto http = started->http_port;
    auto peer = test_support::framing_peer::connect(started->agent_port);
    if (!peer)
        return 1;
    peer->send(protocol::frame_flag::response,
               R"({"type":"hello","version":1,"agent":"perfwire","hostname":"bench"})");
    peer->send(protocol::frame_flag::metrics, metrics);
    for (std::size_t at = 0; at < text.size();) {
        auto end = std::min(text.size(), at + (std::size_t{4} << 20));
        end = text.find("\n\n", end);
        end = end == std::string::npos ? text.size() : end + 2;
        protocol::zstd_compressor z;
        z.write(std::string_view(text).substr(at, end - at));
        peer->send(protocol::frame_flag::zstd, z.finish());
        at = end;
    }
    std::string session;
    for (int i = 0; i < 600 && session.empty(); ++i) {
        std::this_thread::sleep_for(100ms);
        const auto r = test_support::http_call(http, "GET", "/api/sessions");
        if (r.status != 200)
            continue;
        const json::value list = json::parse(r.body);
        for (const auto& s : list.as_array())
            if (s.at("samples").to_number<std::size_t>() == samples)
                session = std::string(s.at("id").as_string());
    }
    if (session.empty()) {
        std::fprintf(stderr, "the live session never held the capture: %s\n",
                     coll.stderr_text().c_str());
        return 1;
    }
    double ms = 0;
    const double before = unnamed_pct(http, session, ms);
    const auto t0 = clock_type::now();
    test_support::http_call(http, "PUT", "/api/config",
                            R"({"debug_dirs": [")" + debug_dir + R"("]})");
    double after = before, slowest = 0;
    while (after >= 1 && seconds_since(t0) < 300) {
        std::this_thread::sleep_for(20ms);
        after = unnamed_pct(http, session, ms);
        slowest = std::max(slowest, ms);
    }
    const double rename_s = seconds_since(t0);
    // The named session's own answer time (a named profile has far more call paths than one
    // of "[unknown]" frames): the slowest of five once named.
    double named = 0;
    for (int i = 0; i < 5; ++i) {
        (void)unnamed_pct(http, session, ms);
        named = std::max(named, ms);
    }
    const bool in_place = coll.stderr_text().find("frames named in place") != std::string::npos;
    std::printf("live (collector process, %zu samples in the session)\n", samples);
    std::printf(
        "  unnamed %.1f %% -> %.1f %% in %.2f s after the debug dir was added (%s); slowest "
        "/functions answer meanwhile %.0f ms, %.1fx the named session's own (the slowest of "
        "five after, %.0f ms)\n",
        before, after, rename_s, in_place ? "named in place" : "parsed again", slowest,
        slowest / std::max(named, 1.0), named);
    peer.reset();
    std::error_code ec;
    fs::remove_all(work, ec);
    return wrong == 0 && after < 1 ? 0 : 1;
}
