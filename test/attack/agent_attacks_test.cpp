// Attacks on an agent, as a hostile client on the device's network, or a man in the middle of
// its link, would make them; each runs against both agent flavours.
#include "protocol/digest.hpp"
#include "protocol/tls.hpp"
#include "protocol/update.hpp"
#include "support/agents.hpp"
#include "support/collector_proc.hpp"
#include "support/fixtures.hpp"
#include "support/framing_peer.hpp"
#include "support/spawn.hpp"

#include <catch2/catch.hpp>

#include <boost/json/parse.hpp>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include <poll.h>
#include <sys/socket.h>

using namespace std::chrono_literals;
using protocol::frame_flag;
using test_support::each_agent;
using test_support::error_of;
using test_support::framing_peer;
using test_support::ok;
using test_support::read_hello;
using test_support::spawned;
using test_support::start_agent;
namespace fs = std::filesystem;

TEST_CASE("agent --listen before pairing: one connection at a time, few answers, failures back "
          "off across connections, weak codes refused",
          "[agent][integration][attack]") {
    const auto flavour = each_agent();
    INFO(flavour);
    auto weak = start_agent(flavour, {"--listen", "--port", "0", "--token", "1234"});
    CHECK(weak->wait(10s) == 2);
    CHECK_THAT(weak->stderr_text(), Catch::Contains("too easy to guess"));

    const std::string code = "correct-horse-battery-staple";
    auto agent =
        start_agent(flavour, {"--listen", "--bind", "127.0.0.1", "--port", "0", "--token", code});
    const auto port_text = agent->wait_for_stderr("listening on 127.0.0.1:", 5s);
    REQUIRE(port_text);
    const auto port = static_cast<std::uint16_t>(std::stoi(*port_text));

    // A client that sends commands without the code and never reads: a few answers, then the
    // connection is closed, before the answers could pile up.
    auto flood = framing_peer::connect(port);
    REQUIRE(flood);
    read_hello(*flood);
    // While it is connected, a second connection waits: no hello yet.
    auto waiting = framing_peer::connect(port);
    REQUIRE(waiting);
    CHECK_FALSE(waiting->next(1500ms));
    CHECK_FALSE(waiting->closed());
    std::string burst;
    for (int i = 0; i < 1000; ++i)
        burst += protocol::encode_frame(frame_flag::command,
                                        R"({"id":")" + std::to_string(i) + R"(","cmd":"status"})");
    flood->send_raw(burst);
    int answers = 0;
    while (auto f = flood->next(3s))
        answers += f->flag == frame_flag::response;
    CHECK(flood->closed());
    CHECK(answers <= 3);
    // Its turn came: the waiting connection gets its hello now.
    CHECK(read_hello(*waiting).auth == "token");

    // Three wrong codes close that connection; on a new connection the attempts go on where
    // they left off (each failure doubles the wait for the next), and the log counts them all.
    CHECK(error_of(waiting->command("auth", R"({"token":"wrong-code-number-one"})")) ==
          "auth failed");
    CHECK(error_of(waiting->command("auth", R"({"token":"wrong-code-number-two"})")) ==
          "auth failed");
    CHECK(error_of(waiting->command("auth", R"({"token":"wrong-code-number-three"})")) ==
          "auth failed");
    CHECK_FALSE(waiting->next(3s));
    CHECK(waiting->closed());
    auto next = framing_peer::connect(port);
    REQUIRE(next);
    read_hello(*next);
    CHECK(error_of(next->command("auth", R"({"token":"wrong-code-number-four"})")) ==
          "auth failed");
    // The fourth failure in a row set the next turn 0.8 s away.
    const auto asked = std::chrono::steady_clock::now();
    CHECK(error_of(next->command("auth", R"({"token":"wrong-code-number-five"})")) ==
          "auth failed");
    CHECK(std::chrono::steady_clock::now() - asked >= 600ms);
    CHECK_THAT(agent->stderr_text(), Catch::Contains("5 in a row"));
    CHECK(ok(next->command("auth", R"({"token":")" + code + R"("})", 15s)));

    // Commands are checked strictly once paired.
    CHECK(error_of(next->command("verify_pid", R"({"pid":"1; rm -rf /"})")) ==
          "pid must be an integer from 1 to 4194304");
    CHECK(error_of(next->command("verify_pid", R"({"pid":1099511627776})")) ==
          "pid must be an integer from 1 to 4194304");
    CHECK(error_of(next->command("verify_pid", R"({"pid":12.5})")) ==
          "pid must be an integer from 1 to 4194304");
    CHECK(error_of(next->command("configure", R"({"frequency":"99"})")) ==
          "frequency must be an integer from 1 to 100000");
    CHECK(error_of(next->command("configure_metrics", R"({"interval":-1})")) ==
          "interval must be an integer from 1 to 60000");
    CHECK(error_of(next->command("start", R"({"pid":"1"})")) ==
          "pid must be an integer from 1 to 4194304");
    CHECK(error_of(next->command("start", R"({"pid":1,"events":"cpu-clock"})")) ==
          "events must be an array of event names");
    // Refused, saying what the device samples instead — or, when its probe found nothing to
    // sample (every perf run past its 8 s on a machine this loaded), why.
    CHECK_THAT(error_of(next->command("start", R"({"pid":1,"events":["no-such-event"]})", 60s)),
               Catch::StartsWith("unknown event: no-such-event (this device samples ") ||
                   Catch::StartsWith("unknown event: no-such-event; this perf samples no event "
                                     "(cannot sample any event ("));
    CHECK(next->command("status")->fields.at("state").as_string() == "idle");
}

