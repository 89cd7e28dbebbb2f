#include "collector/agents/dial.hpp"

#include "collector/agents/agent_link.hpp"
#include "collector/agents/registry.hpp"
#include "collector/agents/runs.hpp"
#include "collector/log.hpp"
#include "protocol/error.hpp"
#include "protocol/link_stream.hpp"
#include "protocol/tls.hpp"
#include "protocol/use_nothrow.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/connect.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/this_coro.hpp>

namespace collector::agents {
using namespace asio::experimental::awaitable_operators;
using asio::ip::tcp;
using protocol::use_nothrow;

namespace {

failure cannot(std::string why) {
    return failure("connect_failed", std::move(why), 502);
}

} // namespace

asio::awaitable<result<std::string>> dial(app_context& app, dial_request to) {
    if (app.stops.stopping())
        co_return cannot("the collector is stopping");
    auto ex = co_await asio::this_coro::executor;
    tcp::resolver resolver(ex);
    auto resolving = app.stops.on_stop([&resolver] { resolver.cancel(); });
    auto [rec, endpoints] = co_await resolver.async_resolve(to.host, to.port, use_nothrow);
    resolving = {};
    if (rec)
        co_return cannot("cannot resolve " + to.host + ": " + rec.message());
    const std::string where = to.host + ":" + to.port;
    tcp::socket socket(ex);
    asio::steady_timer deadline(ex, std::chrono::seconds(10));
    auto end = app.stops.on_stop([&] {
        boost::system::error_code ignored;
        socket.close(ignored);
        deadline.cancel();
    });
    auto r = co_await (asio::async_connect(socket, endpoints, use_nothrow) ||
                       deadline.async_wait(use_nothrow));
    end = {};
    if (app.stops.stopping())
        co_return cannot("the collector is stopping");
    if (r.index() == 1)
        co_return cannot("timed out connecting to " + where);
    if (auto ec = std::get<0>(std::get<0>(r)))
        co_return cannot("cannot connect to " + where + ": " + ec.message());
    auto stream = std::make_unique<protocol::link_stream>(std::move(socket));
    if (to.pin) {
        const protocol::peer_check check{to.pin, std::nullopt, to.host};
        auto ctx = protocol::client_context(check);
        auto closing = app.stops.on_stop([&stream] { stream->close(); });
        const auto context = std::get<std::shared_ptr<asio::ssl::context>>(std::move(ctx));
        const auto limit = std::chrono::seconds(10);
        const auto why = co_await stream->connect_tls(context, check, limit);
        if (!why.empty()) {
            stream->close();
            co_return cannot(where + ": " + why);
        }
    }
    const std::string id = app.agents.next_id();
    auto link = std::make_shared<agent_link>(std::move(stream), app, id,
                                             to.token ? to.token : app.cfg.token, true);
    link->set_dial_address(to.host, to.port);
    app.agents.add(id, link);
    asio::co_spawn(ex, link->run(), [](std::exception_ptr e) {
        if (e)
            log("wizard", "agent connection failed: " + protocol::describe(e));
    });
    // (20 s: a --listen agent serves one unpaired connection at a time, for up to 10 s each.)
    if (co_await link->ready(std::chrono::seconds(20)))
        co_return id;
    link->close();
    co_return cannot("the agent did not accept the connection (wrong pairing code?)");
}

namespace {

// Whether the run still waits for its link: parked, not given up.
bool still_parked(app_context& app, const std::string& key) {
    const auto* r = app.agents.runs().find(key);
    return r && r->parked && !r->ended;
}

asio::awaitable<void> redial_loop(app_context& app, dial_request to, std::string key) {
    auto ex = co_await asio::this_coro::executor;
    asio::steady_timer wait(ex);
    auto end = app.stops.on_stop([&wait] { wait.cancel(); });
    const std::string where = to.host + ":" + to.port;
    auto delay = std::chrono::seconds(1);
    for (int attempt = 1; !app.stops.stopping(); ++attempt) {
        wait.expires_after(delay);
        co_await wait.async_wait(use_nothrow);
        if (app.stops.stopping() || !still_parked(app, key))
            co_return;
        auto r = co_await dial(app, to);
        if (r) {
            log(where, "dialled again (attempt " + std::to_string(attempt) + "): target " + *r);
            co_return; // its hello names the run, which goes on in its session
        }
        if (attempt == 1 || attempt % 10 == 0)
            log(where, "dialling again for its run: " + r.error().message + "; trying on");
        delay = std::min(delay * 2, std::chrono::seconds(30));
    }
}

} // namespace

void redial_for_run(app_context& app, dial_request to, std::string run_key) {
    asio::co_spawn(app.io, redial_loop(app, std::move(to), std::move(run_key)),
                   [](std::exception_ptr e) {
                       if (e)
                           log("dialling again failed: " + protocol::describe(e));
                   });
}

} // namespace collector::agents
