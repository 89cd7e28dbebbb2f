// Both real agents -- the perfwire-agent binary and the Python agent -- profiling the real demo
// workload with real perf, against a framing peer written here on loopback. Every test case runs
// once per flavour: the collector must not be able to tell them apart.
#include "agent/perf_commands.hpp"
#include "collector/store/import.hpp"
#include "protocol/compression.hpp"
#include "support/agents.hpp"
#include "support/fixtures.hpp"
#include "support/framing_peer.hpp"
#include "support/spawn.hpp"

#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <catch2/catch.hpp>

#include <algorithm>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <thread>
#include <unistd.h>

using namespace std::chrono_literals;
namespace fs = std::filesystem;
namespace json = boost::json;
using protocol::frame_flag;
using test_support::agent_flavour;
using test_support::each_agent;
using test_support::error_of;
using test_support::framing_peer;
using test_support::listener;
using test_support::ok;
using test_support::read_hello;
using test_support::spawned;
using test_support::start_agent;
using test_support::start_demo;

namespace {

framing_peer accept_agent(listener& l, std::chrono::milliseconds timeout = 10s) {
    const int fd = l.accept(timeout);
    REQUIRE(fd >= 0);
    return framing_peer(fd);
}

// Reads frames for up to `timeout`, decompressing data, until `done` says enough.
struct received {
    std::string text;
    int chunks = 0;
    int stat_reports = 0; // chunks that end a period (or a round): perf stat's report after them
    std::set<frame_flag> data_flags; // text, zstd
    std::set<std::string> metrics;
    std::vector<protocol::state_notice> notices;
};

template <class Done>
received collect(framing_peer& peer, std::chrono::milliseconds timeout, Done done) {
    received r;
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (!done(r) && std::chrono::steady_clock::now() < deadline) {
        auto f = peer.next(500ms);
        if (!f) {
            if (peer.closed())
                break;
            continue;
        }
        if (f->flag == frame_flag::zstd || f->flag == frame_flag::text) {
            std::string text = f->payload;
            if (f->flag == frame_flag::zstd) {
                auto plain = protocol::decompress(f->payload);
                REQUIRE(plain.has_value());
                text = std::move(*plain);
            }
            r.stat_reports += text.find("### PERF_STAT ###") != std::string::npos;
            r.text += text;
            ++r.chunks;
            r.data_flags.insert(f->flag);
        } else if (f->flag == frame_flag::metrics) {
            auto m = protocol::parse_metrics(f->payload);
            REQUIRE(m.has_value());
            r.metrics.insert(std::string(protocol::metrics_type(*m)));
        } else if (f->flag == frame_flag::response) {
            auto reply = protocol::parse_agent_reply(f->payload);
            REQUIRE(reply.has_value());
            if (auto* n = std::get_if<protocol::state_notice>(&*reply))
                r.notices.push_back(*n);
        }
    }
    return r;
}

// Waits for the agent's "profiling" notice: its probe is over and perf records the target.
void wait_profiling(framing_peer& peer) {
    const auto got = collect(peer, 20s, [](const received& r) {
        return !r.notices.empty() && r.notices.back().state == "profiling";
    });
    REQUIRE_FALSE(got.notices.empty());
    REQUIRE(got.notices.back().state == "profiling");
}

// The agent's perf children once there are at least `n` (a child forked but not yet exec'd
// still has the agent's name).
std::vector<int> perf_children(int agent_pid, std::size_t n) {
    const auto deadline = std::chrono::steady_clock::now() + 10s;
    auto pids = test_support::children_of(agent_pid, "perf");
    while (pids.size() < n && std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(50ms);
        pids = test_support::children_of(agent_pid, "perf");
    }
    REQUIRE(pids.size() >= n);
    return pids;
}

bool no_perf_children(int agent_pid, std::chrono::milliseconds within) {
    const auto deadline = std::chrono::steady_clock::now() + within;
    while (!test_support::children_of(agent_pid, "perf").empty()) {
        if (std::chrono::steady_clock::now() > deadline)
            return false;
        std::this_thread::sleep_for(50ms);
    }
    return true;
}

// The executable `name` resolves to on the test's PATH.
std::string on_path(const std::string& name) {
    std::istringstream dirs(std::getenv("PATH") ? std::getenv("PATH") : "");
    for (std::string dir; std::getline(dirs, dir, ':');) {
        const auto p = std::filesystem::path(dir) / name;
        if (::access(p.c_str(), X_OK) == 0)
            return p.string();
    }
    FAIL(name << " is not on PATH");
    return {};
}

} // namespace

