// A run outlives its link: a relay between a real agent and a real collector breaks the link
// mid-run and turns the agent away for a while; the run goes on on the device and continues,
// once, in the same session.
#include "support/agents.hpp"
#include "support/collector_proc.hpp"
#include "support/fixtures.hpp"
#include "support/http_client.hpp"
#include "support/relay.hpp"
#include "support/spawn.hpp"

#include <catch2/catch.hpp>

#include <boost/json/serialize.hpp>

#include <algorithm>
#include <cmath>
#include <csignal>
#include <filesystem>
#include <thread>

using namespace std::chrono_literals;
namespace json = boost::json;
using test_support::collector_proc;
using test_support::relay;
using test_support::temp_dir;
using test_support::wait_for;

namespace {

// Samples per bucket of `width` over the session's span, every thread together.
std::vector<std::uint64_t> activity(collector_proc& c, const std::string& id, int width) {
    const auto t =
        c.get("/api/sessions/" + id + "/timeline?weight=samples&width=" + std::to_string(width));
    std::vector<std::uint64_t> sum(static_cast<std::size_t>(width), 0);
    for (const auto& lane : t.at("threads").as_array()) {
        const auto& a = lane.at("activity").as_array();
        for (std::size_t i = 0; i < a.size() && i < sum.size(); ++i)
            sum[i] += a[i].to_number<std::uint64_t>();
    }
    return sum;
}

// The run numbers in a session folder's chunk names (000007.s42.zst), in order.
std::vector<std::uint64_t> chunk_numbers(const std::filesystem::path& session) {
    std::vector<std::uint64_t> seqs;
    for (const auto& f : std::filesystem::directory_iterator(session / "chunks")) {
        const auto name = f.path().filename().string();
        if (const auto s = name.find(".s");
            s != std::string::npos && name.find(".tmp") == std::string::npos)
            seqs.push_back(std::stoull(name.substr(s + 2)));
    }
    std::sort(seqs.begin(), seqs.end());
    return seqs;
}

// No hole in an ended session's samples: every half second of its span but the first and the
// last holds samples of the busy demo, its outages' included.
void check_no_hole(collector_proc& c, const std::string& id, const json::value& ended) {
    const double span = ended.at("duration_sec").to_number<double>();
    const auto buckets = activity(c, id, static_cast<int>(std::ceil(span / 0.5)));
    std::string shown;
    for (const auto b : buckets)
        shown += std::to_string(b) + " ";
    INFO("samples per half second: " << shown);
    for (std::size_t i = 1; i + 1 < buckets.size(); ++i)
        CHECK(buckets[i] > 0);
}

// The one target's session once it holds samples: its id.
std::string running_session(collector_proc& c) {
    const auto first = wait_for(c, "/api/targets", 30s, [](const json::value& v) {
        return v.as_array().size() == 1 && v.as_array()[0].at("session_id").is_string();
    });
    REQUIRE(first.as_array().size() == 1);
    const std::string id(first.as_array()[0].at("session_id").as_string());
    wait_for(c, "/api/sessions/" + id, 20s,
             [](const json::value& v) { return v.at("samples").to_number<std::uint64_t>() > 50; });
    return id;
}

} // namespace

TEST_CASE("a link that drops mid-run loses no sample: the run goes on and resumes in its session",
          "[collector][integration][perf][resume]") {
    const auto flavour = test_support::each_agent();
    INFO(flavour);
    temp_dir dir;
    collector_proc coll(dir.path);
    relay link(coll.agent_port);
    auto demo = test_support::start_demo(60);
    auto agent = test_support::start_agent(
        flavour, {"--server", "127.0.0.1:" + std::to_string(link.port()), "--pid",
                  std::to_string(demo->pid()), "--duration", "1"});
    const std::string id = running_session(coll);
    const auto began = std::chrono::steady_clock::now(); // (its first sample is before this)

    // The link drops, and the device cannot get back in for 4 s.
    link.refuse_for(4s);
    link.reset();
    const auto down = std::chrono::steady_clock::now();
    // Back: the same session goes on, live.
    wait_for(coll, "/api/targets", 30s, [&](const json::value& v) {
        return link.relayed() >= 2 && v.as_array().size() == 1 &&
               v.as_array()[0].at("session_id").is_string();
    });
    CHECK(std::chrono::steady_clock::now() - down >= 4s);
    const auto back = coll.get("/api/targets");
    REQUIRE(back.as_array().size() == 1);
    CHECK(back.as_array()[0].at("session_id").as_string() == id);
    std::this_thread::sleep_for(3s); // live data after the backlog

    // The session spans the whole run: from before `began` to the stop (its last samples
    // within a second of it, however loaded the machine), the gap included.
    const double ran =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count();
    agent->signal(SIGTERM);
    REQUIRE(agent->wait(15s));
    const auto ended = wait_for(coll, "/api/sessions/" + id, 15s,
                                [](const json::value& v) { return !v.at("live").as_bool(); });
    INFO(json::serialize(ended));
    CHECK(test_support::session_folders(dir.path) == 1);
    REQUIRE(ended.as_object().contains("link_gaps"));
    const auto& gaps = ended.at("link_gaps").as_array();
    REQUIRE(gaps.size() == 1);
    const double gap =
        gaps[0].as_array()[1].to_number<double>() - gaps[0].as_array()[0].to_number<double>();
    CHECK(gap >= 3.5);

    CHECK(ran >= 7); // (4 s refused, 3 s after)
    CHECK(ended.at("duration_sec").to_number<double>() >= ran - 1.0);
    check_no_hole(coll, id, ended);
    demo->signal(SIGTERM);
}

