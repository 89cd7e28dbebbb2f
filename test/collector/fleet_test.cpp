#include "collector/agents/command_link.hpp"
#include "collector/fleet/clickhouse.hpp"
#include "collector/fleet/queries.hpp"
#include "collector/fleet/rows.hpp"
#include "collector/parse/perf_script.hpp"
#include "protocol/build_id.hpp"
#include "support/agents.hpp"
#include "support/clickhouse_proc.hpp"
#include "support/collector_proc.hpp"
#include "support/fixtures.hpp"

#include <catch2/catch.hpp>

#include <boost/json.hpp>

#include <algorithm>
#include <cmath>
#include <csignal>
#include <map>
#include <set>
#include <sstream>
#include <thread>

using namespace collector;
namespace json = boost::json;
using namespace std::chrono_literals;

namespace {

constexpr std::uint64_t ns_per_day = 86'400'000'000'000ULL;

// A query's TabSeparated answer as rows of fields.
std::vector<std::vector<std::string>> query(const clickhouse_client& ch, const std::string& sql) {
    auto r = ch.run(sql);
    INFO(sql);
    if (!r)
        FAIL(r.error().message);
    std::vector<std::vector<std::string>> rows;
    std::istringstream in(*r);
    std::string line;
    while (std::getline(in, line)) {
        std::vector<std::string> fields;
        std::size_t from = 0;
        for (auto tab = line.find('\t'); tab != std::string::npos; tab = line.find('\t', from)) {
            fields.push_back(line.substr(from, tab - from));
            from = tab + 1;
        }
        fields.push_back(line.substr(from));
        rows.push_back(std::move(fields));
    }
    return rows;
}

// A flame graph's tree as text, children in name order: two trees with the same text have the
// same nodes with the same counts.
std::string tree_text(const json::value& node) {
    std::vector<std::string> kids;
    for (const auto& c : node.at("children").as_array())
        kids.push_back(tree_text(c));
    std::sort(kids.begin(), kids.end());
    std::string out = std::string(node.at("name").as_string()) + " " +
                      std::to_string(node.at("value").to_number<std::uint64_t>()) + " " +
                      std::to_string(node.at("self").to_number<std::uint64_t>()) + "(";
    for (const auto& k : kids)
        out += k + ",";
    return out + ")";
}

// A node's children as tree_text writes them, whatever its own name.
std::string below(const json::value& node) {
    const auto text = tree_text(node);
    return text.substr(text.find('('));
}

template <class F>
void walk_tree(const json::value& node, F&& f) {
    f(node.as_object());
    for (const auto& c : node.at("children").as_array())
        walk_tree(c, f);
}

// A client of the throwaway server `ch`, in `database`.
clickhouse_client client_for(const test_support::clickhouse_proc& ch, const std::string& database) {
    clickhouse_config cfg;
    cfg.url = ch.url();
    cfg.database = database;
    auto c = clickhouse_client::make(cfg);
    REQUIRE(c.has_value());
    return *c;
}
} // namespace

TEST_CASE("fleet rows: a stack and a frame have one id whichever collector writes them, a chunk's "
          "samples are split at midnight",
          "[collector][fleet]") {
    profile p;
    script_parser parser(p);
    parser.feed(test_support::fixture("collector/fixtures/callchain_fields.txt"));
    parser.finish();
    REQUIRE(p.sample_count() > 3);
    const std::uint64_t day = 20'000;
    fleet_encoder one({"c1", "board-1", "s1", day * ns_per_day - 1});
    fleet_encoder other({"c2", "board-2", "s2", 5 * ns_per_day});
    const std::map<std::string, std::string> builds;
    const std::uint64_t late = 30'000 * ns_per_day; // every chunk came long after its samples
    const auto a = one.encode(p, 0, p.sample_count(), 0, builds, late);
    const auto b = other.encode(p, 0, p.sample_count(), 7, builds, late);
    CHECK(a.samples == p.sample_count());
    CHECK(std::set(a.stack_ids.begin(), a.stack_ids.end()) ==
          std::set(b.stack_ids.begin(), b.stack_ids.end()));
    CHECK(std::set(a.frame_ids.begin(), a.frame_ids.end()) ==
          std::set(b.frame_ids.begin(), b.frame_ids.end()));
    CHECK(a.stack_ids.size() == std::set(a.stack_ids.begin(), a.stack_ids.end()).size());
    // The first sample falls 1 ns before midnight, the later ones after it.
    REQUIRE(a.days.count(day - 1));
    std::uint64_t split = 0;
    for (const auto& [d, rows] : a.days)
        split += rows.count;
    CHECK(split == a.samples);
    CHECK(fleet_date(static_cast<std::uint16_t>(day)) == "2024-10-04");
    // A later chunk names only the stacks it has not named before.
    const auto again = one.encode(p, 0, p.sample_count(), 1, builds, late);
    CHECK(again.stack_ids.empty());
    CHECK(again.frame_ids.empty());
    CHECK(again.samples == a.samples);
    // A module's build-id that comes after its frames were written (the device's binaries
    // metrics trail its first samples): its frames are written again with it, and the
    // samples from then on carry it.
    std::string module;
    for (std::uint32_t f = 0; f < p.frame_count() && module.empty(); ++f)
        if (p.module(f).starts_with("/"))
            module = p.module(f);
    REQUIRE_FALSE(module.empty());
    const std::map<std::string, std::string> later{{module, "00112233aabbccdd"}};
    const auto named = one.encode(p, 0, p.sample_count(), 2, later, late);
    CHECK_FALSE(named.frame_ids.empty());
    CHECK_FALSE(named.stack_ids.empty());
    std::string rows;
    for (const auto& [d, r] : named.days)
        rows += r.rows;
    CHECK(rows.find("00112233aabbccdd") != std::string::npos);
    CHECK(one.encode(p, 0, p.sample_count(), 3, later, late).frame_ids.empty()); // once
    // …a day: a day later every stack and frame used is written again (retention drops only
    // those not written for two days that no sample uses).
    const auto next_day = one.encode(p, 0, p.sample_count(), 4, later, late + ns_per_day);
    CHECK(next_day.stack_ids.size() == a.stack_ids.size());
    CHECK_FALSE(next_day.frame_ids.empty());
    // Another build of a module is another frame.
    CHECK(fleet_encoder::frame_id("f", "/bin/x", "ab") !=
          fleet_encoder::frame_id("f", "/bin/x", ""));
    // The ids are the store's keys across collectors and releases: fixed values, so a change
    // of the hash or of what it covers (which would split every device's history in two) fails
    // here.
    CHECK(fleet_encoder::frame_id("f", "/bin/x", "") == 0x1dea75f71db23f42u);
    CHECK(fleet_encoder::frame_id("matrix_multiply", "/usr/bin/perfwire-demo",
                                  "5f0c2b8e8a3d4e1f9a7b6c5d4e3f2a1b0c9d8e7f") ==
          0x71946d5a911d1dc0u);
    CHECK(*std::min_element(a.stack_ids.begin(), a.stack_ids.end()) == 0x14e3640ea595352u);
}

