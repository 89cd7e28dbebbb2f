// The agent side's workflows, without sockets: who is admitted at accept, continuous profiling
// and a user's start taking its place (against a scripted agent), the kernel symbols' turns.
#include "collector/agents/admission.hpp"
#include "collector/agents/continuous.hpp"
#include "collector/agents/kernel_turns.hpp"
#include "collector/stopping.hpp"
#include "protocol/use_nothrow.hpp"

#include <catch2/catch.hpp>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>

#include <functional>
#include <vector>

using namespace collector::agents;
using namespace std::chrono_literals;
namespace asio = boost::asio;
namespace json = boost::json;
using protocol::agent_state;
using protocol::command_response;
using when_full = collector::connection_budget::when_full;

TEST_CASE("admission: 20 connections from an address at once then 2 a second and each address "
          "has its own bucket",
          "[agents][admission]") {
    token_buckets b(20, 2);
    const auto t0 = clock::now();
    for (int i = 0; i < 20; ++i)
        REQUIRE(b.check("10.0.0.1", t0) == token_buckets::verdict::admit);
    CHECK(b.check("10.0.0.1", t0) == token_buckets::verdict::refuse_first);
    CHECK(b.check("10.0.0.1", t0) == token_buckets::verdict::refuse);
    CHECK(b.check("10.0.0.2", t0) == token_buckets::verdict::admit);
    // Half a second refills one token: one more, then refused again (said again: a new run).
    CHECK(b.check("10.0.0.1", t0 + 500ms) == token_buckets::verdict::admit);
    CHECK(b.check("10.0.0.1", t0 + 500ms) == token_buckets::verdict::refuse_first);
    // Ten seconds refill the whole burst, no more.
    for (int i = 0; i < 20; ++i)
        REQUIRE(b.check("10.0.0.1", t0 + 20s) == token_buckets::verdict::admit);
    CHECK(b.check("10.0.0.1", t0 + 20s) == token_buckets::verdict::refuse_first);
}

TEST_CASE("admission: a flood from ever new addresses keeps the buckets bounded",
          "[agents][admission]") {
    token_buckets b(20, 2);
    const auto t0 = clock::now();
    for (int i = 0; i < 3 * static_cast<int>(token_buckets::max_addresses); ++i)
        REQUIRE(b.check("10." + std::to_string(i >> 16) + "." + std::to_string((i >> 8) & 255) +
                            "." + std::to_string(i & 255),
                        t0) == token_buckets::verdict::admit);
    CHECK(b.addresses() <= token_buckets::max_addresses);
}

TEST_CASE("admission: past its address's limit a connection is closed or where agents enroll "
          "admitted on probation up to a second limit and each limit is said once",
          "[agents][admission]") {
    const auto t0 = clock::now();
    SECTION("no enrollment") {
        admission gate(false);
        for (int i = 0; i < 20; ++i) {
            const auto v = gate.screen("192.0.2.7", t0);
            REQUIRE(v.when_full == when_full::evict_oldest);
            REQUIRE(!v.probation);
            REQUIRE(v.log_lines.empty());
        }
        auto v = gate.screen("192.0.2.7", t0);
        CHECK(!v.when_full);
        REQUIRE(v.log_lines.size() == 1);
        CHECK(v.log_lines[0].find("refusing them for a while") != std::string::npos);
        v = gate.screen("192.0.2.7", t0);
        CHECK(!v.when_full);
        CHECK(v.log_lines.empty());
    }
    SECTION("agents enroll") {
        admission gate(true);
        for (int i = 0; i < 20; ++i)
            REQUIRE(gate.screen("192.0.2.7", t0).when_full == when_full::evict_oldest);
        auto v = gate.screen("192.0.2.7", t0);
        CHECK(v.probation);
        CHECK(v.when_full == when_full::refuse); // never takes another's slot
        REQUIRE(v.log_lines.size() == 1);
        CHECK(v.log_lines[0].find("enrollment token") != std::string::npos);
        for (int i = 1; i < 256; ++i) {
            v = gate.screen("192.0.2.7", t0);
            REQUIRE(v.probation);
            REQUIRE(v.when_full == when_full::refuse);
            REQUIRE(v.log_lines.empty());
        }
        v = gate.screen("192.0.2.7", t0);
        CHECK(!v.when_full);
        REQUIRE(v.log_lines.size() == 1);
        CHECK(v.log_lines[0].find("even for enrolled agents") != std::string::npos);
    }
}

TEST_CASE("admission: an enrollment token names its label and a wrong or missing one nothing",
          "[agents][admission]") {
    const std::vector<std::pair<std::string, std::string>> tokens{
        {"aaaaaaaaaaaaaaaaaaaa", "lab-a"}, {"bbbbbbbbbbbbbbbbbbbb", "lab-b"}};
    CHECK(enrolled_as(tokens, "bbbbbbbbbbbbbbbbbbbb") == std::optional<std::string>("lab-b"));
    CHECK(enrolled_as(tokens, "aaaaaaaaaaaaaaaaaaaa") == std::optional<std::string>("lab-a"));
    CHECK(!enrolled_as(tokens, "bbbbbbbbbbbbbbbbbbbc"));
    CHECK(!enrolled_as(tokens, "bbbbbbbbbbbbbbbbbbb"));
    CHECK(!enrolled_as(tokens, std::nullopt));
}

