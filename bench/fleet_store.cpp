// fleet_store: what the fleet store costs — how fast the collector's writer puts samples into
// ClickHouse, how many bytes a sample takes on ClickHouse's disk, and how long the Fleet API's
// questions take on millions of samples.
//
// Starts its own clickhouse-server (Debian's, on loopback, data in a temporary folder). Builds
// a profile from real captures (test/collector/fixtures, rewritten as the ingest benchmark
// does), then writes it as DEVICES devices would have, each its own session at its own time,
// one batch per ~2,800 samples (a chunk), through the collector's own encoder and writer
// (fleet/rows.hpp, fleet/store.hpp). Prints:
//   insert     samples/s from the first batch queued to the last written, and as a ratio to
//              the collector's own parsing of the same text in this run (the goal: at least 1,
//              so the store is never the bottleneck)
//   disk       bytes per sample on ClickHouse's disk after its merges, samples alone and with
//              the stacks and frames tables (the goal: at most 8)
//   queries    the Fleet API's devices and functions questions (every device; one device; one
//              build), median and slowest of 5, with the limits the collector sends (ask())
//   hostile    with a third argument: a device that sent that many million frames never seen
//              again (a sample each), then the honest devices' questions again (the goal: one
//              honest device's at most 0.5 s) and the whole fleet's (answered or refused by a
//              limit, and how soon)
//
// Usage: fleet_store [samples in millions, default 10] [devices, default 20]
//                    [hostile frames in millions, default 0]
#include "collector/fleet/clickhouse.hpp"
#include "collector/fleet/queries.hpp"
#include "collector/fleet/rows.hpp"
#include "collector/fleet/store.hpp"
#include "collector/parse/perf_script.hpp"

#include "capture.hpp"
#include "support/clickhouse_proc.hpp"

#include <boost/json/serialize.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

using namespace collector;
using clock_type = std::chrono::steady_clock;

