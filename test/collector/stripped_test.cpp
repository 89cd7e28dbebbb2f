// Stripped on the device, named at the collector: the demo (built with -g) and its stripped
// copy run side by side, each profiled live by the real agent with real perf. The collector
// names the stripped run's frames from the unstripped binary, from a build-id debug dir made
// with objcopy --only-keep-debug, and (after a restart, replaying the saved session) from a
// local debuginfod server; a debug file of another build is refused. Each time the stripped
// run's function table and source heat must match the unstripped run's.
#include "collector/model/views.hpp"
#include "collector/store/import.hpp"
#include "collector/symbols/subprocess.hpp"
#include "collector/symbols/symbolizer.hpp"
#include "protocol/build_id.hpp"
#include "protocol/frame.hpp"
#include "protocol/messages.hpp"
#include "support/agents.hpp"
#include "support/collector_proc.hpp"
#include "support/fixtures.hpp"
#include "support/http_client.hpp"
#include "support/poll_json.hpp"

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/json.hpp>
#include <catch2/catch.hpp>

#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>

using namespace std::chrono_literals;
using test_support::collector_proc;
using test_support::spawned;
using test_support::temp_dir;
namespace fs = std::filesystem;
namespace json = boost::json;

namespace {

// Self share per function of one module, in percent, and the share no symbol named.
struct shares {
    std::map<std::string, double> self;
    double unknown = 0;
    std::uint64_t samples = 0;
    double of(const std::string& fn) const {
        const auto it = self.find(fn);
        return it == self.end() ? 0 : it->second;
    }
};

shares shares_of(const json::value& functions, const std::string& module) {
    shares out;
    out.samples = functions.at("samples").to_number<std::uint64_t>();
    for (const auto& f : functions.at("functions").as_array()) {
        if (f.at("module").as_string() != module)
            continue;
        const std::string name(f.at("name").as_string());
        const double pct = f.at("self_pct").to_number<double>();
        if (name == "[unknown]")
            out.unknown += pct;
        else
            out.self[name] += pct;
    }
    return out;
}

// The live session of the agent profiling `pid`, once it holds enough samples.
std::string session_of(collector_proc& c, int pid) {
    std::string id;
    const auto enough = [&](const json::value& targets) {
        for (const auto& t : targets.as_array())
            if (t.at("pid").is_int64() && t.at("pid").as_int64() == pid)
                id = std::string(t.at("session_id").as_string());
        if (id.empty())
            return false;
        const auto r = test_support::http_call(c.http_port, "GET", "/api/sessions/" + id);
        return r.status == 200 &&
               json::parse(r.body).at("samples").to_number<std::uint64_t>() > 400;
    };
    test_support::poll_json(c.http_port, "/api/targets", 30s, enough);
    return id;
}

std::string url_encoded(const std::string& s) {
    std::string out;
    for (const unsigned char ch : s) {
        if (std::isalnum(ch) || ch == '_' || ch == ':') {
            out.push_back(static_cast<char>(ch));
        } else {
            char buf[4];
            std::snprintf(buf, sizeof buf, "%%%02X", ch);
            out += buf;
        }
    }
    return out;
}

// Where a function is hottest in a session's source view (0 when none was placed).
std::uint32_t hottest_line(collector_proc& c, const std::string& session, const std::string& fn) {
    const auto r = test_support::http_call(
        c.http_port, "GET", "/api/sessions/" + session + "/source?function=" + url_encoded(fn));
    if (r.status != 200)
        return 0;
    const auto v = json::parse(r.body);
    return v.at("focus_line").to_number<std::uint32_t>();
}

// A loopback port nothing listens on now.
std::uint16_t free_port() {
    boost::asio::io_context io;
    boost::asio::ip::tcp::acceptor a(io, {boost::asio::ip::make_address("127.0.0.1"), 0});
    return a.local_endpoint().port();
}

void put_config(collector_proc& c, const std::string& body) {
    const auto r = test_support::http_call(c.http_port, "PUT", "/api/config", body);
    INFO(r.body);
    REQUIRE(r.status == 200);
}

// The demo as a device runs it, stripped (ROOT/device/perfwire-demo), and its debug file as a
// distribution ships it, in the build-id layout under ROOT/debug (ROOT/home: a HOME for perf's
// build-id cache, empty).
struct stripped_demo {
    std::string device, build_id, debug_file;
    fs::path debug_dir;
    // Where a debug file of this build sits under `root` (its folder made).
    std::string debug_path(const fs::path& root) const {
        fs::create_directories(root / ".build-id" / build_id.substr(0, 2));
        return (root / ".build-id" / build_id.substr(0, 2) / (build_id.substr(2) + ".debug"))
            .string();
    }
};

stripped_demo strip_demo(const fs::path& root) {
    const std::string demo = PERFWIRE_DEMO_BIN;
    stripped_demo d;
    d.build_id = protocol::read_build_id(demo).value_or("");
    REQUIRE(d.build_id.size() >= 8);
    fs::create_directories(root / "device");
    fs::create_directories(root / "home");
    d.device = (root / "device" / "perfwire-demo").string();
    REQUIRE(collector::run_capture({"strip", "--strip-all", "-o", d.device, demo}).code == 0);
    d.debug_dir = root / "debug";
    d.debug_file = d.debug_path(d.debug_dir);
    REQUIRE(collector::run_capture({"objcopy", "--only-keep-debug", demo, d.debug_file}).code == 0);
    REQUIRE(protocol::read_build_id(d.debug_file) == d.build_id);
    return d;
}

} // namespace