TEST_CASE("a collector stopped or killed mid-run continues the run's session when it is back — "
          "each chunk stored once",
          "[collector][integration][perf][resume][long]") {
    const auto flavour = test_support::each_agent();
    INFO(flavour);
    temp_dir dir;
    auto coll = std::make_unique<collector_proc>(dir.path);
    relay link(coll->agent_port);
    auto demo = test_support::start_demo(90);
    auto agent = test_support::start_agent(
        flavour, {"--server", "127.0.0.1:" + std::to_string(link.port()), "--pid",
                  std::to_string(demo->pid()), "--duration", "1"});
    const std::string id = running_session(*coll);
    auto samples = coll->get("/api/sessions/" + id).at("samples").to_number<std::uint64_t>();

    // Stopped, then killed: each time a new collector on the same folder continues the session
    // once the device is back, from the chunks it has on disk.
    for (const int how : {SIGTERM, SIGKILL}) {
        INFO((how == SIGTERM ? "SIGTERM" : "SIGKILL"));
        coll->proc->signal(how);
        REQUIRE(coll->proc->wait(30s));
        std::this_thread::sleep_for(2s); // the device records on alone
        coll = std::make_unique<collector_proc>(dir.path);
        link.retarget(coll->agent_port);
        const auto back = wait_for(*coll, "/api/targets", 30s, [](const json::value& v) {
            return v.as_array().size() == 1 && v.as_array()[0].at("session_id").is_string();
        });
        REQUIRE(back.as_array().size() == 1);
        CHECK(back.as_array()[0].at("session_id").as_string() == id);
        const auto more = wait_for(*coll, "/api/sessions/" + id, 20s, [&](const json::value& v) {
            return v.at("live").as_bool() &&
                   v.at("samples").to_number<std::uint64_t>() > samples + 100;
        });
        CHECK(more.at("live").as_bool());
        samples = more.at("samples").to_number<std::uint64_t>();
    }

    agent->signal(SIGTERM);
    REQUIRE(agent->wait(15s));
    const auto ended = wait_for(*coll, "/api/sessions/" + id, 15s,
                                [](const json::value& v) { return !v.at("live").as_bool(); });
    INFO(json::serialize(ended));
    CHECK(test_support::session_folders(dir.path) == 1);
    REQUIRE(ended.as_object().contains("link_gaps"));
    CHECK(ended.at("link_gaps").as_array().size() == 2);

    // Exactly once: the run's chunks on disk are numbered 1, 2, 3, … with no number twice and
    // none missing (any before the collector first asked for numbers come first, unnumbered).
    // (How many depends on the machine's pace: at least one from each of the three
    // collectors' turns, and no more than the session counts.)
    const auto seqs = chunk_numbers(dir.path / id);
    REQUIRE(seqs.size() >= 3);
    CHECK(seqs.size() <= ended.at("chunks").to_number<std::uint64_t>());
    for (std::size_t i = 1; i < seqs.size(); ++i)
        CHECK(seqs[i] == seqs[i - 1] + 1);

    check_no_hole(*coll, id, ended); // across either restart
    demo->signal(SIGTERM);
}