TEST_CASE("agent --server streams the demo's stacks and obeys the lifecycle commands",
          "[agent][integration][perf]") {
    const auto flavour = each_agent();
    INFO(flavour);
    listener l;
    auto demo = start_demo(120);
    auto agent = start_agent(flavour, {"--server", "127.0.0.1:" + std::to_string(l.port()), "--pid",
                                       std::to_string(demo->pid()), "--duration", "1"});
    auto peer = accept_agent(l);

    const auto hello = read_hello(peer);
    CHECK(hello.agent == "perfwire");
    CHECK(hello.version == 1);
    CHECK(hello.auth == "none");
    REQUIRE(hello.platform);
    CHECK(hello.platform->arch == "x86_64");
    CHECK_FALSE(hello.platform->kernel.value_or("").empty());
    CHECK(hello.platform->perf_event_paranoid.has_value());
    CHECK_THAT(hello.platform->perf_version.value_or(""), Catch::StartsWith("perf version"));

    // --pid on the command line: profiling starts without a command.
    auto got = collect(peer, 20s, [](const received& r) {
        return r.stat_reports >= 2 && r.text.find("matrix_multiply") != std::string::npos &&
               r.text.find("hash_strings") != std::string::npos && r.metrics.count("process");
    });
    INFO(agent->stderr_text());
    CHECK(got.stat_reports >= 2);
    CHECK(got.data_flags == std::set<frame_flag>{frame_flag::zstd});
    CHECK_THAT(got.text, Catch::Contains("matrix_multiply"));
    CHECK_THAT(got.text, Catch::Contains("hash_strings"));
    CHECK_THAT(got.text, Catch::Contains("recursive_fib"));
    CHECK_THAT(got.text, Catch::Contains("### PERF_STAT ###"));
    CHECK_THAT(got.text, Catch::Contains("task-clock"));
    CHECK(got.metrics.count("system"));
    CHECK(got.metrics.count("network"));
    // Stacks, not just leaf frames: a frame line of the worker under the hot function.
    CHECK_THAT(got.text, Catch::Contains("matrix_worker"));

    auto status = peer.command("status");
    REQUIRE(ok(status));
    CHECK(status->fields.at("state").as_string() == "profiling");
    CHECK(status->fields.at("pid").as_int64() == demo->pid());
    const auto& caps = status->fields.at("capabilities").as_object();
    CHECK(caps.at("callgraph_method").as_string() == "fp");
    const std::string event(caps.at("record_events").as_array().at(0).as_string());
    CHECK((event == "cpu-clock" || event == "cycles"));
    CHECK_THAT(got.text, Catch::Contains(" " + event + ":"));
    // How long the probe took is said (bench/agent_overhead measures it: a test on a loaded
    // machine cannot).
    CHECK(caps.at("probe_seconds").as_double() > 0.0);

    // Each answer says the state it leaves the agent in.
    auto state_after = [&](const std::string& cmd) {
        auto r = peer.command(cmd);
        REQUIRE(ok(r));
        return std::string(r->fields.at("state").as_string());
    };
    CHECK(state_after("pause") == "paused");
    CHECK(no_perf_children(agent->pid(), 3s));
    CHECK(peer.command("status")->fields.at("state").as_string() == "paused");
    CHECK(error_of(peer.command("pause")) == "not profiling");
    CHECK(state_after("resume") == "profiling");
    CHECK(error_of(peer.command("resume")) == "not paused");
    CHECK(error_of(peer.command("start")) == "already profiling");
    auto conf = peer.command("configure", R"({"frequency":199})");
    REQUIRE(ok(conf));
    CHECK(conf->fields.at("frequency").as_int64() == 199);
    CHECK(state_after("stop") == "idle");
    CHECK(no_perf_children(agent->pid(), 3s));
    CHECK(error_of(peer.command("stop")) == "not profiling");

    // The call-graph mode: one the probe saw give stacks, kept for later starts.
    std::vector<std::string> modes;
    for (const auto& m : caps.at("callgraph_modes").as_array())
        modes.emplace_back(m.as_string());
    CHECK(modes.at(0) == "fp");
    CHECK(std::find(modes.begin(), modes.end(), "dwarf") != modes.end());
    CHECK_THAT(error_of(peer.command("start", R"({"callgraph":"bogus"})")),
               Catch::StartsWith("callgraph must be one this device records: none, fp, dwarf"));
    CHECK(peer.command("status")->fields.at("state").as_string() == "idle"); // refused: no run
    auto perf_args = [&] { // perf record's arguments, once it runs
        const auto deadline = std::chrono::steady_clock::now() + 10s;
        do {
            for (const int pid : test_support::children_of(agent->pid(), "perf")) {
                std::string args = test_support::proc_file(pid, "cmdline");
                std::replace(args.begin(), args.end(), '\0', ' ');
                if (args.find(" record ") != std::string::npos)
                    return args;
            }
            std::this_thread::sleep_for(50ms);
        } while (std::chrono::steady_clock::now() < deadline);
        FAIL("no perf record under the agent");
        return std::string();
    };
    auto dwarf = peer.command("start", R"({"callgraph":"dwarf"})");
    REQUIRE(ok(dwarf));
    CHECK(dwarf->fields.at("callgraph").as_string() == "dwarf");
    CHECK_THAT(perf_args(), Catch::Contains("--call-graph=dwarf"));
    CHECK(state_after("stop") == "idle");
    CHECK(no_perf_children(agent->pid(), 3s));
    auto again = peer.command("start");
    REQUIRE(ok(again));
    CHECK(again->fields.at("callgraph").as_string() == "dwarf");
    CHECK(state_after("stop") == "idle");
    CHECK(no_perf_children(agent->pid(), 3s));
    auto flat = peer.command("start", R"({"callgraph":"none"})");
    REQUIRE(ok(flat));
    CHECK(flat->fields.at("callgraph").as_string() == "none");
    CHECK_THAT(perf_args(), !Catch::Contains("--call-graph"));
    CHECK(state_after("stop") == "idle");
    CHECK(no_perf_children(agent->pid(), 3s));

    CHECK(error_of(peer.command("bogus")) == "unknown command: bogus");
    CHECK(error_of(peer.command("verify_pid", "{}")) == "pid required");
    auto vp = peer.command("verify_pid", R"({"pid":)" + std::to_string(demo->pid()) + "}");
    REQUIRE(ok(vp));
    CHECK(vp->fields.at("exists").as_bool());
    CHECK(vp->fields.at("info").at("comm").as_string() == "perfwire-demo");
    CHECK(error_of(peer.command("start", R"({"pid":4194303})")) == "no such process: 4194303");

    auto procs = peer.command("list_processes");
    REQUIRE(ok(procs));
    const auto& list = procs->fields.at("processes").as_array();
    REQUIRE_FALSE(list.empty());
    CHECK(list.at(0).at("cpu").as_double() >= list.at(list.size() - 1).at("cpu").as_double());
    bool demo_listed = false;
    for (const auto& p : list)
        demo_listed |= p.at("pid").as_int64() == demo->pid();
    CHECK(demo_listed); // the busiest process on the machine

    auto perf = peer.command("verify_perf");
    REQUIRE(ok(perf));
    CHECK(perf->fields.at("available").as_bool());
    CHECK(perf->fields.at("functional").as_bool());
}

TEST_CASE("agent with a pairing code refuses all but auth and locks out after 3 failures",
          "[agent][integration]") {
    const auto flavour = each_agent();
    INFO(flavour);
    listener l;
    auto agent = start_agent(flavour, {"--server", "127.0.0.1:" + std::to_string(l.port()),
                                       "--token", "0123456789abcdef0123456789abcdef"});
    {
        auto peer = accept_agent(l);
        CHECK(read_hello(peer).auth == "token");
        CHECK(error_of(peer.command("ping")) == "unauthenticated");
        CHECK(error_of(peer.command("status")) == "unauthenticated");
        CHECK_FALSE(peer.next_of(frame_flag::metrics, 2500ms)); // nothing before auth
        CHECK(error_of(peer.command("auth", R"({"token":"wrong"})")) == "auth failed");
        CHECK(error_of(peer.command("auth", R"({})")) == "auth failed");
        CHECK(error_of(peer.command("auth", R"({"token":"0123"})")) == "auth failed");
        CHECK_FALSE(peer.next(3s));
        CHECK(peer.closed());
    }
    // The agent dials again after its backoff; the right code now opens the session.
    auto peer = accept_agent(l, 5s);
    read_hello(peer);
    CHECK(ok(peer.command("auth", R"({"token":"0123456789abcdef0123456789abcdef"})")));
    CHECK(ok(peer.command("ping")));
    CHECK(peer.next_of(frame_flag::metrics, 3s));
    const std::string log = agent->stderr_text();
    CHECK(log.find("0123456789abcdef0123456789abcdef") == std::string::npos); // never logged
}