TEST_CASE("stripped on the device, named at the collector: the unstripped binary, a build-id "
          "debug dir, debuginfod after a restart — another build refused",
          "[collector][integration][perf][symbols][long]") {
    temp_dir dir;
    const std::string demo = PERFWIRE_DEMO_BIN;
    // The device's binary, stripped; the debug files as a distribution ships them, in the
    // build-id layout; and a debug file of another build (its build-id changed) in its place.
    const auto stripped_build = strip_demo(dir.path);
    const auto id = std::optional<std::string>(stripped_build.build_id);
    const std::string& device = stripped_build.device;
    const std::string& debug_file = stripped_build.debug_file;
    const std::string wrong_file = stripped_build.debug_path(dir.path / "wrong");
    {
        std::string image = test_support::file_bytes(debug_file);
        std::string raw;
        for (std::size_t i = 0; i < id->size(); i += 2)
            raw.push_back(static_cast<char>(std::stoi(id->substr(i, 2), nullptr, 16)));
        const auto at = image.find(raw);
        REQUIRE(at != std::string::npos);
        image[at] = static_cast<char>(image[at] ^ 0x5a);
        std::ofstream(wrong_file, std::ios::binary) << image;
        REQUIRE(protocol::read_build_id(wrong_file) != id);
    }
    // perf's build-id cache of this machine may hold the demo: the collector gets a HOME of
    // its own, and no default debug dir, so only what the test gives can name frames.
    const std::vector<std::string> env{"HOME=" + (dir.path / "home").string(), "DEBUGINFOD_URLS="};
    const std::vector<std::string> args{"--browse-root", "/", "--debug-dir",
                                        (dir.path / "home").string()};

    std::map<std::string, double> baseline;
    std::string stripped_session;
    {
        collector_proc coll(dir.path / "sessions", args, env);
        INFO(coll.proc->stderr_text());
        auto plain = std::make_unique<spawned>(demo, std::vector<std::string>{"40"});
        auto stripped = std::make_unique<spawned>(device, std::vector<std::string>{"40"});
        // Each agent with a HOME of its own: perf keeps binaries by build-id in ~/.debug, and
        // the stripped run's perf would find the unstripped demo there (the same build).
        std::vector<std::unique_ptr<spawned>> agents;
        for (const int pid : {plain->pid(), stripped->pid()}) {
            const auto home = dir.path / ("agent-home-" + std::to_string(pid));
            fs::create_directories(home);
            agents.push_back(test_support::start_agent(
                test_support::agent_flavour::cpp,
                {"--server", "127.0.0.1:" + std::to_string(coll.agent_port), "--pid",
                 std::to_string(pid), "--duration", "1"},
                {"HOME=" + home.string()}));
        }
        const std::string plain_session = session_of(coll, plain->pid());
        stripped_session = session_of(coll, stripped->pid());
        REQUIRE_FALSE(plain_session.empty());
        REQUIRE_FALSE(stripped_session.empty());
        const auto functions = [&](const std::string& s) {
            return "/api/sessions/" + s + "/functions?limit=500";
        };

        // Nothing to name them with: the stripped run is mostly one "[unknown]" row, and the
        // binaries listing says what to do.
        auto before = shares_of(coll.get(functions(stripped_session)), device);
        CHECK(before.unknown > 50);
        const auto listing = coll.get("/api/sessions/" + stripped_session + "/source");
        CHECK(json::serialize(listing.at("warnings")).find("--debug-dir") != std::string::npos);

        // A debug file of another build: refused, said so, nothing named from it.
        put_config(coll, R"({"debug_dirs": [")" + (dir.path / "wrong").string() + R"("]})");
        const auto refused = test_support::poll_json(
            coll.http_port, "/api/sessions/" + stripped_session + "/source", 10s,
            [](const json::value& v) {
                return json::serialize(v.at("binaries")).find("another build") != std::string::npos;
            });
        CHECK(json::serialize(refused.at("binaries")).find("another build") != std::string::npos);
        CHECK(shares_of(coll.get(functions(stripped_session)), device).unknown > 50);

        // The build-id debug dir: the live session is named again, without a restart.
        put_config(coll, R"({"debug_dirs": [")" + (dir.path / "debug").string() + R"("]})");
        const auto named = test_support::poll_json(
            coll.http_port, functions(stripped_session), 15s,
            [&](const json::value& v) { return shares_of(v, device).unknown < 2; });
        const auto after = shares_of(named, device);
        // Named where it is: its nameless frames kept their addresses (no replay from disk).
        CHECK(coll.proc
                  ->wait_for_stderr("session " + stripped_session + ": frames named in place", 5s)
                  .has_value());
        const auto reference = shares_of(coll.get(functions(plain_session)), demo);
        INFO("named from the debug dir: [unknown] " << after.unknown << " %");
        CHECK(after.unknown < 2);
        for (const auto& [fn, pct] : reference.self) {
            if (pct < 5)
                continue;
            INFO(fn << ": " << pct << " % unstripped, " << after.of(fn) << " % stripped");
            CHECK(std::abs(after.of(fn) - pct) < 8);
            baseline[fn] = pct;
        }
        CHECK(baseline.size() >= 3);
        const std::string matrix = "(anonymous namespace)::matrix_multiply";
        const auto hot = hottest_line(coll, plain_session, matrix);
        CHECK(hot > 0);
        CHECK(std::abs(int(hottest_line(coll, stripped_session, matrix)) - int(hot)) <= 1);
        const auto source = coll.get("/api/sessions/" + stripped_session + "/source");
        CHECK(json::serialize(source.at("binaries")).find("\"origin\":\"debug dir\"") !=
              std::string::npos);

        // The unstripped binary, matched by its build-id (its file name is another's).
        put_config(coll, R"({"debug_dirs": [], "binaries": [")" + demo + R"("]})");
        const auto by_binary = test_support::poll_json(
            coll.http_port, "/api/sessions/" + stripped_session + "/source", 15s,
            [](const json::value& v) {
                return json::serialize(v.at("binaries")).find("\"origin\":\"--binary\"") !=
                       std::string::npos;
            });
        CHECK(json::serialize(by_binary.at("binaries")).find("\"origin\":\"--binary\"") !=
              std::string::npos);
        const auto from_binary = shares_of(coll.get(functions(stripped_session)), device);
        CHECK(from_binary.unknown < 2);
        for (const auto& [fn, pct] : baseline)
            CHECK(std::abs(from_binary.of(fn) - pct) < 8);
        agents.clear();
    }

    // After a restart, with only a debuginfod server that has the debug file: the saved
    // session replays, asks, and is named once the answer is here.
    const auto port = free_port();
    spawned server("/usr/bin/debuginfod",
                   {"-p", std::to_string(port), "-F", (dir.path / "debug").string(), "-d",
                    (dir.path / "debuginfod.sqlite").string()});
    const std::string url = "http://127.0.0.1:" + std::to_string(port);
    // Indexed once it serves the file.
    bool served = false;
    for (int i = 0; i < 80 && !served; ++i) {
        served =
            test_support::http_call(port, "GET", "/buildid/" + *id + "/debuginfo").status == 200;
        if (!served)
            std::this_thread::sleep_for(250ms);
    }
    REQUIRE(served);
    collector_proc coll(dir.path / "sessions", args,
                        {"HOME=" + (dir.path / "home").string(), "DEBUGINFOD_URLS=" + url,
                         "DEBUGINFOD_CACHE_PATH=" + (dir.path / "cache").string()});
    INFO(coll.proc->stderr_text());
    const auto target = "/api/sessions/" + stripped_session + "/functions?limit=500";
    const auto replayed = test_support::poll_json(
        coll.http_port, target, 20s, [&](auto& v) { return shares_of(v, device).unknown < 2; });
    const auto named = shares_of(replayed, device);
    CHECK(named.unknown < 2);
    for (const auto& [fn, pct] : baseline)
        CHECK(std::abs(named.of(fn) - pct) < 8);
    const auto source = coll.get("/api/sessions/" + stripped_session + "/source");
    CHECK(json::serialize(source.at("binaries")).find("\"origin\":\"debuginfod\"") !=
          std::string::npos);
}