TEST_CASE("an agent killed while its link is down sends what it spooled when it starts again",
          "[collector][integration][perf][resume]") {
    temp_dir dir;
    collector_proc coll(dir.path / "sessions");
    relay link(coll.agent_port);
    auto demo = test_support::start_demo(90);
    const std::vector<std::string> args{"--server",    "127.0.0.1:" + std::to_string(link.port()),
                                        "--pid",       std::to_string(demo->pid()),
                                        "--duration",  "1",
                                        "--spool-dir", (dir.path / "spool").string(),
                                        "--buffer-mb", "0"};
    auto agent = test_support::start_agent(test_support::agent_flavour::cpp, args);
    const std::string id = running_session(coll);

    // The link drops and stays down; the device spools what it records, then the agent dies.
    link.refuse_for(600s);
    link.reset();
    const auto spooled = [&] {
        std::size_t n = 0;
        for (const auto& f : std::filesystem::directory_iterator(dir.path / "spool"))
            n += f.path().extension() == ".chunk";
        return n;
    };
    const auto until = std::chrono::steady_clock::now() + 20s;
    while (spooled() < 3 && std::chrono::steady_clock::now() < until)
        std::this_thread::sleep_for(100ms);
    REQUIRE(spooled() >= 3);
    agent->signal(SIGKILL);
    REQUIRE(agent->wait(10s));
    // The last number it spooled (of the chunks the collector may or may not have had).
    std::uint64_t last_spooled = 0;
    for (const auto& f : std::filesystem::directory_iterator(dir.path / "spool"))
        if (f.path().extension() == ".chunk")
            last_spooled = std::max<std::uint64_t>(
                last_spooled, std::stoull(f.path().stem().extension().string().substr(1)));
    REQUIRE(last_spooled > 0);

    // Started again, the link back: the spooled chunks continue the run's session first, each
    // once: its chunk files are numbered 1, 2, … up to the last one spooled, none twice.
    link.refuse_for(0ms);
    agent = test_support::start_agent(test_support::agent_flavour::cpp, args);
    const auto numbers = [&] { return chunk_numbers(dir.path / "sessions" / id); };
    const auto until_sent = std::chrono::steady_clock::now() + 30s;
    while ((numbers().empty() || numbers().back() < last_spooled) &&
           std::chrono::steady_clock::now() < until_sent)
        std::this_thread::sleep_for(100ms);
    const auto got = numbers();
    REQUIRE_FALSE(got.empty());
    CHECK(got.back() == last_spooled);
    for (std::size_t i = 1; i < got.size(); ++i)
        CHECK(got[i] == got[i - 1] + 1);
    // The new start is a run of its own; once its chunks are stored the spool is empty.
    const auto two = wait_for(coll, "/api/sessions", 30s,
                              [](const json::value& v) { return v.as_array().size() == 2; });
    CHECK(two.as_array().size() == 2);
    const std::string old_run(coll.get("/api/sessions/" + id).at("run_id").as_string());
    const auto of_old_run = [&] {
        std::size_t n = 0;
        for (const auto& f : std::filesystem::directory_iterator(dir.path / "spool"))
            n += f.path().filename().string().rfind(old_run, 0) == 0;
        return n;
    };
    const auto drained = std::chrono::steady_clock::now() + 20s;
    while (of_old_run() > 0 && std::chrono::steady_clock::now() < drained)
        std::this_thread::sleep_for(100ms);
    CHECK(of_old_run() == 0);
    CHECK_THAT(agent->stderr_text(), Catch::Contains("the spool holds"));
    agent->signal(SIGTERM);
    REQUIRE(agent->wait(15s));
    demo->signal(SIGTERM);
}

