// An overhead budget end to end: the real agent profiling a busy process at 999 Hz with real
// perf, told --max-overhead 1, lowers its rate, says so in the session, and the views stay
// right (weighed by period).
#include "agent/procfs.hpp"
#include "support/agents.hpp"
#include "support/collector_proc.hpp"
#include "support/fixtures.hpp"
#include "support/spawn.hpp"

#include <catch2/catch.hpp>

#include <boost/json/serialize.hpp>

#include <chrono>
#include <csignal>
#include <filesystem>
#include <optional>
#include <sstream>
#include <string>
#include <unistd.h>

using namespace std::chrono_literals;
namespace json = boost::json;

namespace {

// How long ago (s) the perf record `agent` runs began, from /proc (nullopt: none runs).
std::optional<double> perf_record_age(int agent) {
    const double uptime =
        agent::procfs::parse_uptime(agent::procfs::read_file("/proc/uptime").value_or(""));
    // (the agent's children, as the kernel lists them under the thread that started each)
    std::string listed;
    std::error_code ec;
    for (const auto& task :
         std::filesystem::directory_iterator("/proc/" + std::to_string(agent) + "/task", ec))
        listed += agent::procfs::read_file(task.path().string() + "/children").value_or("") + " ";
    std::istringstream children(listed);
    for (int pid = 0; children >> pid;) {
        const auto base = "/proc/" + std::to_string(pid);
        const auto args = agent::procfs::read_file(base + "/cmdline").value_or("");
        const auto st =
            agent::procfs::parse_pid_stat(agent::procfs::read_file(base + "/stat").value_or(""));
        if (st && args.find(std::string("record") + '\0') != std::string::npos)
            return uptime - static_cast<double>(st->start_time) /
                                static_cast<double>(::sysconf(_SC_CLK_TCK));
    }
    return std::nullopt;
}

} // namespace

TEST_CASE("an overhead budget (--max-overhead): a 999 Hz run that costs more than its budget goes "
          "down in rate, each "
          "change said in the session",
          "[agent][collector][perf][overhead][integration]") {
    const auto flavour = test_support::each_agent();
    INFO(flavour);
    test_support::temp_dir dir;
    test_support::collector_proc coll(dir.path / "sessions");
    auto demo = test_support::start_demo(120);
    auto agent = test_support::start_agent(
        flavour, {"--server", "127.0.0.1:" + std::to_string(coll.agent_port), "--pid",
                  std::to_string(demo->pid()), "--frequency", "999", "--max-overhead", "0.5",
                  "--duration", "1", "--state-dir", ""});
    // The first change: within a few of its 5 s readings.
    const auto t = test_support::one_target(coll, "", 90s, "--max-overhead");
    INFO(json::serialize(t));
    CHECK_THAT(
        std::string(t.at("state_reason").as_string()),
        Catch::Matches(".*over --max-overhead 0.50 %: (sampling at \\d+ Hz|frame-pointer .*)"));
    const std::string target(t.at("id").as_string());
    const std::string id(t.at("session_id").as_string());
    const auto status = test_support::http_call(
        coll.http_port, "POST", "/api/targets/" + target + "/command", R"({"cmd":"status"})");
    REQUIRE(status.status == 200);
    const auto o = json::parse(status.body).at("overhead");
    CHECK(o.at("budget_pct").to_number<double>() == 0.5);
    CHECK(o.at("asked_hz") == 999);
    CHECK(o.at("frequency").to_number<int>() < 999);
    // The session says when and why its rate changed.
    const auto meta = coll.get("/api/sessions/" + id);
    INFO(json::serialize(meta));
    REQUIRE(meta.as_object().contains("rate_changes"));
    const auto& first = meta.at("rate_changes").as_array()[0];
    CHECK(first.at("from_hz") == 999);
    CHECK(first.at("to_hz").to_number<int>() < 999);
    CHECK_THAT(std::string(first.at("why").as_string()), Catch::Contains("--max-overhead"));
    CHECK(first.at("at_s").to_number<double>() > 0);
    // perf record held the new rate already: it runs since before the change (a ladder of
    // rates, one enabled at a time), and the session knows one event, cpu-clock.
    const double since_change =
        static_cast<double>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                std::chrono::system_clock::now().time_since_epoch())
                                .count()) /
            1000 -
        first.at("at").to_number<double>();
    const auto age = perf_record_age(agent->pid());
    INFO("perf record began " << (age ? *age : -1) << " s ago, the change " << since_change
                              << " s ago");
    REQUIRE(age);
    CHECK(*age > since_change + 1);
    const auto functions = coll.get("/api/sessions/" + id + "/functions?limit=3");
    CHECK(functions.at("event") == "cpu-clock");
    agent->signal(SIGTERM);
    CHECK(agent->wait(30s));
}