TEST_CASE("a stripped program recorded headless carries its build-ids: the import names it from "
          "the debug file as the live session would",
          "[collector][integration][perf][symbols]") {
    const auto flavour = test_support::each_agent();
    INFO(flavour);
    temp_dir dir;
    const auto stripped_build = strip_demo(dir.path);
    const std::string& device = stripped_build.device;
    const auto id = std::optional<std::string>(stripped_build.build_id);
    const auto& debug_dir = stripped_build.debug_dir;

    // perf keeps binaries by build-id in ~/.debug: the agent gets a HOME of its own.
    spawned program(device, {"30"});
    const auto out = (dir.path / "out.txt").string();
    auto agent = test_support::start_agent(flavour,
                                           {"--output", out, "--pid", std::to_string(program.pid()),
                                            "--rounds", "1", "--duration", "2"},
                                           {"HOME=" + (dir.path / "home").string()});
    const auto code = agent->wait(60s);
    INFO(agent->stderr_text());
    REQUIRE(code == 0);
    const std::string text = test_support::file_bytes(out);
    // The program's files and their build-ids, as the live link's binaries metrics say them.
    const auto note = text.find(protocol::metrics_note);
    REQUIRE(note == 0);
    const auto record = text.substr(note + protocol::metrics_note.size(),
                                    text.find('\n') - protocol::metrics_note.size());
    const auto metrics = protocol::parse_metrics(record);
    REQUIRE(metrics.has_value());
    const auto* binaries = std::get_if<protocol::binaries_metrics>(&*metrics);
    REQUIRE(binaries);
    bool listed = false;
    for (const auto& b : binaries->binaries)
        listed = listed || (b.path == device && b.build_id == *id);
    CHECK(listed);

    const auto imported_shares = [&](const std::string& path) {
        collector::symbol_config cfg;
        cfg.debug_dirs = {debug_dir.string()};
        cfg.build_id_cache = "/nonexistent";
        collector::symbolizer names(cfg);
        collector::session_store store(dir.path /
                                       ("sessions-" + fs::path(path).filename().string()));
        auto imported = collector::import_file(store, path, "out.txt", "perf", {}, &names);
        REQUIRE(imported.has_value());
        const auto& p = imported->model->prof;
        const auto f = collector::functions(p, {});
        shares found;
        std::uint64_t total = 0;
        for (const auto& row : f.rows)
            if (p.module(row.frame) == device) {
                total += row.self;
                if (p.symbol(row.frame) == "[unknown]")
                    found.unknown += static_cast<double>(row.self);
                else
                    found.self[std::string(p.symbol(row.frame))] += static_cast<double>(row.self);
            }
        REQUIRE(total > 20); // the program's own samples
        found.unknown = 100 * found.unknown / static_cast<double>(total);
        return found;
    };
    // Named from the debug file the build-id finds, as the live session is.
    const auto named = imported_shares(out);
    INFO("unknown with the build-ids: " << named.unknown << " %");
    CHECK(named.unknown < 10);
    CHECK(named.of("hash_strings") + named.of("(anonymous namespace)::hash_strings") > 0);
    // The same text without them: nothing finds the debug file.
    std::string bare;
    std::istringstream lines(text);
    for (std::string l; std::getline(lines, l);)
        if (l.rfind(protocol::metrics_note, 0) != 0)
            bare += l + "\n";
    const auto bare_file = (dir.path / "bare.txt").string();
    std::ofstream(bare_file, std::ios::binary) << bare;
    const auto unnamed = imported_shares(bare_file);
    INFO("unknown without them: " << unnamed.unknown << " %");
    CHECK(unnamed.unknown > 50);
}