TEST_CASE("agent --listen: pairing code, and the newest authenticated collector wins",
          "[agent][integration]") {
    const auto flavour = each_agent();
    INFO(flavour);
    auto agent = start_agent(flavour, {"--listen", "--bind", "127.0.0.1", "--port", "0"});
    const auto code = agent->wait_for_stderr("pairing code: ", 5s);
    REQUIRE(code);
    // Typeable: four groups of four from 32 unambiguous characters (80 bits).
    CHECK(std::regex_match(*code, std::regex("[2-9a-kmnp-z]{4}(-[2-9a-kmnp-z]{4}){3}")));
    const auto port = agent->wait_for_stderr("listening on 127.0.0.1:", 5s);
    REQUIRE(port);

    auto first = framing_peer::connect(static_cast<std::uint16_t>(std::stoi(*port)));
    REQUIRE(first);
    CHECK(read_hello(*first).auth == "token");
    CHECK(error_of(first->command("ping")) == "unauthenticated");
    CHECK(ok(first->command("auth", R"({"token":")" + *code + R"("})")));
    CHECK(ok(first->command("ping")));

    // A second collector without the code disturbs nothing.
    auto second = framing_peer::connect(static_cast<std::uint16_t>(std::stoi(*port)));
    REQUIRE(second);
    read_hello(*second);
    CHECK(error_of(second->command("ping")) == "unauthenticated");
    CHECK(ok(first->command("ping")));
    // With the code (typed in capitals, without the dashes) it takes over, and the first
    // connection is closed.
    std::string typed;
    for (char c : *code)
        if (c != '-')
            typed.push_back(static_cast<char>(std::toupper(static_cast<unsigned char>(c))));
    CHECK(ok(second->command("auth", R"({"token":")" + typed + R"("})")));
    CHECK_FALSE(first->next_of(frame_flag::command, 3s));
    CHECK(first->closed());
    CHECK(ok(second->command("ping")));
}

TEST_CASE("SIGTERM stops perf and the agent exits cleanly", "[agent][integration][perf]") {
    const auto flavour = each_agent();
    INFO(flavour);
    listener l;
    auto demo = start_demo(60);
    auto agent = start_agent(flavour, {"--server", "127.0.0.1:" + std::to_string(l.port()), "--pid",
                                       std::to_string(demo->pid()), "--duration", "30"});
    auto peer = accept_agent(l);
    read_hello(peer);
    // Wait for perf to be running under the agent (the probe's own perf runs do not count).
    wait_profiling(peer);
    const auto perf_pids = perf_children(agent->pid(), 3); // record, script, stat
    std::this_thread::sleep_for(1s);
    agent->signal(SIGTERM);
    // The period in progress is sent, its perf stat report with it, before the agent goes.
    auto got = collect(peer, 10s, [](const received& r) { return r.stat_reports >= 1; });
    CHECK(got.stat_reports == 1);
    const auto code = agent->wait(10s);
    REQUIRE(code);
    CHECK(*code == 0);
    for (int pid : perf_pids)
        CHECK_FALSE(test_support::process_exists(pid));
}

TEST_CASE("the target exiting returns the agent to idle and it says so",
          "[agent][integration][perf]") {
    const auto flavour = each_agent();
    INFO(flavour);
    listener l;
    // The demo outlives any probe, however slow the machine: it is ended by the test once
    // samples have arrived, so the exit is seen while profiling.
    auto demo = start_demo(120);
    auto agent = start_agent(flavour, {"--server", "127.0.0.1:" + std::to_string(l.port()), "--pid",
                                       std::to_string(demo->pid()), "--duration", "1"});
    auto peer = accept_agent(l);
    read_hello(peer);
    auto got = collect(peer, 30s, [](const received& r) { return r.chunks >= 1; });
    REQUIRE(got.chunks >= 1);
    demo->signal(SIGTERM);
    const auto rest = collect(peer, 20s, [](const received& r) {
        return !r.notices.empty() && r.notices.back().state == "idle";
    });
    got.notices.insert(got.notices.end(), rest.notices.begin(), rest.notices.end());
    got.chunks += rest.chunks;
    REQUIRE(got.notices.size() == 2);
    // Started from --pid, so the agent announced it, then the exit.
    CHECK(got.notices[0].state == "profiling");
    CHECK(got.notices[0].pid == demo->pid());
    CHECK(got.notices[1].state == "idle");
    CHECK(got.notices[1].reason == "target process exited");
    CHECK(got.chunks >= 1); // what was recorded before the exit still arrived
    CHECK(peer.command("status")->fields.at("state").as_string() == "idle");
    CHECK(no_perf_children(agent->pid(), 3s));
}

TEST_CASE("agent --server retries with growing backoff and resets after a session",
          "[agent][integration]") {
    const auto flavour = each_agent();
    INFO(flavour);
    std::uint16_t port = 0;
    {
        listener probe_port;
        port = probe_port.port(); // now closed: connections are refused
    }
    auto agent = start_agent(flavour, {"--server", "127.0.0.1:" + std::to_string(port)});
    auto delays = [&] {
        std::vector<double> out;
        const std::string log = agent->stderr_text();
        const std::regex re("retrying in ([0-9.]+) s");
        for (auto it = std::sregex_iterator(log.begin(), log.end(), re);
             it != std::sregex_iterator(); ++it)
            out.push_back(std::stod((*it)[1]));
        return out;
    };
    const auto deadline = std::chrono::steady_clock::now() + 8s;
    while (delays().size() < 3 && std::chrono::steady_clock::now() < deadline)
        std::this_thread::sleep_for(100ms);
    auto d = delays();
    REQUIRE(d.size() >= 3);
    CHECK(d[0] >= 0.8);
    CHECK(d[0] <= 1.0);
    CHECK(d[1] >= 1.6);
    CHECK(d[1] <= 2.0);
    CHECK(d[2] >= 3.2);
    CHECK(d[2] <= 4.0);

    listener l(port);
    {
        auto peer = accept_agent(l, 6s);
        read_hello(peer);
        CHECK(ok(peer.command("ping")));
    } // the collector hangs up after an authenticated session
    const auto after = std::chrono::steady_clock::now() + 5s;
    while (delays().size() < d.size() + 1 && std::chrono::steady_clock::now() < after)
        std::this_thread::sleep_for(100ms);
    const auto d2 = delays();
    REQUIRE(d2.size() > d.size());
    CHECK(d2.back() <= 1.0); // back to the first step
}