namespace {

double seconds_since(clock_type::time_point t) {
    return std::chrono::duration<double>(clock_type::now() - t).count();
}

std::uint64_t number(const clickhouse_client& ch, const std::string& sql) {
    const auto r = ch.run(sql);
    if (!r) {
        std::fprintf(stderr, "fleet_store: %s\n", r.error().message.c_str());
        std::exit(1);
    }
    return std::strtoull(r->c_str(), nullptr, 10);
}

// A question as the collector asks it (ask(): read-only, within the query limits). One a
// limit refused is said, with how soon, when `refusal_ok`; else it ends the run.
void time_query(const clickhouse_client& ch, const char* what, const std::string& sql,
                bool refusal_ok = false) {
    std::vector<double> ms;
    std::string refused;
    for (int i = 0; i < 5; ++i) {
        const auto t0 = clock_type::now();
        const auto r = ch.ask(sql);
        ms.push_back(seconds_since(t0) * 1e3);
        if (!r) {
            if (!refusal_ok) {
                std::fprintf(stderr, "fleet_store: %s: %s\n", what, r.error().message.c_str());
                std::exit(1);
            }
            refused = r.error().message.substr(0, 120);
        }
    }
    std::sort(ms.begin(), ms.end());
    std::printf("query %-28s median %7.1f ms, slowest %7.1f ms%s%s\n", what, ms[2], ms.back(),
                refused.empty() ? "" : "; refused: ", refused.c_str());
}

// The Fleet flame graph as the collector answers it: its two queries (and the baseline's), and
// the tree built from their answers.
void time_flame(const clickhouse_client& ch, const char* what, const fleet_filter& f,
                const fleet_filter* baseline) {
    std::vector<double> ms;
    std::size_t nodes = 0;
    for (int i = 0; i < 5; ++i) {
        const auto t0 = clock_type::now();
        const auto ask = [&](const fleet_filter& of) {
            auto stacks = ch.ask(fleet_stacks_sql("bench", of, 200'000));
            auto frames = ch.ask(fleet_frames_sql("bench", of));
            if (!stacks || !frames) {
                std::fprintf(stderr, "fleet_store: %s: %s\n", what,
                             (!stacks ? stacks : frames).error().message.c_str());
                std::exit(1);
            }
            return fleet_answers{std::move(*stacks), std::move(*frames)};
        };
        const auto now = ask(f);
        std::optional<fleet_answers> base;
        if (baseline)
            base = ask(*baseline);
        const auto tree = fleet_flame_json(now, base ? &*base : nullptr, {}, 200'000);
        ms.push_back(seconds_since(t0) * 1e3);
        if (!tree) {
            std::fprintf(stderr, "fleet_store: %s: %s\n", what, tree.error().message.c_str());
            std::exit(1);
        }
        nodes = boost::json::serialize(*tree).size();
    }
    std::sort(ms.begin(), ms.end());
    std::printf("query %-28s median %7.1f ms, slowest %7.1f ms (%zu bytes of JSON)\n", what, ms[2],
                ms.back(), nodes);
}

} // namespace

int main(int argc, char** argv) {
    const double millions = argc > 1 ? std::strtod(argv[1], nullptr) : 10.0;
    const int devices = argc > 2 ? std::atoi(argv[2]) : 20;
    const double hostile_millions = argc > 3 ? std::strtod(argv[3], nullptr) : 0.0;
    const auto wanted = static_cast<std::uint64_t>(millions * 1e6);

    // One device's profile: enough of the rewritten captures for wanted / devices samples.
    profile p;
    script_parser parser(p);
    const std::string base = bench::base_capture();
    const std::size_t per_device = wanted / static_cast<std::uint64_t>(std::max(devices, 1));
    double parse_s = 0; // the baseline: how fast the collector itself takes samples in
    for (int copy = 1; p.sample_count() < per_device; ++copy) {
        const auto text = bench::rewrite(base, copy);
        const auto p0 = clock_type::now();
        parser.feed(text);
        parser.finish();
        parse_s += seconds_since(p0);
    }
    const double parse_rate = static_cast<double>(p.sample_count()) / parse_s;
    std::printf("profile: %zu samples a device, %zu call paths, %zu functions; %d devices\n",
                p.sample_count(), p.node_count(), p.frame_count(), devices);

    test_support::clickhouse_proc server;
    clickhouse_config cfg;
    cfg.url = server.url();
    cfg.database = "bench";
    auto client = clickhouse_client::make(cfg);
    if (!client) {
        std::fprintf(stderr, "fleet_store: %s\n", client.error().message.c_str());
        return 1;
    }
    const auto version = client->run("SELECT version()", {}, 1 << 20, false);
    std::printf("clickhouse: %s, version %s", server.url().c_str(),
                version ? version->c_str() : "?\n");

    // Each device a session; chunks of ~2,800 samples, as an agent at 999 Hz on 3 threads.
    constexpr std::size_t chunk = 2800;
    fleet_store store(*client, std::size_t{1} << 30);
    // A build-id for the module the first sample's leaf is in (the "one build" question).
    const std::map<std::string, std::string> builds{
        {std::string(p.module(p.node_frame(p.sample_node(0)))), "ab12"}};
    std::uint64_t queued = 0;
    const auto t0 = clock_type::now();
    double encode_s = 0;
    for (int d = 0; d < devices; ++d) {
        fleet_encoder enc(
            {"bench", "board-" + std::to_string(d), "session-" + std::to_string(d),
             1'790'000'000'000'000'000ULL + static_cast<std::uint64_t>(d) * 3'600'000'000'000ULL});
        std::uint32_t n = 0;
        for (std::size_t from = 0; from < p.sample_count() && from < per_device;
             from += chunk, ++n) {
            const auto e0 = clock_type::now();
            auto batch = enc.encode(p, from, std::min({p.sample_count(), per_device, from + chunk}),
                                    n, builds, UINT64_MAX); // (a replay: no arrival bound)
            encode_s += seconds_since(e0);
            queued += batch.samples;
            store.add(std::move(batch));
        }
    }
    if (!store.flush(std::chrono::minutes(30))) {
        std::fprintf(stderr, "fleet_store: not everything was written\n");
        return 1;
    }
    const double insert_s = seconds_since(t0);
    const auto written = number(*client, "SELECT count() FROM bench.samples");
    std::printf("insert: %llu samples in %.1f s: %.0f samples/s (encoding %.1f s of it, on this "
                "thread), %llu in ClickHouse; %.2f x the collector's own parsing (%.0f "
                "samples/s on one core, this run)\n",
                static_cast<unsigned long long>(queued), insert_s,
                static_cast<double>(queued) / insert_s, encode_s,
                static_cast<unsigned long long>(written),
                static_cast<double>(queued) / insert_s / parse_rate, parse_rate);

    for (const char* table : {"samples", "stacks", "frames"})
        (void)client->run(std::string("OPTIMIZE TABLE bench.") + table + " FINAL");
    const auto bytes_of = [&](const char* table) {
        return number(*client, std::string("SELECT sum(bytes_on_disk) FROM system.parts WHERE "
                                           "active AND database = 'bench' AND table = '") +
                                   table + "'");
    };
    const auto samples_bytes = bytes_of("samples");
    const auto all_bytes = samples_bytes + bytes_of("stacks") + bytes_of("frames");
    std::printf("disk: %.2f bytes a sample (samples table), %.2f with stacks and frames "
                "(%.1f MB in all)\n",
                static_cast<double>(samples_bytes) / static_cast<double>(written),
                static_cast<double>(all_bytes) / static_cast<double>(written),
                static_cast<double>(all_bytes) / 1e6);

    if (const auto columns = client->run(
            "SELECT name, data_compressed_bytes FROM system.columns WHERE database = 'bench' AND "
            "table = 'samples' ORDER BY data_compressed_bytes DESC")) {
        std::printf("columns (compressed bytes a sample):");
        std::size_t at = 0;
        while (at < columns->size()) {
            const auto tab = columns->find('\t', at);
            const auto nl = columns->find('\n', tab);
            if (tab == std::string::npos || nl == std::string::npos)
                break;
            std::printf(" %s %.2f", columns->substr(at, tab - at).c_str(),
                        std::strtod(columns->c_str() + tab + 1, nullptr) /
                            static_cast<double>(written));
            at = nl + 1;
        }
        std::printf("\n");
    }
    fleet_filter all, one, build;
    one.devices = {"board-0"};
    build.build = "ab12";
    time_query(*client, "devices (all)", fleet_devices_sql("bench", all));
    time_query(*client, "functions (all devices)", fleet_functions_sql("bench", all, 200));
    time_query(*client, "functions (one device)", fleet_functions_sql("bench", one, 200));
    time_query(*client, "functions (one build)", fleet_functions_sql("bench", build, 200));
    time_flame(*client, "flame graph (all devices)", all, nullptr);
    time_flame(*client, "flame graph (one device)", one, nullptr);
    fleet_filter other;
    other.devices = {"board-1"};
    time_flame(*client, "flame graph diff (2 devices)", one, &other);
    std::printf("(the build holds %llu of the samples)\n",
                static_cast<unsigned long long>(number(
                    *client, "SELECT count() FROM bench.samples WHERE stack IN (SELECT stack FROM "
                             "bench.stacks ARRAY JOIN frames AS f WHERE f IN (SELECT frame FROM "
                             "bench.frames WHERE build_id = 'ab12'))")));

    if (hostile_millions > 0) {
        // A device whose every sample has a function and a caller of its own, sent in chunks
        // of 20,000 samples as the attack test sends them. (One session's profile, as the
        // collector keeps it: the encoder knows its frames by their place in it.)
        const auto frames = static_cast<std::uint64_t>(hostile_millions * 1e6);
        profile hp;
        script_parser hparser(hp);
        for (std::uint64_t from = 0; from < frames; from += 20'000) {
            std::string text;
            for (std::uint64_t k = from; k < std::min(frames, from + 20'000); ++k) {
                const auto id = std::to_string(k);
                char time[32]; // a microsecond apart
                std::snprintf(time, sizeof time, "%llu.%06llu",
                              static_cast<unsigned long long>(1 + k / 1'000'000),
                              static_cast<unsigned long long>(k % 1'000'000));
                text += std::string("w 7/7 ") + time + ": 1000 cpu-clock:\n\t 1 f" + id +
                        "+0x1 (/x)\n\t 1 caller" + id + "+0x2 (/x)\n\t 1 main+0x3 (/x)\n\n";
            }
            hparser.feed(text);
        }
        hparser.finish();
        fleet_encoder enc({"bench", "hostile", "session-hostile", 1'790'000'000'000'000'000ULL});
        const auto h0 = clock_type::now();
        std::uint32_t n = 0;
        for (std::uint64_t from = 0; from < hp.sample_count(); from += 20'000, ++n)
            store.add(enc.encode(hp, from,
                                 std::min<std::uint64_t>(hp.sample_count(), from + 20'000), n, {},
                                 UINT64_MAX));
        if (!store.flush(std::chrono::minutes(30))) {
            std::fprintf(stderr, "fleet_store: the hostile device was not all written\n");
            return 1;
        }
        (void)client->run("OPTIMIZE TABLE bench.frames FINAL");
        std::printf(
            "hostile: %llu frames never seen again written in %.1f s; %llu frames in the "
            "store\n",
            static_cast<unsigned long long>(frames), seconds_since(h0),
            static_cast<unsigned long long>(number(*client, "SELECT count() FROM bench.frames")));
        time_query(*client, "functions (one device)", fleet_functions_sql("bench", one, 200));
        time_flame(*client, "flame graph (one device)", one, nullptr);
        time_query(*client, "devices (all)", fleet_devices_sql("bench", all), true);
        time_query(*client, "functions (all devices)", fleet_functions_sql("bench", all, 200),
                   true);
    }
    store.stop();
    return 0;
}