TEST_CASE("fleet rows: a sample's time is never after its chunk came, whatever the device's clock "
          "says",
          "[collector][fleet]") {
    // Samples a day apart by the device's perf clock, in one chunk that came 2 s after the
    // session started: a partition per day if believed.
    std::string text;
    for (int i = 0; i < 40; ++i)
        text += "demo 100/100 " + std::to_string(1000 + i * 86'400) +
                ".000000: 1000 cpu-clock:\n\t    aaaa work+0x1 (/bin/demo)\n\n";
    profile p;
    script_parser parser(p);
    parser.feed(text);
    parser.finish();
    REQUIRE(p.sample_count() == 40);
    const std::uint64_t start = 20'000 * ns_per_day + ns_per_day / 2;
    fleet_encoder enc({"c1", "board-1", "s1", start});
    const auto b = enc.encode(p, 0, p.sample_count(), 0, {}, start + 2'000'000'000);
    CHECK(b.samples == 40);
    CHECK(b.clamped == 39); // all but the first claimed to be days later
    REQUIRE(b.days.size() == 1);
    CHECK(b.days.begin()->first == 20'000);
    // An honest clock: nothing is moved, and the samples fall in the days they were taken.
    fleet_encoder honest({"c1", "board-1", "s2", start});
    const auto h = honest.encode(p, 0, p.sample_count(), 0, {}, start + 41 * ns_per_day);
    CHECK(h.clamped == 0);
    CHECK(h.days.size() == 40);
    // A chunk that came before the session's start (the collector's clock stepped back): every
    // sample at the start, none earlier.
    fleet_encoder stepped({"c1", "board-1", "s3", start});
    const auto st = stepped.encode(p, 0, p.sample_count(), 0, {}, start - ns_per_day);
    CHECK(st.clamped == 39);
    REQUIRE(st.days.size() == 1);
    CHECK(st.days.begin()->first == 20'000);
}

TEST_CASE("fleet flame graph: stacks and frame names make the tree, a baseline its deltas, a bad "
          "answer an error",
          "[collector][fleet]") {
    // Two stacks of process app, leaf first: main → work (3 samples), and work alone (1).
    const fleet_answers now{R"({"data":[[["1","2"],"app","3","30"],[["1"],"app","1","10"]]})",
                            R"({"data":[["1","work","app"],["2","main","app"]]})"};
    const fleet_answers before{R"({"data":[[["1","2"],"app","1","10"]]})",
                               R"({"data":[["1","work","app"],["2","main","app"]]})"};
    fleet_flame_shape one_tree;
    one_tree.by_process = false;
    auto flame = fleet_flame_json(now, &before, one_tree, 100);
    REQUIRE(flame.has_value());
    INFO(json::serialize(*flame));
    CHECK(flame->at("total").to_number<int>() == 4);
    const auto& root = flame->at("root").as_object();
    REQUIRE(root.at("children").as_array().size() == 2);
    const auto& main = root.at("children").as_array()[0].as_object();
    CHECK(main.at("name") == "main");
    CHECK(main.at("value").to_number<int>() == 3);
    CHECK(main.at("self").to_number<int>() == 0);
    CHECK(main.at("baseline_pct").as_double() == 100.0);
    CHECK(main.at("delta_pct").as_double() == -25.0);
    const auto& work = main.at("children").as_array()[0].as_object();
    CHECK(work.at("name") == "work");
    CHECK(work.at("self").to_number<int>() == 3);
    // work without a caller: new since the baseline.
    const auto& alone = root.at("children").as_array()[1].as_object();
    CHECK(alone.at("baseline_pct").as_double() == 0.0);
    CHECK(alone.at("delta_pct").as_double() == 25.0);
    // Bottom-up, by period: work at the root's children, its callers under it.
    fleet_flame_shape up;
    up.inverted = up.period = true;
    auto inverted = fleet_flame_json(now, nullptr, up, 100);
    REQUIRE(inverted.has_value());
    CHECK(inverted->at("total").to_number<int>() == 40);
    const auto& leaf = inverted->at("root").at("children").as_array()[0];
    CHECK(leaf.at("name") == "work");
    CHECK(leaf.at("value").to_number<int>() == 40);
    CHECK(leaf.at("children").as_array()[0].at("name") == "main");
    CHECK_FALSE(leaf.as_object().contains("delta_pct")); // no baseline, no deltas
    // By process (the default): each process a frame under the root, at the stacks' ends
    // bottom-up; two processes' mains are two trees.
    const fleet_answers two{
        R"({"data":[[["1","2"],"app","3","30"],[["1","2"],"db","2","20"],[["1"],"app","1","10"]]})",
        now.frames};
    const auto by_process = fleet_flame_json(two, nullptr, {}, 100);
    REQUIRE(by_process.has_value());
    const auto& processes = by_process->at("root").at("children").as_array();
    REQUIRE(processes.size() == 2);
    CHECK(processes[0].at("name") == "app");
    CHECK(processes[0].at("module") == "[process]");
    CHECK(processes[0].at("value").to_number<int>() == 4);
    CHECK(processes[0].at("children").as_array()[0].at("name") == "main");
    CHECK(processes[1].at("name") == "db");
    CHECK(processes[1].at("value").to_number<int>() == 2);
    fleet_flame_shape up_by_process;
    up_by_process.inverted = true;
    const auto ends = fleet_flame_json(two, nullptr, up_by_process, 100);
    REQUIRE(ends.has_value());
    const auto& work_up = ends->at("root").at("children").as_array()[0];
    CHECK(work_up.at("name") == "work");
    CHECK(work_up.at("children").as_array()[0].at("name") == "main");
    CHECK(work_up.at("children").as_array()[0].at("children").as_array().size() == 2);
    // Times are seconds since the epoch, or refused.
    for (const char* bad : {".", "yesterday", "99999999999999999999", "1.2.3"})
        CHECK_FALSE(parse_fleet_filter({{"from", bad}}).has_value());
    CHECK(*parse_fleet_filter({{"from", "1795762356"}})->from_ns == 1795762356000000000ULL);
    const auto base = parse_fleet_baseline({{"base_build", "ab12"}}, fleet_filter{});
    REQUIRE(base.has_value());
    CHECK((*base)->build == "ab12");
    CHECK_FALSE(parse_fleet_baseline({{"base_to", "."}}, fleet_filter{}).has_value());
    // What ClickHouse did not answer as asked is an error, not a tree.
    for (const auto& bad :
         {fleet_answers{"not json", now.frames}, fleet_answers{R"({"data":[["x"]]})", now.frames},
          fleet_answers{now.stacks, R"({"data":[[1,2,3]]})"}}) {
        const auto r = fleet_flame_json(bad, nullptr, {}, 100);
        REQUIRE_FALSE(r.has_value());
        CHECK(r.error().code == "clickhouse_error");
    }
}

TEST_CASE("fleet store: a live session's samples reach ClickHouse with the totals the collector's "
          "model gives — ClickHouse killed mid-stream and started again loses and duplicates "
          "nothing",
          "[collector][fleet][clickhouse][perf][integration]") {
    test_support::clickhouse_proc ch;
    test_support::temp_dir dir;
    auto demo = test_support::start_demo(60);
    test_support::collector_proc coll(dir.path, {"--clickhouse", ch.url(), "--clickhouse-database",
                                                 "fleet_test", "--collector-name", "c1"});
    auto agent =
        test_support::start_agent(test_support::agent_flavour::cpp,
                                  {"--server", "127.0.0.1:" + std::to_string(coll.agent_port),
                                   "--pid", std::to_string(demo->pid()), "--duration", "1"});
    // Some samples written, then ClickHouse goes away while the agent streams on.
    test_support::wait_for(coll, "/api/status", 20s, [](const json::value& v) {
        return v.at("fleet").at("written_samples").to_number<std::uint64_t>() > 0;
    });
    ch.stop();
    const auto waiting = test_support::wait_for(coll, "/api/status", 20s, [](const json::value& v) {
        const auto& f = v.at("fleet");
        return f.at("waiting_samples").to_number<std::uint64_t>() > 0 &&
               !f.at("last_error").as_string().empty();
    });
    INFO(json::serialize(waiting));
    CHECK_THAT(std::string(waiting.at("fleet").at("last_error").as_string()),
               Catch::Contains("ClickHouse at 127.0.0.1:" + std::to_string(ch.port)));
    ch.restart();
    // Enough samples for every worker of the demo to count, then the agent stops, so does the
    // run; everything that waited is written.
    test_support::wait_for(coll, "/api/sessions", 60s, [](const json::value& v) {
        return v.as_array().size() == 1 &&
               v.as_array()[0].at("samples").to_number<std::uint64_t>() >= 400;
    });
    agent->signal(SIGTERM);
    REQUIRE(agent->wait(20s));
    const auto sessions =
        test_support::wait_for(coll, "/api/sessions", 30s, [](const json::value& v) {
            return v.as_array().size() == 1 && !v.as_array()[0].at("live").as_bool();
        });
    const std::string id(sessions.as_array()[0].at("id").as_string());
    const auto samples = sessions.as_array()[0].at("samples").to_number<std::uint64_t>();
    REQUIRE(samples > 100);
    const auto status = test_support::wait_for(coll, "/api/status", 60s, [&](const json::value& v) {
        return v.at("fleet").at("written_samples").to_number<std::uint64_t>() == samples;
    });
    INFO(json::serialize(status));
    CHECK(status.at("fleet").at("waiting_samples").to_number<std::uint64_t>() == 0);
    CHECK(status.at("fleet").at("not_kept_samples").to_number<std::uint64_t>() == 0);
    CHECK(status.at("fleet").at("retries").to_number<std::uint64_t>() > 0);
    CHECK(coll.proc->stderr_text().find("writing to ClickHouse at") != std::string::npos);

    const auto client = client_for(ch, "fleet_test");
    // Every sample once: as many as the session holds, no chunk twice.
    const auto counted = query(client, "SELECT count(), uniqExact(chunk), min(device), "
                                       "min(collector), min(session), sum(period) FROM samples");
    REQUIRE(counted.size() == 1);
    CHECK(std::stoull(counted[0][0]) == samples);
    CHECK(counted[0][3] == "c1");
    CHECK(counted[0][4] == id);
    // Chunks are numbered as the session took them: none beyond its count.
    const auto chunks = sessions.as_array()[0].at("chunks").to_number<std::uint64_t>();
    CHECK(std::stoull(counted[0][1]) <= chunks);
    CHECK(std::stoull(query(client, "SELECT max(chunk) FROM samples")[0][0]) < chunks);

    // The functions the collector's model counts, counted by ClickHouse from the stored stacks
    // and frames (one JOIN a query: ClickHouse 18.16 takes no more).
    const auto functions = coll.get("/api/sessions/" + id + "/functions?weight=samples&limit=5");
    const auto by_leaf = query(
        client,
        "SELECT symbol, sum(n) AS c FROM (SELECT frame, n FROM (SELECT stack, count() AS n FROM "
        "samples GROUP BY stack) ANY LEFT JOIN (SELECT stack, frames[1] AS frame FROM stacks) "
        "USING stack) ANY LEFT JOIN (SELECT frame, any(symbol) AS symbol FROM frames GROUP BY "
        "frame) USING frame GROUP BY symbol ORDER BY c DESC, symbol LIMIT 5");
    std::map<std::string, std::uint64_t> stored;
    for (const auto& row : by_leaf)
        stored[row[0]] = std::stoull(row[1]);
    INFO(json::serialize(functions));
    int compared = 0;
    for (const auto& f : functions.at("functions").as_array()) {
        const std::string name(f.at("name").as_string());
        const auto self = f.at("self").to_number<std::uint64_t>();
        if (self == 0 || !stored.count(name))
            continue;
        CHECK(stored[name] == self);
        ++compared;
    }
    CHECK(compared >= 3);
    CHECK(stored.count("(anonymous namespace)::matrix_multiply"));

    // The Fleet API asks the same of ClickHouse: the devices, and the functions with their
    // inclusive counts as the collector's model gives them.
    const auto devices = coll.get("/api/fleet/devices");
    INFO(json::serialize(devices));
    REQUIRE(devices.at("devices").as_array().size() == 1);
    const auto& device = devices.at("devices").as_array()[0];
    CHECK(device.at("samples").to_number<std::uint64_t>() == samples);
    CHECK(device.at("events").as_array().size() == 1);
    CHECK(device.at("last_sec").to_number<double>() >= device.at("first_sec").to_number<double>());
    // Its builds named by their files, the demo's own among them.
    const auto& modules = devices.at("build_modules").as_object();
    bool demo_build = false;
    for (const auto& b : device.at("builds").as_array()) {
        REQUIRE(modules.contains(b.as_string()));
        demo_build |= modules.at(b.as_string()).as_string().ends_with("/perfwire-demo");
    }
    CHECK(demo_build);
    const auto fleet = coll.get("/api/fleet/functions?event=cpu-clock&limit=100&devices=" +
                                std::string(device.at("device").as_string()));
    INFO(json::serialize(fleet));
    CHECK(fleet.at("samples").to_number<std::uint64_t>() == samples);
    const auto model = coll.get("/api/sessions/" + id + "/functions?weight=samples&limit=100");
    std::map<std::string, std::pair<std::uint64_t, std::uint64_t>> fleet_counts;
    for (const auto& f : fleet.at("functions").as_array())
        fleet_counts[std::string(f.at("name").as_string()) + " " +
                     std::string(f.at("module").as_string())] = {
            f.at("self").to_number<std::uint64_t>(), f.at("total").to_number<std::uint64_t>()};
    compared = 0;
    for (const auto& f : model.at("functions").as_array()) {
        const auto key =
            std::string(f.at("name").as_string()) + " " + std::string(f.at("module").as_string());
        if (f.at("total").to_number<std::uint64_t>() * 20 < samples || !fleet_counts.count(key))
            continue; // (the table is cut at `limit`: only the big ones are surely in both)
        INFO(key);
        CHECK(fleet_counts[key].first == f.at("self").to_number<std::uint64_t>());
        CHECK(fleet_counts[key].second == f.at("total").to_number<std::uint64_t>());
        ++compared;
    }
    CHECK(compared >= 4);
    // A build: the samples whose stacks hold a frame of the demo's build, so matrix_multiply's
    // are all there.
    const auto build = query(client, "SELECT any(build_id) FROM frames WHERE module LIKE "
                                     "'%perfwire-demo' AND build_id != ''");
    REQUIRE(build.size() == 1);
    REQUIRE_FALSE(build[0][0].empty());
    const auto of_build = coll.get("/api/fleet/functions?build=" + build[0][0]);
    CHECK(of_build.at("samples").to_number<std::uint64_t>() <= samples);
    for (const auto& f : of_build.at("functions").as_array())
        if (f.at("name").as_string() == "(anonymous namespace)::matrix_multiply")
            CHECK(f.at("total").to_number<std::uint64_t>() ==
                  fleet_counts["(anonymous namespace)::matrix_multiply " +
                               std::string(f.at("module").as_string())]
                      .second);

    // The flame graph ClickHouse's stacks make is the session's own, node for node.
    const auto session_flame = coll.get("/api/sessions/" + id + "/flamegraph?weight=samples");
    const auto fleet_flame = coll.get("/api/fleet/flamegraph?group=none&devices=" +
                                      std::string(device.at("device").as_string()));
    CHECK(fleet_flame.at("total").to_number<std::uint64_t>() == samples);
    CHECK(tree_text(fleet_flame.at("root")) == tree_text(session_flame.at("root")));
    // By process (the default): the demo is one process, its tree the session's under it.
    const auto by_process =
        coll.get("/api/fleet/flamegraph?devices=" + std::string(device.at("device").as_string()));
    const auto& processes = by_process.at("root").at("children").as_array();
    REQUIRE(processes.size() == 1);
    CHECK(processes[0].at("name") == "perfwire-demo");
    CHECK(processes[0].at("value").to_number<std::uint64_t>() == samples);
    CHECK(below(processes[0]) == below(session_flame.at("root")));
    // Compared with itself: nothing moved.
    const auto same = coll.get("/api/fleet/flamegraph?base_event=cpu-clock");
    double most = 0;
    walk_tree(same.at("root"), [&](const json::object& n) {
        most = std::max(most, std::abs(n.at("delta_pct").as_double()));
    });
    CHECK(most < 1e-9);
    const auto same_functions = coll.get("/api/fleet/functions?base_event=cpu-clock");
    for (const auto& f : same_functions.at("functions").as_array()) {
        CHECK(std::abs(f.at("delta_total_pct").as_double()) < 1e-9);
        CHECK(f.at("baseline_self_pct").as_double() == f.at("self_pct").as_double());
    }
    // Stacks through one function: its inclusive count.
    const auto through =
        coll.get("/api/fleet/functions?limit=1&function=(anonymous%20namespace)::matrix_multiply");
    CHECK(through.at("samples").to_number<std::uint64_t>() ==
          fleet_counts["(anonymous namespace)::matrix_multiply " +
                       std::string(through.at("functions").as_array()[0].at("module").as_string())]
              .second);
    CHECK(test_support::http_call(coll.http_port, "GET", "/api/fleet/functions?build=XYZ").status ==
          400);
    // Everything went through the live path: nothing had to be written again from the folder,
    // and ClickHouse still holds each sample once.
    INFO(coll.proc->stderr_text());
    CHECK(coll.proc->stderr_text().find("from its folder") == std::string::npos);
    const auto per_chunk =
        query(client, "SELECT chunk, count() FROM samples GROUP BY chunk ORDER BY chunk");
    std::string chunks_text;
    for (const auto& row : per_chunk)
        chunks_text += row[0] + ":" + row[1] + " ";
    INFO("chunks " << chunks_text);
    CHECK(std::stoull(query(client, "SELECT count() FROM samples")[0][0]) == samples);
    CHECK(test_support::http_call(coll.http_port, "GET", "/api/fleet/functions?from=yesterday")
              .status == 400);
}

namespace {

// The sessions a collector lists, by device: how many, how many samples, and each one's id.
struct device_sessions {
    std::vector<std::string> ids;
    std::uint64_t samples = 0;
    int continuous = 0;
};

std::map<std::string, device_sessions> sessions_by_device(const json::value& list) {
    std::map<std::string, device_sessions> out;
    for (const auto& s : list.as_array()) {
        auto& d = out[std::string(s.at("hostname").as_string())];
        d.ids.emplace_back(s.at("id").as_string());
        d.samples += s.at("samples").to_number<std::uint64_t>();
        if (const auto* c = s.as_object().if_contains("continuous"); c && c->as_bool())
            ++d.continuous;
    }
    return out;
}

bool none_live(const json::value& list) {
    for (const auto& s : list.as_array())
        if (s.at("live").as_bool())
            return false;
    return true;
}

} // namespace

TEST_CASE("fleet store: two collectors profiling their agents continuously write one store whose "
          "devices and functions are what the collectors' models count",
          "[collector][fleet][clickhouse][perf][integration][longest]") {
    test_support::clickhouse_proc ch;
    test_support::temp_dir d1, d2;
    auto demo = test_support::start_demo(600);
    const auto collector = [&](const test_support::temp_dir& d, const std::string& name) {
        return test_support::collector_proc(
            d.path, {"--clickhouse", ch.url(), "--clickhouse-database", "fleet_two",
                     "--collector-name", name, "--continuous", "49", "--continuous-session", "3"});
    };
    auto c1 = collector(d1, "c1");
    auto c2 = collector(d2, "c2");
    const auto agent = [](test_support::agent_flavour f, const test_support::collector_proc& c,
                          const std::string& name) {
        return test_support::start_agent(
            f, {"--server", "127.0.0.1:" + std::to_string(c.agent_port), "--name", name});
    };
    // Nobody presses start: each agent profiles its whole system, in sessions of 3 seconds.
    std::vector<std::unique_ptr<test_support::spawned>> agents;
    agents.push_back(agent(test_support::agent_flavour::cpp, c1, "board-a"));
    agents.push_back(agent(test_support::agent_flavour::python, c1, "board-b"));
    agents.push_back(agent(test_support::agent_flavour::cpp, c2, "board-c"));
    const auto rolled = [](std::initializer_list<const char*> devices) {
        return [devices](const json::value& v) {
            const auto by = sessions_by_device(v);
            for (const char* d : devices)
                if (!by.count(d) || by.at(d).continuous < 2)
                    return false;
            return true;
        };
    };
    test_support::wait_for(c1, "/api/sessions", 60s, rolled({"board-a", "board-b"}));
    test_support::wait_for(c2, "/api/sessions", 60s, rolled({"board-c"}));

    // A user's run takes the place of continuous profiling, which comes back when it ends.
    const auto targets = c2.get("/api/targets").as_array();
    REQUIRE(targets.size() == 1);
    CHECK(targets[0].at("continuous").as_bool());
    const std::string target(targets[0].at("id").as_string());
    // A start may take as long as the collector gives it (agents::takeover_deadline: the
    // agent ends its continuous run — perf script names what is left of a whole system's
    // samples — then probes perf and starts), so the client waits as long. The user's run
    // lasts until the test stops it.
    const auto started = test_support::http_call(
        c2.http_port, "POST", "/api/targets/" + target + "/command",
        R"({"cmd":"start","args":{"pid":)" + std::to_string(demo->pid()) + R"(,"duration":60}})",
        {}, std::chrono::duration_cast<std::chrono::seconds>(agents::takeover_deadline()) + 5s);
    INFO(started.body);
    REQUIRE(started.status == 200);
    const auto users = json::parse(started.body).at("session_id");
    REQUIRE(users.is_string());
    test_support::wait_for(
        c2, "/api/sessions/" + std::string(users.as_string()), 20s,
        [](const json::value& v) { return v.at("samples").to_number<std::uint64_t>() > 0; });
    CHECK_FALSE(c2.get("/api/targets").as_array()[0].at("continuous").as_bool());
    // A stop, drained: as long as the collector gives one (perf script names what is left).
    const auto stopped = test_support::http_call(
        c2.http_port, "POST", "/api/targets/" + target + "/command", R"({"cmd":"stop"})", {},
        std::chrono::duration_cast<std::chrono::seconds>(
            agents::deadline_for(protocol::cmd::stop)) +
            5s);
    INFO(stopped.body);
    INFO(agents[2]->stderr_text());
    REQUIRE(stopped.status == 200);
    // Continuous profiling comes back, in sessions of their own, and takes samples again (a
    // session that never held one is not kept: the agents are stopped only once one has).
    const std::string users_id(users.as_string());
    const auto resumed = [&](const json::value& v) {
        for (const auto& s : v.as_array()) {
            const auto* c = s.as_object().if_contains("continuous");
            if (s.at("hostname").as_string() == "board-c" && c && c->as_bool() &&
                std::string(s.at("id").as_string()) > users_id &&
                s.at("samples").to_number<std::uint64_t>() > 0)
                return true;
        }
        return false;
    };
    const auto back = test_support::wait_for(c2, "/api/sessions", 90s, resumed);
    INFO(c2.proc->stderr_text());
    INFO(json::serialize(back));
    REQUIRE(back.is_array());
    REQUIRE(resumed(back));

    // Each agent ends its run as on a stop, drained (perf script names what is left of a whole
    // machine's samples: on a loaded machine, up to the 30 s after which an agent kills it),
    // then leaves: as long as the collector gives a stop.
    for (auto& a : agents)
        a->signal(SIGTERM);
    for (auto& a : agents)
        REQUIRE(a->wait(agents::deadline_for(protocol::cmd::stop)));
    std::map<std::string, device_sessions> devices;
    for (auto* c : {&c1, &c2}) {
        // Every session ended (its last chunks parsed: slow in a sanitizer build that parses a
        // whole machine's samples), then all of its samples in the store.
        const auto list = test_support::wait_for(*c, "/api/sessions", 120s, none_live);
        INFO(c->proc->stderr_text());
        INFO(json::serialize(c->get("/api/status")));
        REQUIRE(list.is_array());
        REQUIRE(none_live(list));
        std::uint64_t samples = 0;
        for (auto& [name, d] : sessions_by_device(list)) {
            samples += d.samples;
            devices[name] = d;
        }
        const auto written = [&](const json::value& v) {
            return v.at("fleet").at("written_samples").to_number<std::uint64_t>() == samples;
        };
        const auto status = test_support::wait_for(*c, "/api/status", 120s, written);
        if (!written(status)) {
            // Which sessions the store and the models disagree on, and what the store said.
            std::ostringstream why;
            why << "the sessions hold " << samples << " samples; the store's status "
                << json::serialize(status.at("fleet")) << "\nsession, samples listed, samples "
                << "in ClickHouse:\n";
            std::map<std::string, std::string> stored;
            for (const auto& row :
                 query(client_for(ch, "fleet_two"),
                       "SELECT session, count() FROM samples WHERE collector = '" +
                           std::string(c == &c1 ? "c1" : "c2") + "' GROUP BY session"))
                stored[row.at(0)] = row.at(1);
            for (const auto& s : list.as_array()) {
                const std::string id(s.at("id").as_string());
                why << id << " " << s.at("samples") << " "
                    << (stored.count(id) ? stored[id] : "none") << "\n";
                stored.erase(id);
            }
            for (const auto& [id, n] : stored)
                why << id << " (not listed) " << n << "\n";
            why << c->get("/api/sessions");
            INFO(why.str());
            INFO(c->proc->stderr_text());
            FAIL("the fleet store does not hold what the sessions count");
        }
    }
    REQUIRE(devices.size() == 3);
    CHECK(devices["board-c"].ids.size() >= 3); // continuous, the user's run, continuous again

    // Either collector answers for the whole fleet.
    const auto listed = c2.get("/api/fleet/devices");
    INFO(json::serialize(listed));
    REQUIRE(listed.at("devices").as_array().size() == 3);
    // Profiling the whole system, the agents name the build of what ran most: the demo's.
    const auto demo_build = protocol::read_build_id(PERFWIRE_DEMO_BIN);
    REQUIRE(demo_build);
    std::string agents_said; // (how each agent's runs went, should a device lack that build)
    for (const auto& a : agents)
        agents_said += a->stderr_text() + "\n";
    INFO(agents_said);
    INFO("c1: " << c1.proc->stderr_text()
                << "\nc1's sessions: " << json::serialize(c1.get("/api/sessions")));
    for (const auto& d : listed.at("devices").as_array()) {
        CHECK(d.at("samples").to_number<std::uint64_t>() ==
              devices[std::string(d.at("device").as_string())].samples);
        const auto& builds = d.at("builds").as_array();
        CHECK(std::find(builds.begin(), builds.end(), json::value(*demo_build)) != builds.end());
    }
    // Each device's functions: the sum of its sessions' function tables (the C++ and the
    // Python agent, each collector's own).
    using counts = std::map<std::string, std::pair<std::uint64_t, std::uint64_t>>;
    const auto add = [](counts& to, const json::value& table) {
        for (const auto& f : table.at("functions").as_array()) {
            auto& [self, total] = to[std::string(f.at("name").as_string()) + " " +
                                     std::string(f.at("module").as_string())];
            self += f.at("self").to_number<std::uint64_t>();
            total += f.at("total").to_number<std::uint64_t>();
        }
    };
    for (const auto& [device, c] :
         {std::pair{"board-a", &c1}, std::pair{"board-b", &c1}, std::pair{"board-c", &c2}}) {
        INFO(device);
        counts model, stored;
        for (const auto& id : devices[device].ids)
            add(model, c->get("/api/sessions/" + id + "/functions?weight=samples&limit=1000000"));
        const auto fleet =
            c1.get(std::string("/api/fleet/functions?limit=100000&devices=") + device);
        CHECK(fleet.at("samples").to_number<std::uint64_t>() == devices[device].samples);
        add(stored, fleet);
        CHECK(stored.size() > 10);
        CHECK(stored == model);
    }
}

TEST_CASE("fleet backlog: samples the store could not keep, an import made while ClickHouse was "
          "down and what waited when the collector stopped are written from the session "
          "folders, each once",
          "[collector][fleet][clickhouse][perf][integration]") {
    test_support::clickhouse_proc ch;
    test_support::temp_dir dir;
    const auto client = client_for(ch, "fleet_backlog");
    const std::vector<std::string> store{"--clickhouse", ch.url(), "--clickhouse-database",
                                         "fleet_backlog"};
    const auto held = [&](const std::string& session) {
        return std::stoull(query(client, "SELECT count() FROM samples WHERE session = " +
                                             clickhouse_quote(session))[0][0]);
    };
    const auto settled = [](const json::value& v) {
        const auto& f = v.at("fleet");
        return f.at("backlog").at("sessions").to_number<std::uint64_t>() == 0 &&
               f.at("backlog").at("writing").as_string().empty() &&
               f.at("waiting_samples").to_number<std::uint64_t>() == 0;
    };
    std::string live_id, import_id;
    std::uint64_t live_samples = 0, import_samples = 0;
    {
        // No memory for batches at all: every sample waits in the session folder and is
        // written from there when the session ends.
        auto with_store = store;
        with_store.insert(with_store.end(), {"--clickhouse-buffer-mb", "0"});
        test_support::collector_proc coll(dir.path, with_store);
        auto demo = test_support::start_demo(30);
        auto agent =
            test_support::start_agent(test_support::agent_flavour::cpp,
                                      {"--server", "127.0.0.1:" + std::to_string(coll.agent_port),
                                       "--pid", std::to_string(demo->pid()), "--duration", "1"});
        const auto sessions =
            test_support::wait_for(coll, "/api/sessions", 30s, [](const json::value& v) {
                return v.as_array().size() == 1 &&
                       v.as_array()[0].at("samples").to_number<std::uint64_t>() >= 200;
            });
        live_id = std::string(sessions.as_array()[0].at("id").as_string());
        agent->signal(SIGTERM);
        REQUIRE(agent->wait(20s));
        const auto ended =
            test_support::wait_for(coll, "/api/sessions", 30s, [](const json::value& v) {
                return !v.as_array()[0].at("live").as_bool();
            });
        live_samples = ended.as_array()[0].at("samples").to_number<std::uint64_t>();
        const auto status = test_support::wait_for(coll, "/api/status", 60s, settled);
        INFO(json::serialize(status));
        CHECK(status.at("fleet").at("not_kept_samples").to_number<std::uint64_t>() == live_samples);
        CHECK(status.at("fleet").at("backlog").at("written_samples").to_number<std::uint64_t>() ==
              live_samples);
        CHECK(held(live_id) == live_samples);
        CHECK_FALSE(std::filesystem::exists(dir.path / live_id / "fleet-pending"));

        // ClickHouse away: an import waits in its folder; so does everything at the stop.
        ch.stop();
        const auto up = test_support::http_call(
            coll.http_port, "POST", "/api/sessions/import",
            test_support::fixture("collector/fixtures/callchain_fields.txt"));
        INFO(up.body);
        REQUIRE(up.status == 200);
        import_id = std::string(json::parse(up.body).at("session_id").as_string());
        import_samples =
            coll.get("/api/sessions/" + import_id).at("samples").to_number<std::uint64_t>();
        REQUIRE(import_samples > 0);
        test_support::wait_for(coll, "/api/status", 30s, [](const json::value& v) {
            return !v.at("fleet").at("backlog").at("last_error").as_string().empty();
        });
        CHECK(std::filesystem::exists(dir.path / import_id / "fleet-pending"));
    }
    ch.restart();
    // The next start writes what the folders hold and ClickHouse lacks: the import; the live
    // session, there already, not again.
    test_support::collector_proc coll(dir.path, store);
    const auto status = test_support::wait_for(coll, "/api/status", 60s, settled);
    INFO(json::serialize(status));
    CHECK(held(import_id) == import_samples);
    CHECK(held(live_id) == live_samples);
    CHECK(status.at("fleet").at("backlog").at("written_samples").to_number<std::uint64_t>() ==
          import_samples);
    CHECK_FALSE(std::filesystem::exists(dir.path / import_id / "fleet-pending"));
    // An imported recording is a device of its own in the Fleet view.
    const auto devices = coll.get("/api/fleet/devices");
    CHECK(devices.at("devices").as_array().size() == 2);
}

TEST_CASE("fleet store: off-cpu is an event of its own in ns, asked by name: every event is "
          "every sampled one",
          "[collector][fleet][clickhouse][off-cpu][integration]") {
    test_support::clickhouse_proc ch;
    test_support::temp_dir dir;
    test_support::collector_proc coll(
        dir.path, {"--clickhouse", ch.url(), "--clickhouse-database", "fleet_waits"});
    // Three CPU samples and two waits (20 ms asleep, 300 ms in I/O), as the agent folds them.
    std::string text;
    for (int i = 0; i < 3; ++i)
        text += "app 10/12 100.00" + std::to_string(i) +
                "000000:    10101010 cpu-clock: \n"
                "\t401200 spin+0x1 (/bin/app)\n\t401100 main+0x8 (/bin/app)\n\n";
    text += "app 10/11 100.100000000: 20000000 off-cpu:\n\t0 [sleeping] ([off-cpu])\n"
            "\t401000 nap+0x4 (/bin/app)\n\t401100 main+0x8 (/bin/app)\n\n"
            "app 10/11 100.200000000: 300000000 off-cpu:\n\t0 [uninterruptible: I/O] "
            "([off-cpu])\n\t401300 read_file+0x4 (/bin/app)\n\t401100 main+0x8 (/bin/app)\n\n";
    const auto up = test_support::http_call(coll.http_port, "POST",
                                            "/api/sessions/import?name=waits.txt", text);
    INFO(up.body);
    REQUIRE(up.status == 200);
    const auto status = test_support::wait_for(coll, "/api/status", 60s, [](const json::value& v) {
        return v.at("fleet").at("written_samples").to_number<std::uint64_t>() == 5;
    });
    INFO(json::serialize(status));
    const auto devices = coll.get("/api/fleet/devices");
    INFO(json::serialize(devices));
    REQUIRE(devices.at("devices").as_array().size() == 1);
    std::set<std::string> events;
    for (const auto& e : devices.at("devices").as_array()[0].at("events").as_array())
        events.emplace(e.as_string());
    CHECK(events == std::set<std::string>{"cpu-clock", "off-cpu"});
    // Every event: the CPU's samples alone (waits summed with them would be neither).
    const auto every = coll.get("/api/fleet/functions");
    INFO(json::serialize(every));
    CHECK(every.at("samples").to_number<std::uint64_t>() == 3);
    CHECK(every.at("period").to_number<std::uint64_t>() == 3 * 10101010ULL);
    // The waits by name, weighed in ns, each under its kind.
    const auto waits = coll.get("/api/fleet/functions?event=off-cpu");
    INFO(json::serialize(waits));
    CHECK(waits.at("samples").to_number<std::uint64_t>() == 2);
    CHECK(waits.at("period").to_number<std::uint64_t>() == 320'000'000ULL);
    std::map<std::string, std::uint64_t> waited;
    for (const auto& f : waits.at("functions").as_array())
        waited[std::string(f.at("name").as_string())] =
            f.at("total_period").to_number<std::uint64_t>();
    CHECK(waited["[sleeping]"] == 20'000'000ULL);
    CHECK(waited["[uninterruptible: I/O]"] == 300'000'000ULL);
    CHECK(waited["main"] == 320'000'000ULL);
    CHECK_FALSE(waited.count("spin"));
}

TEST_CASE("fleet questions run read-only within limits ClickHouse enforces: one past a limit is "
          "stopped and answered with the limit it passed",
          "[collector][fleet][clickhouse][integration]") {
    test_support::clickhouse_proc ch;
    clickhouse_config cfg;
    cfg.url = ch.url();
    cfg.database = "system";
    cfg.query_seconds = 1;
    cfg.query_bytes = std::uint64_t{64} << 20;
    cfg.query_groups = 1000;
    auto made = clickhouse_client::make(cfg);
    REQUIRE(made.has_value());
    const auto& c = *made;
    const auto limited = [&](const std::string& sql, const std::string& which,
                             std::size_t max_answer = std::size_t{64} << 20) {
        INFO(sql);
        const auto r = c.ask(sql, max_answer);
        REQUIRE_FALSE(r.has_value());
        CHECK(r.error().code == "fleet_query_limit");
        CHECK(r.error().status == 422);
        CHECK_THAT(r.error().message, Catch::Contains(which));
    };
    // Time: stopped by ClickHouse after a second, not after the collector's 30 s.
    const auto t0 = std::chrono::steady_clock::now();
    limited("SELECT count() FROM (SELECT number FROM system.numbers LIMIT 100000000000) WHERE "
            "NOT ignore(sipHash64(number))",
            "1 s");
    CHECK(std::chrono::steady_clock::now() - t0 < 20s);
    limited("SELECT length(groupArray(number)) FROM (SELECT number FROM system.numbers LIMIT "
            "50000000)",
            "64 MiB of the server's memory");
    limited("SELECT number % 100000 AS k, count() FROM (SELECT number FROM system.numbers LIMIT "
            "1000000) GROUP BY k",
            "1000 groups");
    limited("SELECT number FROM system.numbers LIMIT 1000000 FORMAT TabSeparated", "MiB answer",
            std::size_t{1} << 20);
    // Within the limits: answered. A write: refused (read-only), not called a limit.
    const auto fine = c.ask("SELECT count() FROM (SELECT number FROM system.numbers LIMIT 1000) "
                            "FORMAT TabSeparated");
    REQUIRE(fine.has_value());
    CHECK(*fine == "1000\n");
    const auto write = c.ask("CREATE DATABASE should_not_exist");
    REQUIRE_FALSE(write.has_value());
    CHECK(write.error().code == "clickhouse_error");
    const auto listed = c.run("SELECT count() FROM system.databases WHERE name = "
                              "'should_not_exist' FORMAT TabSeparated");
    REQUIRE(listed.has_value());
    CHECK(*listed == "0\n");
}

TEST_CASE("fleet retention: the days older than --clickhouse-retention-days are dropped, the "
          "others kept, then the old stacks and frames no sample uses",
          "[collector][fleet][clickhouse][integration]") {
    test_support::clickhouse_proc ch;
    test_support::temp_dir dir;
    const auto client = client_for(ch, "fleet_retention");
    for (const auto& sql : fleet_schema("fleet_retention")) {
        const auto made = client.run(sql, {}, 1 << 20, !sql.starts_with("CREATE DATABASE"));
        INFO(sql << ": " << (made ? std::string("ok") : made.error().message));
        REQUIRE(made.has_value());
    }
    // A sample today, one 10 days ago (stack 7) and one 40 days ago (stack 8).
    const auto today =
        static_cast<std::uint16_t>(std::chrono::duration_cast<std::chrono::hours>(
                                       std::chrono::system_clock::now().time_since_epoch())
                                       .count() /
                                   24);
    std::string values;
    for (const int ago : {0, 10, 40})
        values += "('" + fleet_date(static_cast<std::uint16_t>(today - ago)) + "', '" +
                  fleet_date(static_cast<std::uint16_t>(today - ago)) +
                  " 12:00:00', 'c', 'board', 's', 0, 1, 1, 'w', 'cpu-clock', 1, " +
                  (ago == 40 ? "8" : "7") + ", ''),";
    values.pop_back();
    REQUIRE(client.run("INSERT INTO samples VALUES " + values).has_value());
    // Stacks and frames written 10 days ago: 7 (used), 8 (used by the day that goes), 9 (used
    // by none); and a stack and a frame no sample uses yet, written now (their samples may be
    // on their way).
    REQUIRE(client
                .run("INSERT INTO stacks (stack, frames, seen) VALUES (7, [100, 101], now() - "
                     "864000), (8, [101, 102], now() - 864000), (9, [103], now() - 864000), "
                     "(10, [104], now())")
                .has_value());
    REQUIRE(client
                .run("INSERT INTO frames (frame, symbol, module, build_id, seen) VALUES (100, "
                     "'a', 'm', '', now() - 864000), (101, 'b', 'm', '', now() - 864000), (102, "
                     "'c', 'm', '', now() - 864000), (103, 'd', 'm', '', now() - 864000), (104, "
                     "'e', 'm', '', now() - 864000), (105, 'f', 'm', '', now())")
                .has_value());
    test_support::collector_proc coll(dir.path,
                                      {"--clickhouse", ch.url(), "--clickhouse-database",
                                       "fleet_retention", "--clickhouse-retention-days", "30"});
    test_support::wait_for(coll, "/api/status", 30s, [](const json::value& v) {
        return v.at("fleet").at("dropped_days").to_number<int>() == 1;
    });
    const auto left = query(client, "SELECT day FROM samples ORDER BY day");
    REQUIRE(left.size() == 2);
    CHECK(left[0][0] == fleet_date(static_cast<std::uint16_t>(today - 10)));
    CHECK(left[1][0] == fleet_date(today));
    // ClickHouse deletes in the background: the old stacks no sample uses, and the old frames
    // no stack left uses, go; the rest stay.
    const auto deadline = std::chrono::steady_clock::now() + 30s;
    std::vector<std::vector<std::string>> stacks, frames;
    do {
        std::this_thread::sleep_for(100ms);
        stacks = query(client, "SELECT stack FROM stacks ORDER BY stack");
        frames = query(client, "SELECT frame FROM frames ORDER BY frame");
    } while ((stacks.size() != 2 || frames.size() != 4) &&
             std::chrono::steady_clock::now() < deadline);
    const auto ids = [](const std::vector<std::vector<std::string>>& rows) {
        std::string out;
        for (const auto& r : rows)
            out += r.at(0) + " ";
        return out;
    };
    CHECK(ids(stacks) == "7 10 ");
    CHECK(ids(frames) == "100 101 104 105 ");
}

TEST_CASE("fleet store sharded: a Distributed table over two clickhouse-server shards takes the "
          "collector's samples and answers the Fleet API as one server does",
          "[collector][fleet][clickhouse][perf][integration]") {
    test_support::clickhouse_proc a(0, true), b(0, true);
    // One cluster of the two, known to the server the collector talks to (read at run time).
    a.configure("<remote_servers><fleet>"
                "<shard><replica><host>127.0.0.1</host><port>" +
                std::to_string(a.tcp_port) +
                "</port></replica></shard>"
                "<shard><replica><host>127.0.0.1</host><port>" +
                std::to_string(b.tcp_port) + "</port></replica></shard></fleet></remote_servers>");
    const auto ca = client_for(a, "fleet"), cb = client_for(b, "fleet");
    const auto run = [](const clickhouse_client& c, const std::string& sql) {
        const auto r = c.run(sql, {}, 1 << 20, !sql.starts_with("CREATE DATABASE"));
        INFO(sql << ": " << (r ? std::string("ok") : r.error().message));
        REQUIRE(r.has_value());
    };
    for (const auto* c : {&ca, &cb})
        for (const auto& sql : fleet_shard_schema("fleet"))
            run(*c, sql);
    const auto until = std::chrono::steady_clock::now() + 30s;
    while (query(ca, "SELECT count() FROM system.clusters WHERE cluster = 'fleet'")[0][0] != "2") {
        REQUIRE(std::chrono::steady_clock::now() < until);
        std::this_thread::sleep_for(200ms);
    }
    for (const auto& sql : fleet_distributed_schema("fleet", "fleet"))
        run(ca, sql);

    test_support::temp_dir dir;
    auto demo = test_support::start_demo(30);
    test_support::collector_proc coll(dir.path,
                                      {"--clickhouse", a.url(), "--clickhouse-database", "fleet"});
    auto agent =
        test_support::start_agent(test_support::agent_flavour::cpp,
                                  {"--server", "127.0.0.1:" + std::to_string(coll.agent_port),
                                   "--pid", std::to_string(demo->pid()), "--duration", "1"});
    test_support::wait_for(coll, "/api/sessions", 30s, [](const json::value& v) {
        return v.as_array().size() == 1 &&
               v.as_array()[0].at("samples").to_number<std::uint64_t>() >= 300;
    });
    agent->signal(SIGTERM);
    REQUIRE(agent->wait(20s));
    const auto sessions =
        test_support::wait_for(coll, "/api/sessions", 30s, [](const json::value& v) {
            return !v.as_array()[0].at("live").as_bool();
        });
    const std::string id(sessions.as_array()[0].at("id").as_string());
    const auto samples = sessions.as_array()[0].at("samples").to_number<std::uint64_t>();
    test_support::wait_for(coll, "/api/status", 60s, [&](const json::value& v) {
        const auto& f = v.at("fleet");
        return f.at("written_samples").to_number<std::uint64_t>() == samples &&
               f.at("backlog").at("sessions").to_number<std::uint64_t>() == 0;
    });
    // Spread over both shards, each sample once.
    const auto on_a = std::stoull(query(ca, "SELECT count() FROM samples_local")[0][0]);
    const auto on_b = std::stoull(query(cb, "SELECT count() FROM samples_local")[0][0]);
    CHECK(on_a > 0);
    CHECK(on_b > 0);
    CHECK(on_a + on_b == samples);
    // The Fleet API over the Distributed tables: the session's own flame graph and functions.
    const auto session_flame = coll.get("/api/sessions/" + id + "/flamegraph?weight=samples");
    const auto fleet_flame = coll.get("/api/fleet/flamegraph?group=none");
    CHECK(fleet_flame.at("total").to_number<std::uint64_t>() == samples);
    CHECK(tree_text(fleet_flame.at("root")) == tree_text(session_flame.at("root")));
    // By process across the shards (the process named from a join over both): the demo's.
    const auto by_process = coll.get("/api/fleet/flamegraph");
    REQUIRE(by_process.at("root").at("children").as_array().size() == 1);
    CHECK(by_process.at("root").at("children").as_array()[0].at("name") == "perfwire-demo");
    CHECK(below(by_process.at("root").at("children").as_array()[0]) ==
          below(session_flame.at("root")));
    const auto build = query(ca, "SELECT any(build_id) FROM frames WHERE module LIKE "
                                 "'%perfwire-demo' AND build_id != ''");
    REQUIRE_FALSE(build[0][0].empty());
    const auto through = coll.get("/api/fleet/functions?limit=5&build=" + build[0][0] +
                                  "&function=(anonymous%20namespace)::matrix_multiply");
    const auto model = coll.get("/api/sessions/" + id + "/functions?weight=samples&limit=100");
    for (const auto& f : model.at("functions").as_array())
        if (f.at("name") == "(anonymous namespace)::matrix_multiply")
            CHECK(through.at("samples").to_number<std::uint64_t>() ==
                  f.at("total").to_number<std::uint64_t>());
}