namespace {

// A man in the middle between a collector that dials it (the Live Debug wizard) and a listening
// agent: it passes every frame on whole, and knows the pairing code, as anyone who once saw a
// pairing on a plain link does. Once the collector has paired, it adds commands of its own
// (their answers are kept from the collector) and may swap the bytes of an update the collector
// pushes for its own.
class relay {
public:
    explicit relay(std::uint16_t agent_port)
        : agent_port_(agent_port)
        , thread_([this] { run(); }) {}
    ~relay() {
        stop_ = true;
        thread_.join();
    }
    std::uint16_t port() const { return front_.port(); }
    bool paired() const { return paired_; }
    // Replaces what an update_data of the collector's carries with these bytes, piece by piece.
    void swap_update_for(std::string bytes) {
        std::lock_guard lock(mutex_);
        swap_ = std::move(bytes);
    }

    // A command of the relay's own to the agent, and its answer.
    std::optional<protocol::command_response> command(const std::string& cmd,
                                                      const std::string& args_json) {
        const std::string id = "mitm-" + std::to_string(++next_id_);
        {
            std::lock_guard lock(mutex_);
            inject_.push_back(protocol::encode_frame(frame_flag::command,
                                                     R"({"id":")" + id + R"(","cmd":")" + cmd +
                                                         R"(","args":)" + args_json + "}"));
        }
        for (int i = 0; i < 600; ++i) {
            {
                std::lock_guard lock(mutex_);
                if (const auto it = answers_.find(id); it != answers_.end())
                    return it->second;
            }
            std::this_thread::sleep_for(50ms);
        }
        return std::nullopt;
    }

private:
    static void send_all(int fd, std::string_view bytes) {
        while (!bytes.empty()) {
            const ssize_t n = ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
            if (n <= 0)
                return;
            bytes.remove_prefix(static_cast<std::size_t>(n));
        }
    }

    // The collector's frame as the agent gets it: an update's bytes swapped when asked.
    std::string to_agent(const protocol::frame& f) {
        auto req = protocol::parse_command_request(f.payload);
        if (!req)
            return protocol::encode_frame(f.flag, f.payload);
        if (req->cmd == "auth")
            auth_id_ = req->id;
        std::lock_guard lock(mutex_);
        if (req->cmd == "update_data" && !swap_.empty()) {
            const auto offset = static_cast<std::size_t>(req->args.at("offset").as_int64());
            const auto piece =
                protocol::base64_decode(req->args.at("data").as_string()).value_or("").size();
            req->args["data"] = protocol::base64_encode(
                std::string_view(swap_).substr(std::min(offset, swap_.size()), piece));
        }
        return protocol::encode_frame(f.flag, protocol::serialize(*req));
    }

    // The agent's frame as the collector gets it (nothing, for an answer to the relay).
    std::optional<std::string> to_collector(const protocol::frame& f) {
        if (auto reply = protocol::parse_agent_reply(f.payload);
            reply && f.flag == frame_flag::response)
            if (auto* r = std::get_if<protocol::command_response>(&*reply)) {
                if (r->id == auth_id_ && r->ok)
                    paired_ = true;
                if (r->id.rfind("mitm-", 0) == 0) {
                    std::lock_guard lock(mutex_);
                    answers_[r->id] = *r;
                    return std::nullopt;
                }
            }
        return protocol::encode_frame(f.flag, f.payload);
    }