namespace {

// An agent as the collector sees it through its link, played by a script: `agent` answers each
// command (and may change what the agent is doing); every command asked is kept.
class scripted_link final : public command_link {
public:
    struct asked {
        std::string cmd;
        json::object args;
        std::chrono::milliseconds timeout;
        bool continuous;
    };

    explicit scripted_link(asio::io_context& io)
        : idle_(io) {}

    std::function<command_response(scripted_link&, const asked&)> agent;
    std::vector<asked> log;
    mutable std::vector<std::string> said;
    agent_state now = agent_state::idle;
    bool continuous_run = false;
    bool is_closed = false;
    bool is_ready = true;

    asio::awaitable<command_response> command(std::string cmd, json::object args,
                                              std::optional<std::chrono::milliseconds> timeout,
                                              bool continuous) override {
        log.push_back({cmd, args, timeout.value_or(deadline_for(cmd)), continuous});
        co_return agent(*this, log.back());
    }
    agent_state state() const noexcept override { return now; }
    bool closed() const noexcept override { return is_closed; }
    bool in_continuous_run() const noexcept override { return continuous_run; }
    asio::awaitable<void> went_idle(std::chrono::milliseconds timeout) override {
        if (is_closed)
            co_return;
        idle_.expires_after(timeout);
        co_await idle_.async_wait(protocol::use_nothrow);
    }
    asio::awaitable<bool> ready(std::chrono::steady_clock::duration) override {
        co_return is_ready && !is_closed;
    }
    void say(const std::string& line) const override { said.push_back(line); }

    // The run ended (stopped, or the target exited).
    void go_idle() {
        now = agent_state::idle;
        continuous_run = false;
        idle_.cancel();
    }
    void close() {
        is_closed = true;
        idle_.cancel();
    }

private:
    asio::steady_timer idle_;
};

// An agent that starts when idle and refuses a second run, stops when asked.
command_response plain_agent(scripted_link& l, const scripted_link::asked& a) {
    if (a.cmd == protocol::cmd::start) {
        if (l.now == agent_state::profiling)
            return command_response::failure("c", "already profiling");
        l.now = agent_state::profiling;
        l.continuous_run = a.continuous;
        return command_response::success("c", {{"state", "profiling"}});
    }
    if (a.cmd == protocol::cmd::stop) {
        l.go_idle();
        return command_response::success("c", {{"state", "idle"}});
    }
    return command_response::success("c");
}

template <class T>
T run(asio::io_context& io, asio::awaitable<T> work) {
    std::optional<T> out;
    asio::co_spawn(io, std::move(work), [&](std::exception_ptr e, T v) {
        if (e)
            std::rethrow_exception(e);
        out = std::move(v);
    });
    io.run();
    REQUIRE(out);
    return std::move(*out);
}

} // namespace

TEST_CASE("a user's start takes the place of a continuous run: the run is stopped undrained "
          "then the start is sent and all within the takeover deadline",
          "[agents][continuous]") {
    asio::io_context io;
    auto link = std::make_shared<scripted_link>(io);
    link->agent = plain_agent;
    link->now = agent_state::profiling;
    link->continuous_run = true;
    const auto r = run(io, run_command(link, "start", {{"pid", 42}}));
    CHECK(r.ok);
    REQUIRE(link->log.size() == 2);
    CHECK(link->log[0].cmd == "stop");
    CHECK(link->log[0].args.at("drain") == false);
    CHECK(link->log[0].timeout <= deadline_for("stop"));
    CHECK(link->log[1].cmd == "start");
    CHECK(link->log[1].args.at("pid") == 42);
    CHECK(!link->log[1].continuous);
    CHECK(link->log[0].timeout + link->log[1].timeout <= takeover_deadline());
    CHECK(!link->in_continuous_run());
}

TEST_CASE("a user's start that a continuous start beat to the agent stops that run and starts "
          "again",
          "[agents][continuous]") {
    asio::io_context io;
    auto link = std::make_shared<scripted_link>(io);
    // The keeper's start reached the agent first: the user's is answered "already profiling"
    // while the link now says continuous.
    bool raced = false;
    link->agent = [&raced](scripted_link& l, const scripted_link::asked& a) {
        if (a.cmd == "start" && !a.continuous && !std::exchange(raced, true)) {
            l.now = agent_state::profiling;
            l.continuous_run = true;
        }
        return plain_agent(l, a);
    };
    const auto r = run(io, run_command(link, "start", {{"pid", 7}}));
    CHECK(r.ok);
    REQUIRE(link->log.size() == 3);
    CHECK(link->log[0].cmd == "start");
    CHECK(link->log[1].cmd == "stop");
    CHECK(link->log[1].args.at("drain") == false);
    CHECK(link->log[2].cmd == "start");
    CHECK(link->log[2].args.at("pid") == 7);
    CHECK(link->now == agent_state::profiling);
    CHECK(!link->in_continuous_run());
}