TEST_CASE("agent --output writes the rounds asked for, and the collector imports every sample",
          "[agent][integration][perf]") {
    const auto flavour = each_agent();
    INFO(flavour);
    auto demo = start_demo(30);
    test_support::temp_dir dir;
    const auto path = (dir.path / "out.txt").string();
    auto agent = start_agent(flavour, {"--output", path, "--pid", std::to_string(demo->pid()),
                                       "--rounds", "2", "--duration", "1"});
    const auto code = agent->wait(20s);
    INFO(agent->stderr_text());
    REQUIRE(code);
    CHECK(*code == 0);
    std::ifstream in(path);
    std::stringstream ss;
    ss << in.rdbuf();
    const std::string text = ss.str();
    CHECK_THAT(text, Catch::Contains("matrix_multiply"));
    // Two rounds: each chunk is that span's samples, then its perf stat report. (The first
    // may hold no sample: perf record starts more slowly than perf stat.) Nothing follows the
    // second report: the last round ends with perf's drain, not with a partial third round.
    const std::string marker(protocol::perf_stat_marker);
    std::vector<std::size_t> at;
    for (auto p = text.find(marker); p != std::string::npos; p = text.find(marker, p + 1))
        at.push_back(p);
    CHECK(at.size() == 2);
    std::size_t samples = 0, after_last = 0;
    std::istringstream lines(text);
    std::size_t offset = 0;
    for (std::string line; std::getline(lines, line); offset += line.size() + 1)
        if (!line.empty() && line[0] != ' ' && line[0] != '\t' && line[0] != '#') {
            ++samples; // a sample's header line: "comm pid/tid time: period event:"
            after_last += !at.empty() && offset > at.back();
        }
    CHECK(samples > 0);
    CHECK(after_last == 0);

    // The collector's import takes the agent's own file whole.
    collector::session_store store(dir.path / "sessions");
    const auto imported = collector::import_file(store, path, "out.txt");
    if (!imported)
        FAIL(imported.error());
    CHECK(imported->model->prof.sample_count() == samples);

    auto bad = start_agent(
        flavour, {"--output", "/nonexistent/dir/x.txt", "--pid", std::to_string(demo->pid())});
    CHECK(bad->wait(10s) == 1);

    // A process that is not there, a perf that is not there: said at once, exit 1, no file.
    const auto nothing = (dir.path / "nothing.txt").string();
    int gone = 4194303; // the largest pid Linux hands out, then down to one not in use
    while (fs::exists("/proc/" + std::to_string(gone)))
        --gone;
    auto no_pid = start_agent(flavour, {"--output", nothing, "--pid", std::to_string(gone)});
    CHECK(no_pid->wait(10s) == 1);
    CHECK_THAT(no_pid->stderr_text(), Catch::Contains("no such process " + std::to_string(gone)));
    auto no_perf = start_agent(flavour, {"--output", nothing, "--pid", std::to_string(demo->pid()),
                                         "--perf", "/nonexistent"});
    CHECK(no_perf->wait(10s) == 1);
    CHECK_THAT(no_perf->stderr_text(), Catch::Contains("perf not found: /nonexistent"));
    CHECK_FALSE(fs::exists(nothing));
}

TEST_CASE("what the probe found is kept for the next start with the same perf, which records at "
          "once — another perf is probed, and a damaged file is ignored",
          "[agent][integration][perf]") {
    const auto flavour = each_agent();
    INFO(flavour);
    auto demo = start_demo(60);
    test_support::temp_dir dir;
    const auto state = (dir.path / "state").string();
    const auto kept =
        dir.path / "state" / (flavour == agent_flavour::cpp ? "probe.json" : "python-probe.json");
    const auto run = [&](const std::vector<std::string>& more, const std::string& keep_in) {
        std::vector<std::string> args{"--output",    (dir.path / "out.txt").string(),
                                      "--pid",       std::to_string(demo->pid()),
                                      "--duration",  "1",
                                      "--state-dir", keep_in};
        args.insert(args.end(), more.begin(), more.end());
        auto agent = start_agent(flavour, args);
        const auto code = agent->wait(60s);
        INFO(agent->stderr_text());
        CHECK(code == 0);
        std::ifstream in(dir.path / "out.txt");
        std::stringstream text;
        text << in.rdbuf();
        CHECK_THAT(text.str(), Catch::Contains("matrix_multiply"));
        return agent->stderr_text();
    };
    const std::string earlier = "perf as found at an earlier start";
    // The first start probes, and keeps what it found (the target ran: it holds for any).
    const auto first = run({}, state);
    CHECK_THAT(first, !Catch::Contains(earlier));
    REQUIRE(fs::exists(kept));
    CHECK((fs::status(kept).permissions() & fs::perms::others_read) == fs::perms::none);
    // The next takes it: no probe.
    const auto second = run({}, state);
    CHECK_THAT(second, Catch::Contains(earlier));
    // A file naming an event no probe of this agent tries (perf would compile a file named
    // as an event), or an unknown call-graph mode, is a stranger's: probed again.
    for (const auto& [key, value] :
         {std::pair{"record_events", json::value(json::array{"cpu-clock", "/tmp/evil.c"})},
          std::pair{"callgraph_method", json::value("--exec")}}) {
        INFO(key);
        std::ifstream in(kept);
        std::stringstream text;
        text << in.rdbuf();
        auto file = json::parse(text.str());
        file.at("capabilities").as_object()[key] = value;
        std::ofstream(kept, std::ios::trunc) << json::serialize(file);
        CHECK_THAT(run({}, state), !Catch::Contains(earlier));
    }
    // Another perf (a copy: another file) is probed.
    const auto other_perf = (dir.path / "perf").string();
    fs::copy_file("/usr/bin/perf", other_perf); // (Debian's: a script that runs this kernel's)
    fs::permissions(other_perf, fs::perms::owner_all);
    CHECK_THAT(run({"--perf", other_perf}, state), !Catch::Contains(earlier));
    // A file cut short or not JSON at all: probed again, as if there were none.
    std::ofstream(kept, std::ios::trunc) << "{\"fingerprint\": \"";
    CHECK_THAT(run({}, state), !Catch::Contains(earlier));
    // Nowhere to keep it: every start probes.
    CHECK_THAT(run({}, ""), !Catch::Contains(earlier));
}

TEST_CASE("the demo takes seconds or --help, and refuses anything else", "[agent]") {
    test_support::temp_dir dir;
    const auto out = (dir.path / "help.txt").string();
    {
        spawned help(PERFWIRE_DEMO_BIN, {"--help"}, out);
        CHECK(help.wait(5s) == 0);
    }
    std::ifstream in(out);
    std::string first;
    std::getline(in, first);
    CHECK_THAT(first, Catch::StartsWith("usage: perfwire-demo [seconds]"));
    for (const char* bad : {"--bogus", "1x", "-3"}) {
        spawned refused(PERFWIRE_DEMO_BIN, {bad});
        CHECK(refused.wait(5s) == 2);
        CHECK_THAT(refused.stderr_text(), Catch::Contains("usage: perfwire-demo"));
    }
    spawned brief(PERFWIRE_DEMO_BIN, {"0.2"});
    CHECK(brief.wait(10s) == 0);
}

TEST_CASE("rounds mode overlaps recording and leaves nothing behind",
          "[agent][integration][perf][long]") {
    const auto flavour = each_agent();
    INFO(flavour);
    listener l;
    auto demo = start_demo(60);
    auto agent = start_agent(flavour, {"--server", "127.0.0.1:" + std::to_string(l.port())});
    auto peer = accept_agent(l);
    read_hello(peer);
    // A first start probes perf: the collector's deadline for it (90 s), not a guess at how
    // long a loaded machine takes.
    auto start = peer.command(
        "start", R"({"pid":)" + std::to_string(demo->pid()) + R"(,"duration":1,"mode":"rounds"})",
        90s);
    REQUIRE(ok(start));
    CHECK(start->fields.at("mode").as_string() == "rounds");
    auto got = collect(peer, 15s, [](const received& r) { return r.stat_reports >= 3; });
    CHECK(got.stat_reports >= 3); // three rounds
    CHECK_THAT(got.text, Catch::Contains("matrix_multiply"));
    CHECK_THAT(got.text, Catch::Contains("### PERF_STAT ###"));
    // While round N+1 records, round N is scripted: two perf record processes never overlap
    // but a record is always running.
    CHECK(test_support::children_of(agent->pid(), "perf").size() >= 2);
    CHECK(ok(peer.command("stop", "{}", 10s)));
    CHECK(no_perf_children(agent->pid(), 3s));
    CHECK(agent->stderr_text().find("perfwire-rounds-") == std::string::npos);
}

