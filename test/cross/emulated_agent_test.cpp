// The cross-built static agents (scripts/build-agents.sh → dist/) run under qemu-user against a
// real collector on loopback, profiling the demo with the machine's real perf: an emulated
// agent's execve of perf runs it natively. One run per architecture; a failure names it.
//
// Hidden from the default run ([.cross]); the test command runs it after building the agents:
//   PERFWIRE_AGENTS_DIR=dist build/test/perfwire_tests "[cross]"
#include "protocol/digest.hpp"
#include "support/fixtures.hpp"
#include "support/http_client.hpp"
#include "support/poll_json.hpp"
#include "support/spawn.hpp"

#include <catch2/catch.hpp>

#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>

#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <thread>

using namespace std::chrono_literals;
namespace fs = std::filesystem;
namespace json = boost::json;
using test_support::http_call;
using test_support::spawned;

namespace {

// The kernel's total memory, as the agent must report it.
std::uint64_t meminfo_total_kb() {
    std::ifstream in("/proc/meminfo");
    std::string key;
    std::uint64_t kb = 0;
    while (in >> key >> kb)
        if (key == "MemTotal:")
            return kb;
    return 0;
}

using test_support::names_function;
using test_support::poll_json;

} // namespace

TEST_CASE("a cross-built agent under qemu: hello, auth, probe, live samples, metrics, listen "
          "mode, clean stop",
          "[.cross]") {
    const std::map<std::string, std::string> qemu = {{"aarch64", "qemu-aarch64-static"},
                                                     {"armv7", "qemu-arm-static"},
                                                     {"s390x", "qemu-s390x-static"}};
    const std::string arch = GENERATE(as<std::string>{}, "aarch64", "armv7", "s390x");
    INFO("architecture " << arch);
    const char* dir = std::getenv("PERFWIRE_AGENTS_DIR");
    REQUIRE(dir);
    const std::string agent = std::string(dir) + "/perfwire-agent-linux-" + arch;
    REQUIRE(fs::exists(agent));
    const std::string emulator = "/usr/bin/" + qemu.at(arch);
    REQUIRE(fs::exists(emulator));

    const fs::path work =
        fs::temp_directory_path() / ("perfwire-cross-" + arch + "-" + std::to_string(::getpid()));
    fs::create_directories(work);
    struct cleanup {
        fs::path p;
        ~cleanup() {
            std::error_code ec;
            fs::remove_all(p, ec);
        }
    } remove_work{work};

    spawned demo(PERFWIRE_DEMO_BIN, {"60"});
    const std::string token = "cross-" + arch + "-0123456789abcdef";
    spawned coll(PERFWIRE_COLLECTOR_BIN,
                 {"--sessions-dir", (work / "sessions").string(), "--agent-port", "0",
                  "--agent-bind", "127.0.0.1", "--http-port", "0", "--token", token});
    const auto agents_port = coll.wait_for_stderr("agents on 127.0.0.1:", 10s);
    const auto http_text = coll.wait_for_stderr("API on http://127.0.0.1:", 10s);
    REQUIRE(agents_port);
    REQUIRE(http_text);
    const auto http = test_support::api_port(*http_text);
    const std::string server = "127.0.0.1:" + std::to_string(std::stoi(*agents_port));

    // A wrong pairing code is refused; the right one is taken.
    {
        spawned wrong(emulator, {agent, "--server", server, "--token", "not-the-code"});
        CHECK(coll.wait_for_stderr("agent refused the pairing code", 30s));
    }
    spawned live(emulator, {agent, "--server", server, "--pid", std::to_string(demo.pid()),
                            "--duration", "1", "--token", token});
    const auto targets = poll_json(http, "/api/targets", 60s, [&](const json::value& v) {
        for (const auto& t : v.as_array())
            if (t.at("state").as_string() == "profiling")
                return true;
        return false;
    });
    INFO("agent: " << live.stderr_text() << "\ncollector: " << coll.stderr_text());
    REQUIRE(targets.as_array().size() == 1);
    const auto& target = targets.as_array()[0];
    INFO(json::serialize(target));
    CHECK(target.at("agent").as_string() == "perfwire");
    CHECK(target.at("platform").at("arch").as_string() == arch);
    CHECK_FALSE(target.at("platform").at("machine").as_string().empty());
    CHECK(target.at("pid").to_number<int>() == demo.pid());
    const std::string target_id(target.at("id").as_string());
    const std::string session(target.at("session_id").as_string());

    // The probe's answer: perf works on this machine with its software clock.
    const auto status =
        http_call(http, "POST", "/api/targets/" + target_id + "/command", R"({"cmd":"status"})");
    INFO(status.body);
    REQUIRE(status.status == 200);
    const auto st = json::parse(status.body);
    CHECK(st.at("state").as_string() == "profiling");
    bool clock = false;
    for (const auto& e : st.at("events").as_array())
        clock = clock || e.as_string() == "cpu-clock";
    CHECK(clock);

    // Live samples of the demo's hot functions.
    const auto fns =
        poll_json(http, "/api/sessions/" + session + "/functions", 60s, [](const json::value& v) {
            return names_function(v, "(anonymous namespace)::matrix_multiply");
        });
    CHECK(names_function(fns, "(anonymous namespace)::matrix_multiply"));

    // Health metrics read from /proc by the emulated agent, byte order and all.
    const auto system =
        poll_json(http, "/api/sessions/" + session + "/metrics?type=system", 30s,
                  [](const json::value& v) { return v.is_array() && !v.as_array().empty(); });
    REQUIRE(system.is_array());
    REQUIRE_FALSE(system.as_array().empty());
    const auto& m = system.as_array().back();
    INFO(json::serialize(m));
    const double overall = m.at("cpu").at("overall_pct").to_number<double>();
    CHECK(overall >= 0);
    CHECK(overall <= 100);
    for (const auto& core : m.at("cpu").at("per_core").as_array()) {
        CHECK(core.to_number<double>() >= 0);
        CHECK(core.to_number<double>() <= 100);
    }
    CHECK(m.at("cpu").at("per_core").as_array().size() == std::thread::hardware_concurrency());
    CHECK(m.at("mem").at("total_kb").to_number<std::uint64_t>() == meminfo_total_kb());

    // A clean stop: perf goes with the agent.
    const auto perfs = test_support::children_of(live.pid(), "perf");
    CHECK_FALSE(perfs.empty());
    live.signal(SIGTERM);
    CHECK(live.wait(20s) == 0);
    for (int pid : perfs)
        CHECK_FALSE(test_support::process_exists(pid));

    // --listen: the collector dials the agent with its pairing code.
    const std::string code = "listen-" + arch + "-abcdef0123456789";
    spawned listener(emulator,
                     {agent, "--listen", "--bind", "127.0.0.1", "--port", "0", "--token", code});
    const auto port = listener.wait_for_stderr("listening on 127.0.0.1:", 30s);
    REQUIRE(port);
    const auto dialled =
        http_call(http, "POST", "/api/targets/connect",
                  R"({"host":"127.0.0.1","port":)" + *port + R"(,"token":")" + code + R"("})");
    INFO(dialled.body);
    REQUIRE(dialled.status == 200);
    const auto dialled_target = json::parse(dialled.body);
    CHECK(dialled_target.at("platform").at("arch").as_string() == arch);
    CHECK(http_call(http, "DELETE",
                    "/api/targets/" + std::string(dialled_target.at("id").as_string()))
              .status == 204);
}

