#include "collector/agents/continuous.hpp"

#include <algorithm>

namespace asio = boost::asio;

namespace collector::agents {
namespace json = boost::json;
using protocol::agent_state;
using protocol::command_response;

asio::awaitable<void> keep_profiling(std::shared_ptr<command_link> link, keeper_settings s) {
    if (!s.hz)
        co_return;
    while (!co_await link->ready(s.ready_wait)) // (a slow pairing: as long as it takes)
        if (link->closed())
            co_return;
    std::string refused; // the last refusal, logged once
    while (!link->closed()) {
        if (link->state() == agent_state::idle) {
            // The whole system, at a low rate, in chunks of a few seconds; the agent's own
            // events and call-graph mode (what its probe found works).
            json::object args;
            args["pid"] = nullptr;
            args["frequency"] = s.hz;
            args["duration"] = s.chunk_s;
            std::string start(protocol::cmd::start); // (a local: GCC 12 and co_await)
            const auto r =
                co_await link->command(std::move(start), std::move(args), std::nullopt, true);
            if (!r.ok && !link->closed() && r.error != "already profiling" && r.error != refused) {
                refused = r.error;
                link->say("continuous profiling: the agent refused to start (" + r.error +
                          "); asking again every minute");
            } else if (r.ok) {
                refused.clear();
            }
        }
        if (link->closed())
            break;
        // Until the agent goes idle (then a moment, so that a user's run that ended may be
        // followed by theirs), or a while after a refusal.
        const auto until_idle = link->state() == agent_state::idle
                                    ? s.refused_pause
                                    : std::chrono::milliseconds(std::chrono::hours(24));
        co_await link->went_idle(until_idle);
        if (link->closed())
            break;
        co_await link->went_idle(s.resume_pause);
    }
}

asio::awaitable<command_response> run_command(std::shared_ptr<command_link> link, std::string name,
                                              json::object args) {
    const auto until = std::chrono::steady_clock::now() + takeover_deadline();
    const auto left = [until](std::string_view command) {
        const auto now = std::chrono::steady_clock::now();
        return std::chrono::milliseconds(std::clamp<std::chrono::milliseconds::rep>(
            std::chrono::duration_cast<std::chrono::milliseconds>(until - now).count(), 1,
            deadline_for(command).count()));
    };
    const auto stop_continuous = [left](std::shared_ptr<command_link> l) -> asio::awaitable<void> {
        std::string stop(protocol::cmd::stop); // (locals: GCC 12 and temporaries in co_await)
        json::object undrained{{"drain", false}};
        const auto deadline = left(stop);
        (void)co_await l->command(std::move(stop), std::move(undrained), deadline);
    };
    const bool start = name == protocol::cmd::start;
    if (!start)
        co_return co_await link->command(std::move(name), std::move(args));
    if (link->in_continuous_run()) {
        auto stopping = stop_continuous(link);
        co_await std::move(stopping);
    }
    json::object kept_args = args;
    std::string asked = name;
    const auto deadline = left(name);
    auto r = co_await link->command(std::move(name), std::move(args), deadline);
    if (!r.ok && r.error == "already profiling" && link->in_continuous_run() &&
        std::chrono::steady_clock::now() < until) { // a continuous start was answered first
        auto stopping = stop_continuous(link);
        co_await std::move(stopping);
        const auto again = left(asked);
        r = co_await link->command(std::move(asked), std::move(kept_args), again);
    }
    co_return r;
}

std::chrono::milliseconds deadline_for(std::string_view cmd) noexcept {
    if (cmd == protocol::cmd::start || cmd == protocol::cmd::reprobe ||
        cmd == protocol::cmd::verify_perf)
        return std::chrono::seconds(90);
    if (cmd == protocol::cmd::update_apply) // runs the new build's --version (≤ 30 s) first
        return std::chrono::seconds(60);
    // An agent ends a run in at most 30 s (perf record flushes for 3 s, perf script names what
    // is left, killed 30 s after the stop), then answers.
    if (cmd == protocol::cmd::stop || cmd == protocol::cmd::pause)
        return std::chrono::seconds(40);
    return std::chrono::seconds(15);
}

} // namespace collector::agents