TEST_CASE("a collector that goes away stops perf — configure_metrics switches streams",
          "[agent][integration][perf]") {
    const auto flavour = each_agent();
    INFO(flavour);
    listener l;
    auto demo = start_demo(60);
    auto agent = start_agent(flavour, {"--server", "127.0.0.1:" + std::to_string(l.port()), "--pid",
                                       std::to_string(demo->pid())});
    {
        auto peer = accept_agent(l);
        read_hello(peer);
        wait_profiling(peer);
        auto conf = peer.command("configure_metrics",
                                 R"({"threads":true,"disk":true,"network":false,"interval":1})");
        REQUIRE(ok(conf));
        CHECK(conf->fields.at("threads").as_bool());
        CHECK(conf->fields.at("interval").as_double() == 1.0);
        auto got = collect(peer, 5s, [](const received& r) {
            return r.metrics.count("threads") && r.metrics.count("disk");
        });
        CHECK(got.metrics.count("threads"));
        CHECK(got.metrics.count("disk"));
        perf_children(agent->pid(), 2); // record and script at least
    }                                   // the collector hangs up
    CHECK(no_perf_children(agent->pid(), 5s));
    CHECK_FALSE(agent->wait(100ms)); // the agent itself stays, to reconnect
}

TEST_CASE("the Python agent compresses with the zstandard module, a zstd executable, or not at all",
          "[agent][integration][perf][python]") {
    const std::string mode = GENERATE(as<std::string>{}, "zstandard", "zstd", "none");
    INFO("compression: " << mode);
    test_support::temp_dir dir;
    // A device without the module: a package of that name that cannot be imported comes first.
    fs::create_directories(dir.path / "lib" / "zstandard");
    std::ofstream(dir.path / "lib" / "zstandard" / "__init__.py")
        << "raise ImportError('not on this device')\n";
    // A device without a zstd executable: PATH holds perf, and zstd only when the mode has it.
    fs::create_directories(dir.path / "bin");
    fs::create_symlink(on_path("perf"), dir.path / "bin" / "perf");
    if (mode == "zstd")
        fs::create_symlink(on_path("zstd"), dir.path / "bin" / "zstd");
    std::vector<std::string> env;
    if (mode != "zstandard")
        env = {"PYTHONPATH=" + (dir.path / "lib").string(), "PATH=" + (dir.path / "bin").string()};

    listener l;
    auto demo = start_demo(60);
    auto agent = start_agent(agent_flavour::python,
                             {"--server", "127.0.0.1:" + std::to_string(l.port()), "--pid",
                              std::to_string(demo->pid()), "--duration", "1"},
                             env);
    auto peer = accept_agent(l);
    read_hello(peer);
    auto got = collect(peer, 20s, [](const received& r) {
        return r.stat_reports >= 2 && r.text.find("matrix_multiply") != std::string::npos;
    });
    const std::string log = agent->stderr_text();
    INFO(log);
    const std::map<std::string, std::pair<std::string, frame_flag>> expected = {
        {"zstandard", {"compression: zstandard module", frame_flag::zstd}},
        {"zstd",
         {"compression: zstd executable " + (dir.path / "bin" / "zstd").string(),
          frame_flag::zstd}},
        {"none", {"compression: none (text frames)", frame_flag::text}}};
    CHECK_THAT(log, Catch::Contains(expected.at(mode).first));
    CHECK(got.stat_reports >= 2);
    CHECK(got.data_flags == std::set<frame_flag>{expected.at(mode).second});
    CHECK_THAT(got.text, Catch::Contains("matrix_multiply"));
    CHECK_THAT(got.text, Catch::Contains("### PERF_STAT ###"));
    CHECK(ok(peer.command("stop", "{}", 10s)));
    CHECK(no_perf_children(agent->pid(), 3s));
    CHECK(test_support::children_of(agent->pid(), "zstd").empty());
}

TEST_CASE("kallsyms: sent only when the agent was started with --allow-kallsyms, as the kernel "
          "lists them",
          "[agent][integration]") {
    const auto flavour = each_agent();
    INFO(flavour);
    for (const bool allowed : {false, true}) {
        listener l;
        std::vector<std::string> args{"--server", "127.0.0.1:" + std::to_string(l.port())};
        if (allowed)
            args.push_back("--allow-kallsyms");
        auto agent = start_agent(flavour, args);
        auto peer = accept_agent(l);
        read_hello(peer);
        const auto r = peer.command("kallsyms", "{}", 20s);
        if (!allowed) {
            CHECK_THAT(error_of(r), Catch::Contains("--allow-kallsyms"));
            continue;
        }
        REQUIRE(r);
        INFO(r->error);
        REQUIRE(r->ok);
        const std::string symbols(r->fields.at("symbols").as_string());
        CHECK(r->fields.at("count").to_number<std::size_t>() > 1000);
        // The kernel's own start, at the address /proc/kallsyms gives it.
        std::ifstream in("/proc/kallsyms");
        std::string address, type, name, stext;
        while (in >> address >> type >> name && stext.empty()) {
            if (name == "_stext")
                stext = address;
            std::getline(in, name);
        }
        REQUIRE_FALSE(stext.empty());
        CHECK_THAT(symbols, Catch::Contains(stext + " _stext\n"));
        CHECK(symbols.find('\t') == std::string::npos); // no "[module]" tails
    }
}

namespace {

// The agent with the fake perf of test/agent/fake_perf in front of the real one on PATH,
// behaving as `behaviour` says ("" for the real perf alone).
std::unique_ptr<spawned> start_odd_agent(agent_flavour flavour, const std::string& behaviour,
                                         std::vector<std::string> args) {
    const std::string path = std::getenv("PATH") ? std::getenv("PATH") : "/usr/bin:/bin";
    std::vector<std::string> env = {"PERFWIRE_FAKE_PERF=" + behaviour};
    if (!behaviour.empty())
        env.push_back("PATH=" + std::string(PERFWIRE_TEST_DIR) + "/agent/fake_perf:" + path);
    // One fake perf plays every odd build (by its environment): probed each time, none kept.
    args.insert(args.end(), {"--state-dir", ""});
    return start_agent(flavour, std::move(args), env);
}

std::vector<std::string> strings(const boost::json::value& v) {
    std::vector<std::string> out;
    for (const auto& s : v.as_array())
        out.emplace_back(s.as_string());
    return out;
}

std::string cannot_text(const boost::json::object& caps) {
    std::string out;
    for (const auto& s : caps.at("cannot").as_array())
        out += std::string(s.as_string()) + "\n";
    return out;
}

} // namespace