TEST_CASE("a cross-built aarch64 agent under qemu takes an update from the collector and comes "
          "back as the new version",
          "[.cross]") {
    const char* dir = std::getenv("PERFWIRE_AGENTS_DIR");
    const char* next = std::getenv("PERFWIRE_NEXT_AGENT_AARCH64"); // build-agents.sh makes it
    REQUIRE(dir);
    REQUIRE(next);
    const std::string emulator = "/usr/bin/qemu-aarch64-static";
    const fs::path work =
        fs::temp_directory_path() / ("perfwire-cross-update-" + std::to_string(::getpid()));
    fs::create_directories(work / "bin");
    fs::create_directories(work / "dist");
    struct cleanup {
        fs::path p;
        ~cleanup() {
            std::error_code ec;
            fs::remove_all(p, ec);
        }
    } remove_work{work};
    const fs::path exe = work / "bin" / "perfwire-agent";
    fs::copy_file(std::string(dir) + "/perfwire-agent-linux-aarch64", exe);
    const fs::path offered = work / "dist" / "perfwire-agent-linux-aarch64";
    fs::copy_file(next, offered);
    {
        const std::string bytes = test_support::file_bytes(offered);
        std::ofstream(offered.string() + ".sha256") << protocol::sha256_hex(bytes) << "\n";
    }
    std::ofstream(offered.string() + ".version") << PERFWIRE_VERSION ".1\n";

    // Over TLS: the board pins the collector's key, and so takes the collector's build without a
    // signature (its link vouches for it); required TLS refuses any plain agent.
    const std::string token = "cross-update-0123456789abcdef";
    spawned coll(PERFWIRE_COLLECTOR_BIN,
                 {"--sessions-dir", (work / "sessions").string(), "--agent-port", "0",
                  "--agent-bind", "127.0.0.1", "--http-port", "0", "--token", token, "--agents-dir",
                  (work / "dist").string(), "--tls", "--agent-tls", "required"});
    const auto pin_text = coll.wait_for_stderr("TLS with the key ", 10s);
    REQUIRE(pin_text);
    const std::string pin = pin_text->substr(0, pin_text->find(' '));
    const auto agents_port = coll.wait_for_stderr("agents on 127.0.0.1:", 10s);
    const auto http_text = coll.wait_for_stderr("API on http://127.0.0.1:", 10s);
    REQUIRE(agents_port);
    REQUIRE(http_text);
    const auto http = test_support::api_port(*http_text);
    // The emulated agent runs new builds through the emulator too (--launcher): for their
    // --version check and the restart.
    spawned agent(emulator,
                  {exe.string(), "--server", "127.0.0.1:" + std::to_string(std::stoi(*agents_port)),
                   "--token", token, "--launcher", emulator, "--tls-pin", pin});
    auto targets = poll_json(http, "/api/targets", 60s, [](const json::value& v) {
        return v.as_array().size() == 1 && v.as_array()[0].at("update").is_string();
    });
    INFO(json::serialize(targets) << "\n" << agent.stderr_text() << "\n" << coll.stderr_text());
    REQUIRE(targets.as_array().size() == 1);
    const auto& before = targets.as_array()[0];
    CHECK(before.at("link").at("encrypted").as_bool());
    CHECK(before.at("link").at("pinned").as_string() == pin);
    CHECK(before.at("updates").as_string() == "pinned");
    CHECK(before.at("platform").at("arch").as_string() == "aarch64");
    CHECK(before.at("agent_version").as_string() == PERFWIRE_VERSION);
    const auto updated = http_call(
        http, "POST", "/api/targets/" + std::string(before.at("id").as_string()) + "/update", "{}");
    INFO(updated.body << "\n" << agent.stderr_text());
    REQUIRE(updated.status == 200);
    targets = poll_json(http, "/api/targets", 60s, [](const json::value& v) {
        return v.as_array().size() == 1 &&
               v.as_array()[0].at("agent_version").as_string() == PERFWIRE_VERSION ".1";
    });
    REQUIRE(targets.as_array().size() == 1);
    CHECK(targets.as_array()[0].at("platform").at("arch").as_string() == "aarch64");
    CHECK_FALSE(agent.wait(0ms));
}