    void run() {
        int collector = -1;
        while (collector < 0 && !stop_)
            collector = front_.accept(200ms);
        const int agent = collector < 0 ? -1 : test_support::connect_loopback(agent_port_);
        protocol::frame_decoder from_collector(protocol::agent_max_frame);
        protocol::frame_decoder from_agent(protocol::collector_max_frame);
        char buf[65536];
        while (!stop_ && collector >= 0 && agent >= 0) {
            {
                std::lock_guard lock(mutex_);
                for (const auto& bytes : inject_)
                    send_all(agent, bytes);
                inject_.clear();
            }
            pollfd fds[2] = {{collector, POLLIN, 0}, {agent, POLLIN, 0}};
            if (::poll(fds, 2, 50) < 0)
                break;
            bool closed = false;
            for (int i = 0; i < 2; ++i) {
                if (!(fds[i].revents & (POLLIN | POLLHUP | POLLERR)))
                    continue;
                const ssize_t n = ::recv(fds[i].fd, buf, sizeof buf, 0);
                if (n <= 0) {
                    closed = true;
                    continue;
                }
                auto& decoder = i == 0 ? from_collector : from_agent;
                decoder.feed(std::string_view(buf, static_cast<std::size_t>(n)));
                for (;;) {
                    auto next = decoder.next();
                    if (!next || !*next)
                        break;
                    if (i == 0)
                        send_all(agent, to_agent(**next));
                    else if (auto out = to_collector(**next))
                        send_all(collector, *out);
                }
            }
            if (closed)
                break;
        }
        if (collector >= 0)
            ::close(collector);
        if (agent >= 0)
            ::close(agent);
    }

    std::uint16_t agent_port_;
    test_support::listener front_;
    std::atomic<bool> stop_{false}, paired_{false};
    std::string auth_id_;
    std::mutex mutex_;
    std::vector<std::string> inject_;
    std::map<std::string, protocol::command_response> answers_;
    std::string swap_;
    std::atomic<int> next_id_{0};
    std::thread thread_;
};

} // namespace