TEST_CASE("live: what perf script prints reaches the collector every third of a second, whatever "
          "--duration — perf stat's report once a period",
          "[agent][integration][perf][long]") {
    const auto flavour = each_agent();
    // The real perf, and one from before --no-buffering: the agent then streams without it.
    const std::string perf_kind = GENERATE(as<std::string>{}, "", "no-buffering-unknown");
    INFO(flavour << ", perf: " << (perf_kind.empty() ? "real" : perf_kind));
    listener l;
    auto demo = start_demo(60);
    auto agent = start_odd_agent(flavour, perf_kind,
                                 {"--server", "127.0.0.1:" + std::to_string(l.port()), "--pid",
                                  std::to_string(demo->pid()), "--duration", "30"});
    auto peer = accept_agent(l);
    read_hello(peer);
    wait_profiling(peer);
    const auto first = collect(peer, 20s, [](const received& r) { return r.chunks >= 1; });
    INFO(agent->stderr_text());
    REQUIRE(first.chunks >= 1);
    // Four seconds of a 30 s period: flushes of samples (about twelve), no perf stat report.
    const auto more = collect(peer, 4s, [](const received&) { return false; });
    if (perf_kind.empty())
        CHECK(more.chunks >= 4);
    else
        CHECK(more.chunks >= 1);
    CHECK(first.stat_reports + more.stat_reports == 0);
    CHECK_THAT(first.text + more.text, Catch::Contains("matrix_multiply"));
    CHECK(first.notices.empty());
    CHECK(more.notices.empty());
    REQUIRE(ok(peer.command("stop", "{}", 10s)));
    CHECK(no_perf_children(agent->pid(), 5s));
}

TEST_CASE("odd perf builds: the probe finds what works by what perf did, and start refuses the "
          "rest with the reason",
          "[agent][integration][perf][odd][longest]") {
    const auto flavour = each_agent();
    const std::string behaviour = GENERATE(as<std::string>{}, "", "old-events", "no-pipe",
                                           "no-callgraph", "dies", "slow-dwarf");
    INFO(flavour << ", perf: " << (behaviour.empty() ? "real" : behaviour));
    listener l;
    auto demo = start_demo(60);
    auto agent =
        start_odd_agent(flavour, behaviour,
                        {"--server", "127.0.0.1:" + std::to_string(l.port()), "--duration", "1"});
    auto peer = accept_agent(l);
    read_hello(peer);

    // status, idle: the platform, and the capabilities once the probe that follows the
    // connection is over (it is announced as under way until then). A probe of an odd perf
    // may take as long as the collector waits for a start that probes (90 s): perf stat
    // halving its list, each run up to 8 s.
    std::optional<protocol::command_response> status;
    const auto deadline = std::chrono::steady_clock::now() + 90s;
    do {
        status = peer.command("status");
        INFO(agent->stderr_text());
        REQUIRE(ok(status));
        if (!status->fields.at("capabilities").is_null())
            break;
        CHECK(status->fields.at("probing").as_bool());
        std::this_thread::sleep_for(200ms);
    } while (std::chrono::steady_clock::now() < deadline);
    INFO(agent->stderr_text());
    CHECK(status->fields.at("state").as_string() == "idle");
    CHECK(status->fields.at("platform").at("arch").as_string() == "x86_64");
    REQUIRE(status->fields.at("capabilities").is_object());
    auto probe = peer.command("reprobe", R"({"pid":)" + std::to_string(demo->pid()) + "}", 60s);
    REQUIRE(ok(probe));
    const auto& caps = probe->fields;
    INFO(boost::json::serialize(caps));
    const auto events = strings(caps.at("record_events"));
    const auto modes = strings(caps.at("callgraph_modes"));
    const auto cannot = cannot_text(caps);
    CHECK_FALSE(caps.at("tried").as_array().empty()); // what it ran, for the UI to show

    std::string start_args = "{}";
    if (behaviour == "old-events") {
        // perf stat refused the whole list for cpu-clock: each usable event was still found.
        CHECK(events == std::vector<std::string>{"cycles"});
        const auto stat_only = strings(caps.at("stat_only_events"));
        CHECK(std::find(stat_only.begin(), stat_only.end(), "instructions") != stat_only.end());
        CHECK_THAT(std::string(caps.at("rejected_events").at("cpu-clock").as_string()),
                   Catch::Contains("event syntax error"));
        CHECK_THAT(cannot, Catch::Contains("count cpu-clock"));
        CHECK(caps.at("pipe_mode").as_bool());
        CHECK_THAT(error_of(peer.command("start", R"({"events":["cpu-clock"]})")),
                   Catch::StartsWith("cpu-clock cannot be used with this perf (perf stat: event "
                                     "syntax error"));
    } else if (behaviour == "no-pipe") {
        CHECK_FALSE(caps.at("pipe_mode").as_bool());
        CHECK_THAT(cannot, Catch::Contains("write perf.data to a pipe") &&
                               Catch::Contains("pipe output not supported"));
        CHECK(modes.at(0) == "fp"); // call graphs were proved with files instead
        CHECK_THAT(error_of(peer.command("start", R"({"mode":"continuous"})")),
                   Catch::StartsWith("this perf cannot write perf.data to a pipe"));
    } else if (behaviour == "no-callgraph") {
        CHECK(caps.at("callgraph_method").is_null());
        CHECK(modes.empty());
        CHECK_THAT(cannot,
                   Catch::Contains("record call graphs") && Catch::Contains("unknown option"));
        CHECK_THAT(error_of(peer.command("start", R"({"callgraph":"fp"})")),
                   Catch::StartsWith("callgraph must be one this device records: none (fp: exit "
                                     "status 129: Error: unknown option"));
    } else {
        // The real perf (and one that dies later, in the middle of a stream): all is well.
        CHECK((events == std::vector<std::string>{"cpu-clock"} ||
               events == std::vector<std::string>{"cycles"}));
        CHECK(caps.at("pipe_mode").as_bool());
        CHECK(caps.at("callgraph_method").as_string() == "fp");
        CHECK(cannot.empty());
        // A mode whose check took too long is not thereby unusable: offered, and said.
        const auto warnings = strings(caps.at("warnings"));
        const bool unchecked = std::any_of(warnings.begin(), warnings.end(), [](auto& w) {
            return w.starts_with("--call-graph=dwarf not checked (no answer within");
        });
        CHECK((unchecked || behaviour != "slow-dwarf"));
        CHECK(std::find(modes.begin(), modes.end(), "dwarf") != modes.end());
    }
    CHECK(peer.command("status")->fields.at("state").as_string() == "idle"); // refusals: no run

    // A perf that dies does so after 256 KiB of perf.data: sampled fast, that is soon. One
    // whose dwarf check was too slow records with dwarf all the same.
    std::string extra = behaviour == "dies" ? R"(,"frequency":999)" : "";
    if (behaviour == "slow-dwarf")
        extra = R"(,"callgraph":"dwarf")";
    auto started =
        peer.command("start", R"({"pid":)" + std::to_string(demo->pid()) + extra + "}", 60s);
    REQUIRE(ok(started));
    CHECK(strings(started->fields.at("events")) == events);
    CHECK(started->fields.at("mode").as_string() ==
          (behaviour == "no-pipe" ? "rounds" : "continuous"));
    CHECK(started->fields.at("callgraph").as_string() == (behaviour == "no-callgraph" ? "none"
                                                          : behaviour == "slow-dwarf" ? "dwarf"
                                                                                      : "fp"));

    // Samples of the sampled event really arrive, with stacks when the mode has them.
    auto got = collect(peer, 20s, [&](const received& r) {
        return r.text.find("matrix_multiply") != std::string::npos &&
               (behaviour != "dies" || (!r.notices.empty() && r.notices.back().state == "idle"));
    });
    CHECK_THAT(got.text, Catch::Contains("matrix_multiply"));
    CHECK_THAT(got.text, Catch::Contains(" " + events.at(0) + ":"));
    CHECK(agent::has_call_chains(got.text) == (behaviour != "no-callgraph"));
    if (behaviour == "dies") {
        // perf died in the middle of the stream: what it sent arrived, then the agent said why.
        REQUIRE_FALSE(got.notices.empty());
        CHECK(got.notices.back().state == "idle");
        CHECK_THAT(got.notices.back().reason.value_or(""),
                   Catch::StartsWith("perf record exited with status 139: perf: Segmentation "
                                     "fault"));
        CHECK(peer.command("status")->fields.at("state").as_string() == "idle");
    } else {
        CHECK(ok(peer.command("stop")));
    }
    CHECK(no_perf_children(agent->pid(), 5s));
}

