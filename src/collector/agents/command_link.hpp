// What the collector's workflows need of an agent's link, and nothing of its transport: ask a
// command and wait for the answer, know what the agent is doing, wait for it to change. The
// agent_link implements it over a socket; the tests drive the workflows (continuous.hpp) with
// a scripted one.
#pragma once

#include "protocol/messages.hpp"

#include <boost/asio/awaitable.hpp>
#include <boost/json/object.hpp>

#include <chrono>
#include <optional>
#include <string>
#include <string_view>

namespace collector::agents {

// How long a command may take: those that may probe perf (the first start, reprobe,
// verify_perf) take tens of seconds on slow devices and odd perf builds, a stop or pause as
// long as the agent may take to end a run; the rest 15 s.
std::chrono::milliseconds deadline_for(std::string_view cmd) noexcept;
// How long a user's start may take when it first stops a continuous run: both in turn.
inline std::chrono::milliseconds takeover_deadline() noexcept {
    return deadline_for(protocol::cmd::stop) + deadline_for(protocol::cmd::start);
}

class command_link {
public:
    virtual ~command_link() = default;

    // Sends a command and waits for its answer; a failure on timeout or close (`timeout`:
    // deadline_for(cmd) unless given). An answer that comes after the deadline still updates
    // the agent's state. `continuous`: a start of continuous profiling (--continuous).
    virtual boost::asio::awaitable<protocol::command_response>
    command(std::string cmd, boost::json::object args,
            std::optional<std::chrono::milliseconds> timeout = std::nullopt,
            bool continuous = false) = 0;

    virtual protocol::agent_state state() const noexcept = 0;
    virtual bool closed() const noexcept = 0;
    // Profiling because of --continuous (a user's start stops that run first).
    virtual bool in_continuous_run() const noexcept = 0;
    // Waits until the agent next goes idle (its run ended), the link closes, or `timeout`
    // passes.
    virtual boost::asio::awaitable<void> went_idle(std::chrono::milliseconds timeout) = 0;
    // Waits (at most `timeout`) until the agent has said hello and, when a pairing code is
    // sent, accepted it: true then; false when it closed, refused or took too long.
    virtual boost::asio::awaitable<bool> ready(std::chrono::steady_clock::duration timeout) = 0;
    // A line about this link in the collector's log.
    virtual void say(const std::string& line) const = 0;
};

} // namespace collector::agents
