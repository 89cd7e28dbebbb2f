// The flight recorder end to end: the real agent profiling a real process with real perf,
// keeping its window on the device, and the real collector given nothing until a trigger fires,
// then one session holding the window, the spike and the time after.
#include "support/agents.hpp"
#include "support/collector_proc.hpp"
#include "support/fixtures.hpp"
#include "support/relay.hpp"
#include "support/spawn.hpp"

#include <catch2/catch.hpp>

#include <boost/json/serialize.hpp>

#include <csignal>
#include <fstream>
#include <signal.h>
#include <sstream>
#include <string>
#include <thread>

using namespace std::chrono_literals;
namespace json = boost::json;

namespace {

// The total of the function whose name ends with `name` (0 when absent), and the view's total.
std::pair<double, double> function_total(test_support::collector_proc& coll, const std::string& id,
                                         const std::string& query, std::string_view name) {
    const auto t = coll.get("/api/sessions/" + id + "/functions?limit=1000" + query);
    double total = 0;
    for (const auto& f : t.at("functions").as_array())
        if (std::string_view(f.at("name").as_string()).ends_with(name))
            total = std::max(total, f.at("total").to_number<double>());
    return {total, t.at("total").to_number<double>()};
}

// The one target, once it is armed (its flight recorder holding its window): its id.
std::string armed_target(test_support::collector_proc& coll) {
    return std::string(test_support::one_target(coll, "armed", 60s).at("id").as_string());
}

// The one session, once it ended (a capture's).
json::object only_ended_session(test_support::collector_proc& coll) {
    const auto sessions =
        test_support::wait_for(coll, "/api/sessions", 60s, [](const json::value& v) {
            return v.as_array().size() == 1 && !v.as_array()[0].at("live").as_bool();
        });
    return sessions.as_array()[0].as_object();
}

// The agent's status now: its flight recorder's part.
json::value flight_status(test_support::collector_proc& coll, const std::string& target) {
    const auto status = test_support::http_call(
        coll.http_port, "POST", "/api/targets/" + target + "/command", R"({"cmd":"status"})");
    REQUIRE(status.status == 200);
    return json::parse(status.body).at("flight");
}

} // namespace