TEST_CASE("a perf that ends by itself is not taken for the target's exit: rounds go on, and only "
          "the target's exit is called one",
          "[agent][integration][perf][odd][long]") {
    const auto flavour = each_agent();
    INFO(flavour);
    listener l;
    auto demo = start_demo(120);
    // An agent with this perf, started on the demo in `mode` (rounds of `seconds`).
    const auto started_with = [&](const std::string& behaviour, const std::string& seconds,
                                  const std::string& mode) {
        auto agent = start_odd_agent(
            flavour, behaviour,
            {"--server", "127.0.0.1:" + std::to_string(l.port()), "--duration", seconds});
        auto peer = accept_agent(l);
        read_hello(peer);
        auto started = peer.command("start", R"({"pid":)" + std::to_string(demo->pid()) + "}", 90s);
        INFO(agent->stderr_text());
        REQUIRE(ok(started));
        REQUIRE(started->fields.at("mode").as_string() == mode);
        return std::make_pair(std::move(agent), std::move(peer));
    };
    SECTION("rounds: each round's perf writes its file and exits cleanly after 0.05 s") {
        auto [agent, peer] = started_with("no-pipe,short-rounds", "2", "rounds");
        // Round after round arrives, one every 2 s (not faster: a round perf cut short is
        // waited out), and the agent stays profiling.
        const auto since = std::chrono::steady_clock::now();
        // (Three rounds and some of the demo's stacks: a round of 0.05 s on a loaded machine
        // may catch none of its samples.)
        auto got = collect(peer, 30s, [](const received& r) {
            return (r.stat_reports >= 3 && r.text.find("matrix_multiply") != std::string::npos) ||
                   !r.notices.empty();
        });
        const auto took = std::chrono::steady_clock::now() - since;
        INFO(agent->stderr_text());
        CHECK(got.notices.empty());
        CHECK(got.stat_reports >= 3);
        CHECK(took >= 3s);
        CHECK_THAT(got.text, Catch::Contains("matrix_multiply"));
        CHECK(peer.command("status")->fields.at("state").as_string() == "profiling");
        // The target's own exit ends the run, and is called what it is.
        demo->signal(SIGKILL);
        demo->wait(5s);
        const auto rest = collect(peer, 20s, [](const received& r) { return !r.notices.empty(); });
        REQUIRE_FALSE(rest.notices.empty());
        CHECK(rest.notices.back().state == "idle");
        CHECK(rest.notices.back().reason == "target process exited");
        CHECK(no_perf_children(agent->pid(), 5s));
    }
    SECTION("continuous: perf record streams, then ends cleanly while the target runs") {
        auto [agent, peer] = started_with("stops-early", "1", "continuous");
        const auto got = collect(peer, 20s, [](const received& r) { return !r.notices.empty(); });
        INFO(agent->stderr_text());
        REQUIRE_FALSE(got.notices.empty());
        CHECK(got.notices.back().state == "idle");
        CHECK(got.notices.back().reason ==
              "perf record ended by itself (exit status 0) while process " +
                  std::to_string(demo->pid()) + " still runs");
        CHECK(test_support::process_exists(demo->pid()));
        CHECK(no_perf_children(agent->pid(), 5s));
    }
}

TEST_CASE("an agent told --pid says hello and answers while it probes perf, then starts",
          "[agent][integration][perf][concurrency][long]") {
    const auto flavour = each_agent();
    INFO(flavour);
    listener l;
    auto demo = start_demo(60);
    // The probe's dwarf check takes 10 s here: hello and answers must not wait for it.
    auto agent = start_odd_agent(flavour, "slow-dwarf",
                                 {"--server", "127.0.0.1:" + std::to_string(l.port()), "--pid",
                                  std::to_string(demo->pid()), "--duration", "1"});
    auto peer = accept_agent(l);
    read_hello(peer); // within 5 s
    // It says it probes, so that its target's row reads "probing perf", not "idle".
    std::string notices;
    const auto status = peer.command("status", "{}", 5s, [&](const protocol::frame& f) {
        if (f.flag == protocol::frame_flag::response)
            notices += f.payload + "\n";
    });
    INFO(agent->stderr_text());
    REQUIRE(ok(status));
    CHECK(status->fields.at("state").as_string() == "idle");
    CHECK(status->fields.at("probing").as_bool());
    CHECK(status->fields.at("capabilities").is_null());
    CHECK_THAT(notices, Catch::Contains("\"reason\":\"probing perf\""));
    // A start command while the start from the command line waits for the same probe: one
    // of them starts, the other is told so.
    const auto asked = peer.command("start", "{}", 60s);
    REQUIRE(asked);
    if (!asked->ok)
        CHECK(asked->error == "already profiling");
    const auto state = peer.command("status", "{}", 5s);
    REQUIRE(ok(state));
    CHECK(state->fields.at("state").as_string() == "profiling");
    auto got = collect(peer, 20s, [](const received& r) {
        return r.text.find("matrix_multiply") != std::string::npos;
    });
    CHECK_THAT(got.text, Catch::Contains("matrix_multiply"));
    CHECK(ok(peer.command("stop", "{}", 10s)));
    CHECK(no_perf_children(agent->pid(), 5s));
}