TEST_CASE("a dialled --listen agent over TLS whose link drops is dialled again and its run goes on "
          "in its session",
          "[collector][integration][perf][resume][tls]") {
    const auto flavour = test_support::each_agent();
    INFO(flavour);
    temp_dir dir;
    collector_proc coll(dir.path / "sessions");
    const std::string code = "00112233445566778899aabbccddeeff";
    const auto key_file = (dir.path / "device-key.pem").string();
    if (flavour == test_support::agent_flavour::python) {
        // A device's Python cannot make a key: one made by the C++ agent is given to it.
        test_support::spawned maker(
            test_support::agent_bin(),
            {"--listen", "--bind", "127.0.0.1", "--port", "0", "--tls", "--tls-key", key_file});
        REQUIRE(maker.wait_for_stderr("this device's key: ", 10s));
    }
    auto agent = test_support::start_agent(flavour, {"--listen", "--bind", "127.0.0.1", "--port",
                                                     "0", "--token", code, "--tls", "--tls-key",
                                                     key_file, "--duration", "1"});
    const auto key = agent->wait_for_stderr("this device's key: ", 10s);
    REQUIRE(key);
    const std::string pin = key->substr(0, 71);
    const auto port = agent->wait_for_stderr("listening on 127.0.0.1:", 10s);
    REQUIRE(port);
    relay link(static_cast<std::uint16_t>(std::stoi(*port)));
    const auto dialled =
        test_support::http_call(coll.http_port, "POST", "/api/targets/connect",
                                R"({"host":"127.0.0.1","port":)" + std::to_string(link.port()) +
                                    R"(,"token":")" + code + R"(","pin":")" + pin + R"("})");
    INFO(dialled.body << "\n" << agent->stderr_text());
    REQUIRE(dialled.status == 200);
    const std::string target(boost::json::parse(dialled.body).at("id").as_string());
    auto demo = test_support::start_demo(60);
    REQUIRE(test_support::http_call(coll.http_port, "POST", "/api/targets/" + target + "/command",
                                    R"({"cmd":"start","args":{"pid":)" +
                                        std::to_string(demo->pid()) + "}}")
                .status == 200);
    const std::string id = running_session(coll);

    link.refuse_for(3s);
    link.reset();
    // Dialled again (a new target), with the same code and key: the same session goes on.
    const auto back = wait_for(coll, "/api/targets", 40s, [&](const json::value& v) {
        return link.relayed() >= 2 && v.as_array().size() == 1 &&
               v.as_array()[0].at("id").as_string() != target &&
               v.as_array()[0].at("session_id").is_string();
    });
    REQUIRE(back.as_array().size() == 1);
    CHECK(back.as_array()[0].at("session_id").as_string() == id);
    CHECK(back.as_array()[0].at("link").at("encrypted").as_bool());
    const std::string again(back.as_array()[0].at("id").as_string());
    std::this_thread::sleep_for(2s);
    REQUIRE(test_support::http_call(coll.http_port, "POST", "/api/targets/" + again + "/command",
                                    R"({"cmd":"stop"})")
                .status == 200);
    const auto ended = wait_for(coll, "/api/sessions/" + id, 15s,
                                [](const json::value& v) { return !v.at("live").as_bool(); });
    INFO(json::serialize(ended));
    CHECK(test_support::session_folders(dir.path / "sessions") == 1);
    REQUIRE(ended.as_object().contains("link_gaps"));
    CHECK(ended.at("link_gaps").as_array().size() == 1);
    check_no_hole(coll, id, ended);
    demo->signal(SIGTERM);
}

TEST_CASE("an agent whose run waits to resume meets a collector that never asks: after 10 s it "
          "sends what it kept as to an older collector",
          "[collector][integration][perf][resume]") {
    temp_dir dir;
    collector_proc coll(dir.path);
    relay link(coll.agent_port);
    auto demo = test_support::start_demo(60);
    auto agent =
        test_support::start_agent(test_support::agent_flavour::cpp,
                                  {"--server", "127.0.0.1:" + std::to_string(link.port()), "--pid",
                                   std::to_string(demo->pid()), "--duration", "1"});
    running_session(coll);
    // The link goes to a peer that says nothing: an older collector.
    test_support::listener older;
    link.retarget(older.port());
    link.reset();
    const int fd = older.accept(30s);
    REQUIRE(fd >= 0);
    test_support::framing_peer peer(fd);
    auto hello = test_support::read_hello(peer);
    REQUIRE(hello.run); // the run it kept, named
    // Nothing of it for 10 s after the hello (no pairing code is asked: from the hello on)...
    const auto asked_at = std::chrono::steady_clock::now();
    std::optional<protocol::frame> data;
    while (!data && std::chrono::steady_clock::now() - asked_at < 20s) {
        auto f = peer.next(500ms);
        if (f && (f->flag == protocol::frame_flag::zstd || f->flag == protocol::frame_flag::text ||
                  f->flag == protocol::frame_flag::sequenced))
            data = std::move(f);
        REQUIRE_FALSE(peer.closed());
    }
    REQUIRE(data);
    CHECK(std::chrono::steady_clock::now() - asked_at >= 9s);
    // ...then its chunks as flag 1, which any collector reads.
    CHECK(data->flag == protocol::frame_flag::zstd);
    CHECK(agent->wait_for_stderr("does not resume runs", 5s));
    demo->signal(SIGTERM);
}