TEST_CASE("a user's start against a user's run and any other command are sent as they are",
          "[agents][continuous]") {
    asio::io_context io;
    auto link = std::make_shared<scripted_link>(io);
    link->agent = plain_agent;
    link->now = agent_state::profiling; // a user's run: not taken over
    auto r = run(io, run_command(link, "start", {}));
    CHECK(!r.ok);
    CHECK(r.error == "already profiling");
    REQUIRE(link->log.size() == 1);
    io.restart();
    link->continuous_run = true; // a pause during a continuous run stops nothing
    r = run(io, run_command(link, "pause", {}));
    CHECK(r.ok);
    REQUIRE(link->log.size() == 2);
    CHECK(link->log[1].cmd == "pause");
    CHECK(link->log[1].timeout == deadline_for("pause"));
}

TEST_CASE("continuous profiling starts the whole system whenever the agent is idle and again "
          "after a user's run ends",
          "[agents][continuous]") {
    asio::io_context io;
    auto link = std::make_shared<scripted_link>(io);
    asio::steady_timer user(io);
    int starts = 0;
    link->agent = [&](scripted_link& l, const scripted_link::asked& a) {
        auto r = plain_agent(l, a);
        if (a.cmd == "start" && ++starts == 1) {
            // A user stops it a moment later; the keeper starts it again.
            user.expires_after(5ms);
            user.async_wait([&l](boost::system::error_code) { l.go_idle(); });
        } else if (a.cmd == "start") {
            l.close();
        }
        return r;
    };
    keeper_settings s;
    s.hz = 49;
    s.chunk_s = 5;
    s.resume_pause = 10ms;
    bool done = false;
    asio::co_spawn(io, keep_profiling(link, s), [&](std::exception_ptr e) {
        if (e)
            std::rethrow_exception(e);
        done = true;
    });
    io.run();
    CHECK(done);
    REQUIRE(link->log.size() == 2);
    for (const auto& a : link->log) {
        CHECK(a.cmd == "start");
        CHECK(a.continuous);
        CHECK(a.args.at("pid").is_null());
        CHECK(a.args.at("frequency") == 49);
        CHECK(a.args.at("duration") == 5);
    }
    CHECK(link->said.empty());
}

TEST_CASE("continuous profiling asks again after a refusal and says it once and a link that "
          "never becomes ready is left alone",
          "[agents][continuous]") {
    asio::io_context io;
    auto link = std::make_shared<scripted_link>(io);
    link->agent = [](scripted_link& l, const scripted_link::asked& a) {
        if (l.log.size() == 3)
            l.close();
        (void)a;
        return command_response::failure("c", "perf is not permitted");
    };
    keeper_settings s;
    s.hz = 49;
    s.refused_pause = 5ms;
    s.resume_pause = 1ms;
    asio::co_spawn(io, keep_profiling(link, s), asio::detached);
    io.run();
    CHECK(link->log.size() == 3);
    REQUIRE(link->said.size() == 1);
    CHECK(link->said[0].find("perf is not permitted") != std::string::npos);

    asio::io_context io2;
    auto never = std::make_shared<scripted_link>(io2);
    never->is_ready = false;
    never->is_closed = true;
    never->agent = plain_agent;
    asio::co_spawn(io2, keep_profiling(never, s), asio::detached);
    io2.run();
    CHECK(never->log.empty());
}

TEST_CASE("kernel symbols: one agent's turn at a time and the others in the order they asked "
          "while one that gives up passes its turn on",
          "[agents]") {
    asio::io_context io;
    collector::stop_registry stops;
    kernel_turns turns;
    std::vector<std::string> order;
    bool second_gives_up = false;
    const auto agent = [&](std::string name, std::function<bool()> give_up,
                           std::chrono::milliseconds hold) -> asio::awaitable<void> {
        auto turn = co_await turns.take(io.get_executor(), give_up, stops);
        if (!turn) {
            order.push_back(name + " gave up");
            co_return;
        }
        order.push_back(name);
        CHECK(turns.busy());
        asio::steady_timer t(io, hold);
        co_await t.async_wait(protocol::use_nothrow);
    };
    asio::co_spawn(io,
                   agent(
                       "a", [] { return false; }, 20ms),
                   asio::detached);
    asio::co_spawn(io,
                   agent(
                       "b", [&] { return second_gives_up; }, 1ms),
                   asio::detached);
    asio::co_spawn(io,
                   agent(
                       "c", [] { return false; }, 1ms),
                   asio::detached);
    asio::steady_timer give_up(io, 5ms);
    give_up.async_wait([&](boost::system::error_code) { second_gives_up = true; });
    io.run();
    CHECK(order == std::vector<std::string>{"a", "b gave up", "c"});
    CHECK(!turns.busy());
}