TEST_CASE("a probe run whose perf script answers late still proves the pipe: perf record wrote "
          "into it, so the agent streams",
          "[agent][integration][perf][odd][longest]") {
    const auto flavour = each_agent();
    INFO(flavour);
    listener l;
    auto demo = start_demo(120);
    // perf script of a short pipe answers after the probe stopped waiting (a busy device); a
    // timeout alone must not be taken for "no pipe", which would mean rounds of files.
    auto agent =
        start_odd_agent(flavour, "slow-short-script",
                        {"--server", "127.0.0.1:" + std::to_string(l.port()), "--duration", "1"});
    auto peer = accept_agent(l);
    read_hello(peer);
    auto started = peer.command("start", R"({"pid":)" + std::to_string(demo->pid()) + "}", 90s);
    INFO(agent->stderr_text());
    REQUIRE(ok(started));
    CHECK(started->fields.at("mode").as_string() == "continuous");
    const auto status = peer.command("status", "{}", 10s);
    REQUIRE(ok(status));
    const auto& caps = status->fields.at("capabilities").as_object();
    CHECK(caps.at("pipe_mode").as_bool());
    CHECK(caps.at("callgraph_method") == "fp");
    const auto warnings = strings(caps.at("warnings"));
    CHECK(std::find_if(warnings.begin(), warnings.end(), [](const std::string& w) {
              return w.starts_with("--call-graph=fp not checked (no answer within 8 s)");
          }) != warnings.end());
    // The stream's perf script passes through after its first 10 s: samples with stacks.
    const auto got = collect(peer, 30s, [](const received& r) {
        return r.text.find("matrix_multiply") != std::string::npos;
    });
    CHECK_THAT(got.text, Catch::Contains("matrix_multiply"));
    CHECK(ok(peer.command("stop", "{}", 10s)));
    CHECK(no_perf_children(agent->pid(), 5s));
}

TEST_CASE("odd perf builds: --output records in rounds without a pipe, and fails without a file "
          "when perf samples nothing",
          "[agent][integration][perf][odd][longest]") {
    const auto flavour = each_agent();
    INFO(flavour);
    auto demo = start_demo(300); // outlives every run below, however slow the machine
    test_support::temp_dir dir;
    // Every run at once (each an agent of its own, writing its own file: most of their time is
    // the fakes' waiting), then each one's outcome.
    struct run {
        std::string what, out;
        std::unique_ptr<spawned> agent;
    };
    std::vector<run> runs;
    const auto start = [&](const std::string& what, const std::string& perf_kind,
                           const std::string& rounds, const std::string& duration) {
        const auto out = (dir.path / (std::to_string(runs.size()) + ".txt")).string();
        std::vector<std::string> args{"--output", out, "--pid", std::to_string(demo->pid())};
        if (!rounds.empty())
            args.insert(args.end(), {"--rounds", rounds, "--duration", duration});
        runs.push_back({what, out, start_odd_agent(flavour, perf_kind, args)});
    };
    // Two rounds without a pipe, each a file.
    start("no pipe", "no-pipe", "2", "1");
    // A perf whose every round ends early, cleanly, while the target runs: all three rounds.
    start("short rounds", "no-pipe,short-rounds", "3", "2");
    // A perf script slow to name what was recorded (5 s after its input ended): the stop waits
    // for it rather than killing it with the whole recording inside.
    start("slow script", "slow-script", "1", "1");
    // A perf slow to start (2.5 s, longer than the whole run asked for): the recording still
    // lasts both periods, counted from when perf got going, not cut short by the clock.
    start("slow start", "slow-start", "2", "1");
    // A perf that ignores the `-- sleep` bounding its run records until stopped: the run
    // still ends, in rounds and in one stream, a little past its time.
    start("endless stream", "ignores-workload", "1", "1");
    start("endless rounds", "no-pipe,ignores-workload", "1", "1");
    // A perf that can sample nothing: an error, and no file.
    start("no events", "no-events", "", "");

    const auto rounds_in = [&](const std::string& file, bool short_rounds) {
        const std::string text = test_support::file_bytes(file);
        // The demo's samples. Short rounds record 50 ms each: a few samples of its busiest
        // threads under load, not necessarily of a given one; a second's round has them all.
        CHECK_THAT(text, Catch::Contains(" " + std::to_string(demo->pid()) + "/"));
        if (!short_rounds)
            CHECK_THAT(text, Catch::Contains("matrix_multiply"));
        std::size_t n = 0; // each round ends with its perf stat report
        for (auto at = text.find("### PERF_STAT ###"); at != std::string::npos;
             at = text.find("### PERF_STAT ###", at + 1))
            ++n;
        return n;
    };
    const std::map<std::string, std::size_t> rounds{{"no pipe", 2},        {"short rounds", 3},
                                                    {"slow script", 1},    {"slow start", 2},
                                                    {"endless stream", 1}, {"endless rounds", 1}};
    for (auto& r : runs) {
        INFO(r.what);
        const auto code = r.agent->wait(90s);
        INFO(r.agent->stderr_text());
        if (r.what == "no events") {
            CHECK(code == 1);
            CHECK_THAT(r.agent->stderr_text(), Catch::Contains("cannot sample any event"));
            CHECK_FALSE(fs::exists(r.out));
            continue;
        }
        REQUIRE(code == 0);
        CHECK(rounds_in(r.out, r.what == "short rounds") == rounds.at(r.what));
    }
}

TEST_CASE("a stop that does not drain ends a run at once: a perf script that would name what "
          "is left for a long while is killed, not waited for",
          "[agent][integration][perf]") {
    const auto flavour = each_agent();
    INFO(flavour);
    listener l;
    auto demo = start_demo(60);
    // perf script of the stream never ends by itself once its input has: a draining stop
    // would wait the 30 s the agent gives it, far past this command's 10 s.
    auto agent = start_odd_agent(flavour, "stuck-script",
                                 {"--server", "127.0.0.1:" + std::to_string(l.port()), "--pid",
                                  std::to_string(demo->pid()), "--duration", "1"});
    auto peer = accept_agent(l);
    (void)read_hello(peer);
    // Three periods streamed (the fake perf takes its input for a stream), and perf script's
    // samples among them: how soon the first come depends on the machine's load.
    const auto got = collect(peer, 30s, [](const received& r) {
        return r.stat_reports >= 3 && r.text.find("matrix_multiply") != std::string::npos;
    });
    INFO(agent->stderr_text());
    REQUIRE(got.stat_reports >= 3);
    CHECK_THAT(got.text, Catch::Contains("matrix_multiply"));
    CHECK(error_of(peer.command("stop", R"({"drain":"no"})")) == "drain must be true or false");
    const auto stopped = peer.command("stop", R"({"drain":false})");
    REQUIRE(ok(stopped));
    CHECK(stopped->fields.at("state").as_string() == "idle");
    CHECK(no_perf_children(agent->pid(), 3s));
    // A new run starts at once.
    REQUIRE(ok(peer.command("start")));
    CHECK(peer.command("status")->fields.at("state").as_string() == "profiling");
    REQUIRE(ok(peer.command("stop", R"({"drain":false})")));
    CHECK(no_perf_children(agent->pid(), 3s));
}