TEST_CASE("two static work() in two files, profiled live: each its own function and source "
          "file, on the device's unstripped binary and on a stripped copy",
          "[collector][integration][perf][symbols][long]") {
    temp_dir dir;
    const std::string bin = PERFWIRE_STATICS_BIN;
    fs::create_directories(dir.path / "device");
    fs::create_directories(dir.path / "home");
    const std::string device = (dir.path / "device" / "perfwire-statics").string();
    REQUIRE(collector::run_capture({"strip", "--strip-all", "-o", device, bin}).code == 0);
    collector_proc coll(dir.path / "sessions",
                        {"--binary", bin, "--debug-dir", (dir.path / "home").string()},
                        {"HOME=" + (dir.path / "home").string(), "DEBUGINFOD_URLS="});
    INFO(coll.proc->stderr_text());
    spawned plain(bin, {"40"});
    spawned stripped(device, {"40"});
    std::vector<std::unique_ptr<spawned>> agents;
    for (const int pid : {plain.pid(), stripped.pid()}) {
        const auto home = dir.path / ("agent-home-" + std::to_string(pid));
        fs::create_directories(home);
        agents.push_back(
            test_support::start_agent(test_support::agent_flavour::cpp,
                                      {"--server", "127.0.0.1:" + std::to_string(coll.agent_port),
                                       "--pid", std::to_string(pid), "--duration", "1"},
                                      {"HOME=" + home.string()}));
    }
    const std::string source =
        test_support::file_bytes(std::string(PERFWIRE_TEST_DIR) + "/workloads/statics_b.cpp");
    std::uint32_t cheap_loop = 0, n = 0;
    std::istringstream lines(source);
    for (std::string l; std::getline(lines, l) && !cheap_loop;)
        if (++n, l.find("// statics_b: the cheap loop") != std::string::npos)
            cheap_loop = n;
    REQUIRE(cheap_loop > 0);
    const std::string a = "work (statics_a.cpp)", b = "work (statics_b.cpp)";
    for (const auto& [pid, module] :
         {std::pair{plain.pid(), bin}, std::pair{stripped.pid(), device}}) {
        INFO(module);
        const auto session = session_of(coll, pid);
        REQUIRE_FALSE(session.empty());
        const auto named =
            shares_of(test_support::poll_json(
                          coll.http_port, "/api/sessions/" + session + "/functions?limit=500", 15s,
                          [&](const json::value& v) {
                              const auto s = shares_of(v, module);
                              return s.of(a) > 0 && s.of(b) > 0;
                          }),
                      module);
        INFO(a << ": " << named.of(a) << " %, " << b << ": " << named.of(b) << " %");
        CHECK(named.of("work") == 0);
        CHECK(named.unknown < 2);
        CHECK(named.of(b) > 0);
        CHECK(named.of(a) > 1.5 * named.of(b)); // three times the loop
        CHECK(std::abs(int(hottest_line(coll, session, b)) - int(cheap_loop)) <= 1);
        const auto r = test_support::http_call(coll.http_port, "GET",
                                               "/api/sessions/" + session +
                                                   "/source?function=" + url_encoded(b));
        REQUIRE(r.status == 200);
        CHECK(std::string_view(json::parse(r.body).at("file").as_string())
                  .ends_with("statics_b.cpp"));
    }
}