TEST_CASE("a man in the middle who knows the pairing code gets nothing run on the device",
          "[agent][integration][attack][update]") {
    const auto flavour = each_agent();
    INFO(flavour);
    const bool python = flavour == test_support::agent_flavour::python;
    const std::string code = "00112233445566778899aabbccddeeff";
    test_support::temp_dir dir;
    // The collector's update key (its private half stays there); the agent has the public one.
    const auto key_file = (dir.path / "update.key").string();
    const auto fleet_key =
        std::get<protocol::tls::signing_key>(protocol::tls::load_signing_key(key_file, true));
    const auto guessed_key = std::get<protocol::tls::signing_key>(
        protocol::tls::load_signing_key(dir.path / "guessed.key", true));
    // The agent as installed on the device (a copy: nothing may replace the build's own).
    const fs::path exe = dir.path / (python ? "perfwire_agent.py" : "perfwire-agent");
    fs::copy_file(python ? PERFWIRE_PYTHON_AGENT : test_support::agent_bin(), exe);
    const std::string installed = test_support::file_bytes(exe);
    // What the man in the middle wants run: it leaves a marker when it runs.
    const fs::path marker = dir.path / "the relay build ran";
    std::string marking = python ? "open('" + marker.string() + "', 'w').write('ran')\n"
                                 : "#!/bin/sh\necho ran > '" + marker.string() + "'\n";
    // The collector's later build for this agent: a real push goes through the relay.
    const fs::path dist = dir.path / "dist";
    fs::create_directories(dist);
    const std::string arch = python ? "python" : "x86_64";
    const std::string name = "perfwire-agent-linux-" + arch;
    std::string later(64 << 10, '#');
    later.replace(0, 40,
                  python ? "print('perfwire-agent " PERFWIRE_VERSION ".1')\n"
                         : "#!/bin/sh\necho 'perfwire-agent " PERFWIRE_VERSION ".1'\n");
    later.resize(64 << 10, '#');
    std::ofstream(dist / name, std::ios::binary) << later;
    std::ofstream(dist / (name + ".sha256")) << protocol::sha256_hex(later) << "\n";
    std::ofstream(dist / (name + ".version")) << PERFWIRE_VERSION ".1\n";
    marking.resize(later.size(), python ? ' ' : '#');

    test_support::collector_proc coll(
        dir.path / "sessions", {"--agents-dir", dist.string(), "--agent-update-key", key_file});
    // The agent listening on the device, with `flags` besides its pairing code; its port.
    const auto listening = [&](std::vector<std::string> flags) {
        flags.insert(flags.begin(),
                     {"--listen", "--bind", "127.0.0.1", "--port", "0", "--token", code});
        if (python)
            flags.insert(flags.begin(), exe.string());
        return std::make_unique<spawned>(python ? PERFWIRE_PYTHON : exe.string(), flags);
    };
    const auto port_of = [](spawned& a) {
        const auto port = a.wait_for_stderr("listening on 127.0.0.1:", 10s);
        REQUIRE(port);
        return static_cast<std::uint16_t>(std::stoi(*port));
    };
    // The collector dials the agent through `r`, as the wizard does; the target's id.
    const auto dial_through = [&](relay& r) {
        const auto dialled =
            test_support::http_call(coll.http_port, "POST", "/api/targets/connect",
                                    R"({"host":"127.0.0.1","port":)" + std::to_string(r.port()) +
                                        R"(,"token":")" + code + R"("})");
        INFO(dialled.body);
        REQUIRE(dialled.status == 200);
        REQUIRE(r.paired());
        return std::string(boost::json::parse(dialled.body).at("id").as_string());
    };

    auto agent = listening({"--update-pubkey", fleet_key.public_key});
    relay mitm(port_of(*agent));
    const std::string id = dial_through(mitm);

    // Its own build, offered unsigned, signed with a key it guessed, or under the signature of
    // the collector's build: refused at the offer; the pieces and the apply find nothing.
    const std::string sum = protocol::sha256_hex(marking);
    const auto offer_json = [&](const std::string& signature, const std::string& sha256) {
        return R"({"version":")" PERFWIRE_VERSION R"(.1","arch":")" + arch + R"(","size":)" +
               std::to_string(marking.size()) + R"(,"sha256":")" + sha256 + R"(","signature":")" +
               signature + R"("})";
    };
    protocol::update_offer guessed{PERFWIRE_VERSION ".1", arch, sum, {}, marking.size()};
    CHECK_THAT(error_of(mitm.command("update", offer_json("", sum))), Catch::Contains("signed"));
    CHECK_THAT(error_of(mitm.command(
                   "update", offer_json(protocol::tls::sign(guessed_key,
                                                            protocol::update_signed_text(guessed)),
                                        sum))),
               Catch::Contains("bad signature"));
    protocol::update_offer real{
        PERFWIRE_VERSION ".1", arch, protocol::sha256_hex(later), {}, later.size()};
    const std::string real_signature =
        protocol::tls::sign(fleet_key, protocol::update_signed_text(real));
    CHECK_THAT(error_of(mitm.command("update", offer_json(real_signature, sum))),
               Catch::Contains("bad signature"));
    CHECK_THAT(
        error_of(mitm.command("update_data", R"({"offset":0,"data":")" +
                                                 protocol::base64_encode(marking) + R"("})")),
        Catch::Contains("no update offered"));
    CHECK_THAT(error_of(mitm.command("update_apply", "{}")), Catch::Contains("no update offered"));

    // The collector pushes its signed build; the relay swaps the bytes on the way: the agent
    // finds they are not the signed ones and runs nothing.
    mitm.swap_update_for(marking);
    const auto pushed =
        test_support::http_call(coll.http_port, "POST", "/api/targets/" + id + "/update", "{}");
    INFO(pushed.body);
    CHECK(pushed.status == 409);
    CHECK_THAT(pushed.body, Catch::Contains("checksum mismatch"));

    CHECK_FALSE(fs::exists(marker));
    CHECK(test_support::file_bytes(exe) == installed);
    CHECK_FALSE(agent->wait(0ms)); // the agent runs on, as it was
    CHECK(ok(mitm.command("ping", "{}")));
    CHECK_THAT(agent->stderr_text(), !Catch::Contains("updated to"));

    // An agent given no key (the default) takes no update at all: the relay's whole push,
    // offer, pieces and apply, runs nothing.
    auto keyless = listening({});
    relay second(port_of(*keyless));
    dial_through(second);
    CHECK_THAT(error_of(second.command("update", offer_json("", sum))),
               Catch::Contains("--update-pubkey"));
    CHECK_THAT(
        error_of(second.command("update_data", R"({"offset":0,"data":")" +
                                                   protocol::base64_encode(marking) + R"("})")),
        Catch::Contains("no update offered"));
    CHECK_THAT(error_of(second.command("update_apply", "{}")),
               Catch::Contains("no update offered"));
    CHECK_FALSE(fs::exists(marker));
    CHECK(test_support::file_bytes(exe) == installed);
    CHECK_FALSE(keyless->wait(0ms));
}