TEST_CASE("flight recorder: nothing reaches the collector before a CPU spike the agent is not "
          "told of, then one session holds the window before it, the spike and after",
          "[agent][collector][perf][flight][integration][long]") {
    const auto flavour = test_support::each_agent();
    INFO(flavour);
    test_support::temp_dir dir;
    test_support::collector_proc coll(dir.path / "sessions");
    // Quiet (2 % of a core) until the test says, 3 s of CPU as fast as the machine gives it,
    // 6 s quiet again. The trigger at 10 % of a core: five times the quiet ticks, below what the
    // spike gets beside the rest of the suite.
    const auto out = dir.path / "spike.txt";
    test_support::spawned work(PERFWIRE_SPIKE_BIN, {"120", "3", "6"}, out.string());
    auto agent = test_support::start_agent(
        flavour, {"--server", "127.0.0.1:" + std::to_string(coll.agent_port), "--pid",
                  std::to_string(work.pid()), "--flight-recorder", "20", "--after", "4",
                  "--trigger-cpu", "10", "--state-dir", ""});
    // Armed, and silent: no session while the process is quiet, until the agent holds its 20 s.
    const auto target = armed_target(coll);
    int quiet_polls = 0;
    for (double held = 0; held < 20.5;) {
        INFO("a session before the spike");
        REQUIRE(coll.get("/api/sessions").as_array().empty());
        held = flight_status(coll, target).at("held_s").to_number<double>();
        ++quiet_polls;
        REQUIRE(quiet_polls < 300); // (a minute at least)
        std::this_thread::sleep_for(200ms);
    }
    // The spike, at a moment the agent is not told of.
    REQUIRE(::kill(work.pid(), SIGUSR1) == 0);
    while (test_support::file_bytes(out).find("spiking") == std::string::npos) {
        REQUIRE(coll.get("/api/sessions").as_array().empty());
        std::this_thread::sleep_for(20ms);
    }
    // The capture: opened by the trigger, ended after --after, the agent armed again.
    const auto s = only_ended_session(coll);
    const std::string id(s.at("id").as_string());
    INFO(json::serialize(s));
    REQUIRE(s.contains("capture"));
    CHECK_THAT(std::string(s.at("capture").at("trigger").as_string()),
               Catch::Contains("--trigger-cpu 10"));
    CHECK(s.at("capture").at("window_s").to_number<double>() >= 18);
    REQUIRE(work.wait(90s) == 0);
    // "spike <tid> <cpu ns> <start> <end>"
    std::istringstream said(
        test_support::file_bytes(out).substr(test_support::file_bytes(out).find("spike ")));
    std::string word;
    long long tid = 0, cpu_ns = 0, start = 0, end = 0;
    said >> word >> tid >> cpu_ns >> start >> end;
    REQUIRE(cpu_ns > 2'900'000'000);
    // The spike's CPU time is in the session (its clock samples, in ns): at least 90 %.
    const auto [spike, whole] = function_total(coll, id, "", "spike_hot");
    INFO("spike_hot " << spike << " ns of " << whole << "; measured " << cpu_ns);
    CHECK(spike >= 0.9 * static_cast<double>(cpu_ns));
    // The 20 s before it: the session's first 18 s hold the quiet ticks and no spike.
    const auto [early_spike, early] = function_total(coll, id, "&end=18", "spike_hot");
    const auto [ticks, ignored] = function_total(coll, id, "&end=18", "idle_tick");
    CHECK(early_spike == 0);
    CHECK(ticks > 0);
    const auto timeline = coll.get("/api/sessions/" + id + "/timeline?width=10");
    CHECK(timeline.at("end_s").to_number<double>() - timeline.at("start_s").to_number<double>() >=
          18 + 3);
    agent->signal(SIGTERM);
    CHECK(agent->wait(30s));
}

TEST_CASE("flight recorder: a line in a log the device's owner named fires a capture of the "
          "seconds before it, said with the line",
          "[agent][collector][perf][flight][integration]") {
    const auto flavour = test_support::each_agent();
    INFO(flavour);
    test_support::temp_dir dir;
    test_support::collector_proc coll(dir.path / "sessions");
    auto demo = test_support::start_demo(120);
    const auto log = dir.path / "app.log";
    std::ofstream(log) << "watchdog fired (before the agent: old news)\n";
    auto agent = test_support::start_agent(
        flavour,
        {"--server", "127.0.0.1:" + std::to_string(coll.agent_port), "--pid",
         std::to_string(demo->pid()), "--flight-recorder", "6", "--after", "1", "--duration", "1",
         "--trigger-log", log.string() + ":watchdog (fired|bit)", "--state-dir", ""});
    const auto target = armed_target(coll);
    // Wait until the window holds a few seconds, saying its trigger.
    for (double held = 0; held < 3;) {
        const auto f = flight_status(coll, target);
        CHECK(std::string(f.at("triggers").at("log").as_string()) ==
              log.string() + ":watchdog (fired|bit)");
        held = f.at("held_s").to_number<double>();
        std::this_thread::sleep_for(200ms);
    }
    REQUIRE(coll.get("/api/sessions").as_array().empty());
    std::ofstream(log, std::ios::app) << "all well\nthe watchdog bit \x1b[31mhard\n";
    const auto s = only_ended_session(coll);
    INFO(json::serialize(s));
    REQUIRE(s.contains("capture"));
    CHECK(std::string(s.at("capture").at("trigger").as_string()) ==
          "log " + log.string() + ": the watchdog bit ?[31mhard");
    CHECK(s.at("capture").at("window_s").to_number<double>() >= 3);
    CHECK(s.at("samples").to_number<double>() > 0);
    // Armed again afterwards.
    test_support::one_target(coll, "armed", 30s);
    agent->signal(SIGTERM);
    CHECK(agent->wait(30s));
}

TEST_CASE("flight recorder: started from the collector with its window and levels — a log or "
          "file to watch is refused, the device owner's to name",
          "[agent][collector][perf][flight][integration]") {
    const auto flavour = test_support::each_agent();
    INFO(flavour);
    test_support::temp_dir dir;
    test_support::collector_proc coll(dir.path / "sessions");
    auto demo = test_support::start_demo(120);
    auto agent = test_support::start_agent(flavour, {"--server",
                                                     "127.0.0.1:" + std::to_string(coll.agent_port),
                                                     "--duration", "1", "--state-dir", ""});
    const std::string target(test_support::one_target(coll, "idle", 60s).at("id").as_string());
    const auto start = [&](const std::string& extra) {
        return test_support::http_call(
            coll.http_port, "POST", "/api/targets/" + target + "/command",
            R"({"cmd":"start","args":{"pid":)" + std::to_string(demo->pid()) + extra + "}}");
    };
    const auto log = start(R"(,"flight_recorder":5,"trigger_log":"/etc/shadow:root")");
    CHECK(log.status == 409);
    CHECK_THAT(log.body, Catch::Contains("the device owner's to name"));
    const auto big = start(R"(,"flight_recorder":5,"flight_memory_mb":64)");
    CHECK(big.status == 409);
    CHECK_THAT(big.body, Catch::Contains("--buffer-mb"));
    const auto loose = start(R"(,"after":5)");
    CHECK(loose.status == 409);
    CHECK_THAT(loose.body, Catch::Contains("go with flight_recorder"));
    const auto bad = start(R"(,"flight_recorder":5,"trigger_cpu":"lots")");
    CHECK(bad.status == 409);
    CHECK_THAT(bad.body, Catch::Contains("--trigger-cpu: the level must be a number"));
    REQUIRE(coll.get("/api/targets").as_array()[0].at("state") == "idle");

    const auto ok = start(
        R"(,"flight_recorder":5,"after":1,"trigger_cpu":"100000:2","trigger_process":"no-such-name")");
    INFO(ok.body);
    REQUIRE(ok.status == 200);
    const auto answer = json::parse(ok.body);
    CHECK(answer.at("state") == "armed");
    CHECK(answer.at("flight_recorder") == 5);
    CHECK(answer.at("triggers").at("cpu") == "100000:2");
    CHECK(answer.at("triggers").at("process") == "no-such-name");
    // The target list says what it holds once its metrics come.
    const auto listed = test_support::wait_for(coll, "/api/targets", 30s, [](const json::value& v) {
        const auto& t = v.as_array()[0];
        return t.at("state") == "armed" && t.at("flight").is_object() &&
               t.at("flight").at("held_s").to_number<double>() >= 3;
    });
    const auto& f = listed.as_array()[0].at("flight");
    CHECK(f.at("window_s").to_number<double>() == 5);
    CHECK(f.at("triggers").at("cpu") == "100000:2");
    CHECK(f.at("held_bytes").to_number<double>() > 0);
    CHECK(coll.get("/api/sessions").as_array().empty());
    const auto captured = test_support::http_call(coll.http_port, "POST",
                                                  "/api/targets/" + target + "/capture", "{}");
    CHECK(captured.status == 200);
    CHECK(only_ended_session(coll).at("capture").at("trigger") == "asked by the collector");
    agent->signal(SIGTERM);
    CHECK(agent->wait(30s));
}

TEST_CASE("flight recorder: a capture that begins and ends while the link is down is still one "
          "session, said to be a capture, ended, and the agent armed again",
          "[agent][collector][perf][flight][integration]") {
    const auto flavour = test_support::each_agent();
    INFO(flavour);
    test_support::temp_dir dir;
    test_support::collector_proc coll(dir.path / "sessions");
    test_support::relay link(coll.agent_port);
    auto demo = test_support::start_demo(120);
    auto agent = test_support::start_agent(
        flavour, {"--server", "127.0.0.1:" + std::to_string(link.port()), "--pid",
                  std::to_string(demo->pid()), "--flight-recorder", "5", "--after", "1",
                  "--duration", "1", "--state-dir", ""});
    const auto target = armed_target(coll);
    for (double held = 0; held < 3;)
        held = flight_status(coll, target).at("held_s").to_number<double>();
    // The link goes; meanwhile a capture begins and ends on the device.
    link.refuse_for(60s);
    link.reset();
    test_support::wait_for(coll, "/api/targets", 30s,
                           [](const json::value& v) { return v.as_array().empty(); });
    agent->signal(SIGUSR1);
    REQUIRE(agent->wait_for_stderr("capture 1 over", 30s));
    REQUIRE(coll.get("/api/sessions").as_array().empty());
    link.refuse_for(0ms); // back
    const auto s = only_ended_session(coll);
    INFO(json::serialize(s));
    REQUIRE(s.contains("capture"));
    CHECK(std::string(s.at("capture").at("trigger").as_string()) == "SIGUSR1");
    CHECK(s.at("capture").at("window_s").to_number<double>() >= 3);
    CHECK(s.at("samples").to_number<double>() > 0);
    test_support::one_target(coll, "armed", 30s);
    CHECK(coll.get("/api/sessions").as_array().size() == 1);
    agent->signal(SIGTERM);
    CHECK(agent->wait(30s));
}

TEST_CASE("flight recorder: a window its memory cannot hold is said at once, never a shorter "
          "window in silence",
          "[agent][collector][perf][flight][integration]") {
    const auto flavour = test_support::each_agent();
    INFO(flavour);
    test_support::temp_dir dir;
    test_support::collector_proc coll(dir.path / "sessions");
    auto demo = test_support::start_demo(120);
    // A minute of the demo at 4999 Hz is far more than a MiB.
    auto agent = test_support::start_agent(
        flavour, {"--server", "127.0.0.1:" + std::to_string(coll.agent_port), "--pid",
                  std::to_string(demo->pid()), "--frequency", "4999", "--flight-recorder", "60",
                  "--flight-memory-mb", "1", "--duration", "1", "--state-dir", ""});
    const auto t = test_support::one_target(coll, "armed", 90s, "hold only");
    INFO(json::serialize(t));
    CHECK_THAT(std::string(t.at("state_reason").as_string()),
               Catch::Matches("flight recorder: its 1 MiB hold only \\d+ s of the 60 s asked "
                              "\\(--flight-memory-mb, or a shorter --flight-recorder\\)"));
    const auto f = flight_status(coll, std::string(t.at("id").as_string()));
    CHECK(f.at("cut_for_room").to_number<double>() > 0);
    CHECK(f.at("held_s").to_number<double>() < 60);
    CHECK(f.at("held_bytes").to_number<double>() <= 1 << 20);
    CHECK(coll.get("/api/sessions").as_array().empty());
    agent->signal(SIGTERM);
    CHECK(agent->wait(30s));
}