TEST_CASE("JIT code keeps its names: Node.js with --perf-basic-prof, the device's perf-PID.map",
          "[collector][integration][perf][symbols][long]") {
    const auto flavour = test_support::each_agent();
    INFO(flavour);
    temp_dir dir;
    const auto script = dir.path / "hot.js";
    std::ofstream(script) << "function perfwireHotLoop(n) { let s = 0;\n"
                             "  for (let i = 0; i < n; i++) s += Math.sqrt(i) * (i & 7);\n"
                             "  return s; }\n"
                             "const end = Date.now() + 120000; let t = 0;\n"
                             "while (Date.now() < end) t += perfwireHotLoop(100000);\n";
    // V8's baseline compiler only, at the first call (--always-sparkplug --no-opt): the loop's
    // machine code is made once, before the recording, and never again. (With the optimising
    // compiler V8 may make it anew at any moment — a second optimisation after on-stack
    // replacement — and perf script reads the map when it first meets the process: code made
    // later stays nameless, which a loaded machine showed as a race.)
    spawned node(PERFWIRE_NODE,
                 {"--perf-basic-prof", "--no-opt", "--always-sparkplug", script.string()});
    const std::string map = "/tmp/perf-" + std::to_string(node.pid()) + ".map";
    // Node runs until the test ends it (a probe slower than its life would find no process).
    // Recorded once its hot loop is compiled ("JS:^perfwireHotLoop": V8 marks baseline code
    // '^', the interpreter's '~', optimised '*') and the map has stopped growing for a second
    // (an agent that kept its probe records at once).
    const auto map_text = [&] {
        std::ifstream in(map);
        std::stringstream text;
        text << in.rdbuf();
        return text.str();
    };
    std::string last;
    int still = 0;
    for (int waited = 0; waited < 300 && still < 10; ++waited) {
        std::this_thread::sleep_for(100ms);
        const auto now = map_text();
        still = now == last && now.find("JS:^perfwireHotLoop") != std::string::npos ? still + 1 : 0;
        last = now;
    }
    REQUIRE(still >= 10);
    const auto out = (dir.path / "out.txt").string();
    auto agent =
        test_support::start_agent(flavour, {"--output", out, "--pid", std::to_string(node.pid()),
                                            "--rounds", "1", "--duration", "2"});
    const auto code = agent->wait(30s);
    INFO(agent->stderr_text());
    CHECK(code == 0);
    collector::session_store store(dir.path / "sessions");
    const auto imported = collector::import_file(store, out, "out.txt");
    std::error_code ec;
    fs::remove(map, ec);
    if (!imported)
        FAIL(imported.error());
    const auto& p = imported->model->prof;
    // Of the thread that runs the script (V8's compiler and GC threads aside: busy in its
    // first seconds, which an agent that kept its probe records from).
    collector::view_filter main_thread;
    main_thread.tid = static_cast<std::uint32_t>(node.pid());
    const auto f = collector::functions(p, main_thread);
    std::uint64_t js = 0; // under the loop (baseline code calls V8's builtins for its work)
    for (const auto& row : f.rows)
        if (p.symbol(row.frame).starts_with("JS:^perfwireHotLoop") && p.module(row.frame) == map)
            js = std::max(js, row.total);
    std::string top;
    for (std::size_t i = 0; i < f.rows.size() && i < 6; ++i)
        top += std::string(p.symbol(f.rows[i].frame)) + " (" +
               std::string(p.module(f.rows[i].frame)) + ") " + std::to_string(f.rows[i].self) +
               "\n";
    INFO("JavaScript named from " << map << ": " << js << " of " << f.total_weight << "\n" << top);
    // The loop is where the process spends its time: under it in about half the samples (a
    // builtin it calls that keeps no frame hides its caller from frame pointers).
    CHECK(js * 4 > f.total_weight);
}

TEST_CASE("kernel frames the device could not name are named by its kallsyms, asked once, kept "
          "with the session",
          "[collector][integration][symbols]") {
    temp_dir dir;
    std::string session;
    {
        collector_proc coll(dir.path / "sessions");
        INFO(coll.proc->stderr_text());
        auto agent = test_support::hello_agent(coll, "kernel-hidden");
        // perf on a device whose kernel hid its addresses: kernel frames unnamed.
        std::string text;
        for (int i = 0; i < 20; ++i)
            text += "app 7/7 1." + std::to_string(100 + i) +
                    ": 1000 cpu-clock:\n\tffffffff81000123 [unknown] ([kernel.kallsyms])\n"
                    "\tffffffff81001010 [unknown] ([kernel.kallsyms])\n"
                    "\t1139 main+0x10 (/usr/bin/app)\n\n";
        agent->send(protocol::frame_flag::text, text);
        // The collector asks for the device's kernel symbols; this agent sends them.
        const auto asked_of = [](test_support::framing_peer& peer, std::chrono::seconds within) {
            std::optional<protocol::command_request> got;
            const auto until = std::chrono::steady_clock::now() + within;
            while (!got && std::chrono::steady_clock::now() < until) {
                const auto f = peer.next_of(protocol::frame_flag::command, 200ms);
                if (!f)
                    continue;
                auto request = protocol::parse_command_request(f->payload);
                REQUIRE(request.has_value());
                if (request->cmd == "kallsyms")
                    got = *request;
            }
            return got;
        };
        const auto asked = asked_of(*agent, 20s);
        REQUIRE(asked);
        // Another device with hidden kernel addresses is asked only once this one answered:
        // one answer (up to 96 MiB) at a time.
        auto other = test_support::hello_agent(coll, "kernel-hidden-too");
        other->send(protocol::frame_flag::text, text);
        test_support::wait_for(coll, "/api/sessions?q=kernel-hidden-too", 10s,
                               [](const json::value& v) {
                                   return v.as_array().size() == 1 &&
                                          v.as_array()[0].at("samples").to_number<int>() > 0;
                               });
        CHECK_FALSE(asked_of(*other, 2s)); // its frames are in; the first is still answering
        json::object fields{{"count", 3},
                            {"symbols", "ffffffff81000000 fake_kernel_entry\n"
                                        "ffffffff81001000 fake_kernel_work\n"
                                        "ffffffff81002000 fake_kernel_end\n"}};
        agent->send(protocol::frame_flag::response,
                    protocol::serialize(protocol::command_response::success(asked->id, fields)));
        const auto next = asked_of(*other, 10s);
        REQUIRE(next);
        other->send(protocol::frame_flag::response,
                    protocol::serialize(protocol::command_response::success(next->id, fields)));
        auto sessions = coll.get("/api/sessions?q=kernel-hidden-too");
        REQUIRE(sessions.as_array().size() == 1);
        const std::string second(sessions.as_array()[0].at("id").as_string());
        sessions = coll.get("/api/sessions");
        REQUIRE(sessions.as_array().size() == 2);
        for (const auto& s : sessions.as_array())
            if (s.at("id").as_string() != second)
                session = std::string(s.at("id").as_string());
        CHECK(test_support::names_function(
            test_support::poll_json(coll.http_port, "/api/sessions/" + second + "/functions", 10s,
                                    [](const json::value& v) {
                                        return test_support::names_function(v, "fake_kernel_entry");
                                    }),
            "fake_kernel_entry"));
        const auto named =
            test_support::poll_json(coll.http_port, "/api/sessions/" + session + "/functions", 10s,
                                    [](const json::value& v) {
                                        return test_support::names_function(v, "fake_kernel_entry");
                                    });
        CHECK(test_support::names_function(named, "fake_kernel_entry"));
        const auto tree = coll.get("/api/sessions/" + session + "/flamegraph");
        CHECK(json::serialize(tree).find("fake_kernel_work") != std::string::npos);
        // Kept once per kernel, the session naming it.
        CHECK(fs::exists(dir.path / "sessions" / session / "kallsyms.ref"));
        CHECK(fs::is_directory(dir.path / "sessions" / ".kernels"));
    }
    // After a restart the saved session is named with what was kept.
    collector_proc again(dir.path / "sessions");
    CHECK(test_support::names_function(again.get("/api/sessions/" + session + "/functions"),
                                       "fake_kernel_entry"));
}
