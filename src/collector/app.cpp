#include "collector/app.hpp"

#include "collector/agents/runs.hpp"
#include "collector/live_session.hpp"

#include "collector/agents/admission.hpp"
#include "collector/context.hpp"
#include "collector/fleet/backlog.hpp"
#include "collector/fleet/store.hpp"
#include "collector/http/access.hpp"
#include "collector/http/server.hpp"
#include "collector/live_session.hpp"
#include "collector/log.hpp"
#include "collector/store/import.hpp"
#include "protocol/error.hpp"
#include "protocol/link_stream.hpp"
#include "protocol/tls.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/json/object.hpp>
#include <boost/json/serialize.hpp>

#include <chrono>
#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <optional>
#include <thread>
#include <unistd.h>

namespace collector {
using asio::ip::tcp;

namespace {

// Once a second: the sessions' models kept within the memory budget (sessions.hpp), the
// moments the collector goes over it or back under said once each; idle addr2line processes
// closed.
asio::awaitable<void> keep_within_bounds(app_context& app) {
    asio::steady_timer tick(app.io);
    auto end = app.stops.on_stop([&app, &tick] {
        tick.cancel();
        // The sessions of runs whose link is down end as the collector stops.
        for (auto& parked : app.agents.runs().take_all_parked()) {
            parked->keep_run_open(); // continued when the device is back after a restart
            parked->end(
                std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch())
                    .count());
        }
    });
    bool over = false;
    while (!app.stops.stopping()) {
        tick.expires_after(std::chrono::seconds(1));
        auto [ec] = co_await tick.async_wait(asio::as_tuple(asio::use_awaitable));
        if (ec || app.stops.stopping())
            co_return;
        app.symbols.close_idle();
        // Runs whose device did not come back within its --offline-max: their sessions end.
        for (auto& parked : app.agents.runs().expired(std::chrono::steady_clock::now()))
            parked->end(
                std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch())
                    .count());
        const auto m = app.sessions.enforce();
        app.changed(change::status, {}); // told to the browsers when it changed
        const bool now = m.live + m.saved > m.budget / 4 * 3 &&
                         m.allowance <= memory_use::least_allowance; // folded as far as it goes
        if (now != over)
            log(now ? "the sessions hold more than the memory budget allows even with their "
                      "oldest samples folded as far as they go (" +
                          std::to_string((m.live + m.saved) >> 20) + " MB in " +
                          std::to_string(m.live_sessions) +
                          " live sessions): raise --memory-budget or profile fewer devices"
                    : "the sessions are within the memory budget again");
        over = now;
    }
}

bool open_acceptor(tcp::acceptor& a, const std::string& address, std::uint16_t port,
                   const char* what) {
    boost::system::error_code ec;
    const auto addr = asio::ip::make_address(address, ec);
    if (ec) {
        log(std::string("bad ") + what + " address " + address);
        return false;
    }
    const tcp::endpoint ep(addr, port);
    a.open(ep.protocol(), ec);
    if (!ec)
        a.set_option(tcp::acceptor::reuse_address(true), ec);
    if (!ec)
        a.bind(ep, ec);
    if (!ec)
        a.listen(asio::socket_base::max_listen_connections, ec);
    if (ec) {
        log(std::string("cannot listen for ") + what + " on " + address + ":" +
            std::to_string(port) + ": " + ec.message());
        return false;
    }
    return true;
}

void report(std::exception_ptr e) {
    if (e)
        log("fatal: " + protocol::describe(e));
}

// How long a stop may take before the collector gives up waiting: what was received is on
// disk already (every chunk is written as it arrives).
constexpr auto drain_deadline = std::chrono::seconds(30);

// Watches a stop from a thread of its own (a timer on the loop would itself keep the loop
// from draining): a stop that hangs ends the process with a line saying so.
class drain_watch {
public:
    void start(std::chrono::seconds deadline) {
        thread_ = std::thread([this, deadline] {
            std::unique_lock lock(mutex_);
            if (!wake_.wait_for(lock, deadline, [this] { return done_; })) {
                log("did not stop within " + std::to_string(deadline.count()) +
                    " s; exiting without waiting for the rest");
                std::_Exit(1);
            }
        });
    }
    void done() {
        {
            std::lock_guard lock(mutex_);
            done_ = true;
        }
        wake_.notify_all();
        if (thread_.joinable())
            thread_.join();
    }
    ~drain_watch() { done(); }

private:
    std::mutex mutex_;
    std::condition_variable wake_;
    bool done_ = false;
    std::thread thread_;
};

} // namespace

int run(const config& c) {
    std::signal(SIGPIPE, SIG_IGN);
    asio::io_context io(1);
    app_context app(io, c);
    if (!app.limits.debuginfod_urls.empty()) {
        // One answer may take at most this long and this much, and a server may stay silent
        // this long (libdebuginfod's own limits, unless the owner set them; the fetcher cuts
        // downloads short by the same limits, debuginfod_limits).
        ::setenv("DEBUGINFOD_MAXTIME", "120", 0);
        ::setenv("DEBUGINFOD_MAXSIZE", "1073741824", 0);
        ::setenv("DEBUGINFOD_TIMEOUT", "15", 0);
        // Answers are looked up again, from the I/O thread: a failure says why instead of
        // "waiting"; one that brings symbols names the sessions again.
        app.debuginfod =
            std::make_unique<debuginfod_fetcher>(app.limits.debuginfod_urls, [&app](bool found) {
                asio::post(app.io, [&app, found] {
                    app.symbols.refresh();
                    if (found)
                        rename_frames(app);
                });
            });
        app.symbols.use_debuginfod(
            [f = app.debuginfod.get()](const std::string& id, std::string& why, bool& pending) {
                return f->lookup(id, why, pending);
            });
    }

    if (c.import_file) {
        const auto started = std::chrono::steady_clock::now();
        auto done = import_file(
            app.store, *c.import_file, *c.import_file, "perf",
            [&](const import_progress& p) {
                log("importing " + *c.import_file + ": " + std::to_string(p.bytes.load() >> 20) +
                    " MiB read, " + std::to_string(p.samples.load()) + " samples" +
                    (p.converting ? " (perf script)" : ""));
            },
            &app.symbols, true);
        if (!done) {
            log("import failed: " + done.error().message);
            return 1;
        }
        auto& r = *done;
        const double s =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
        log("imported " + *c.import_file + " (" + std::to_string(r.model->prof.sample_count()) +
            " samples in " + std::to_string(s).substr(0, std::to_string(s).find('.') + 3) +
            " s) as session " + r.session_id);
        // Its symbol tables, read beside the parse, once the loop runs: the loader's work guard
        // on it, released before then, would leave the loop no work and stopped before it ran.
        if (auto e = app.sessions.adopt(r.session_id, std::move(r.model)))
            asio::post(io,
                       [e, a = &app] { asio::post(e->strand, [e, a] { want_tables(e, *a); }); });
        if (app.backlog)
            app.backlog->added(r.session_id);
    }

    // Sessions are kept here: a folder that cannot be written is an error now, not at the
    // first agent.
    {
        const auto probe = std::filesystem::path(c.sessions_dir) / ".write-test";
        std::error_code ec;
        if (std::FILE* f = std::fopen(probe.c_str(), "w"); f && std::fclose(f) == 0) {
            std::filesystem::remove(probe, ec);
        } else {
            log("cannot write to --sessions-dir " + c.sessions_dir + ": " + std::strerror(errno));
            return 1;
        }
    }
    // A token the owner gave, or one kept beside the sessions (made at the first start).
    auto token_in = [&](const char* name, const char* what) -> std::optional<std::string> {
        const auto file = std::filesystem::path(c.sessions_dir) / name;
        auto token = load_or_create_token(file);
        if (!token) {
            log(std::string("cannot set up ") + what + ": " + token.error().message);
            return std::nullopt;
        }
        return *token;
    };
    if (c.http_auth && c.http_token) {
        app.api_token = *c.http_token;
        app.api_token_file = "the collector's --http-token";
    } else if (c.http_auth) {
        const auto token = token_in(".http-token", "the API's access token");
        if (!token)
            return 1;
        app.api_token = *token;
        app.api_token_file = (std::filesystem::path(c.sessions_dir) / ".http-token").string();
    }

    const bool loopback_agents =
        c.agent_bind == "localhost" || c.agent_bind == "::1" || c.agent_bind.rfind("127.", 0) == 0;
    if (c.agent_auth == "token" ||
        (c.agent_auth == "auto" && (!loopback_agents || !c.agent_tokens.empty()))) {
        app.enrollment = c.agent_tokens;
        app.enrollment_file = "--agent-token";
        if (app.enrollment.empty()) {
            const auto token = token_in(".agent-token", "the agents' enrollment token");
            if (!token)
                return 1;
            app.enrollment.emplace_back(*token, "");
            app.enrollment_file = (std::filesystem::path(c.sessions_dir) / ".agent-token").string();
        }
        log("agents enroll before anything is stored: start them with PERFWIRE_ENROLL_TOKEN "
            "set to the token in " +
            app.enrollment_file);
    } else if (!loopback_agents) {
        log("warning: --agent-auth none: anyone who reaches " + c.agent_bind + ":" +
            std::to_string(c.agent_port) + " can store sessions here");
    }

    if (c.tls) {
        const auto dir = std::filesystem::path(c.sessions_dir) / ".tls";
        char host[256] = {};
        ::gethostname(host, sizeof host - 1);
        const std::filesystem::path cert = c.tls_cert ? *c.tls_cert : (dir / "cert.pem").string();
        auto made =
            protocol::tls::load_identity(cert, c.tls_key ? *c.tls_key : (dir / "key.pem").string(),
                                         !c.tls_cert, std::string("perfwire-collector ") + host);
        if (auto* why = std::get_if<std::string>(&made)) {
            log("cannot set up TLS: " + *why);
            return 1;
        }
        const auto& id = std::get<protocol::tls::identity>(made);
        app.agent_tls = protocol::server_context(id);
        if (c.http_tls)
            app.http_tls = protocol::server_context(id);
        app.tls_pin = id.pin;
        app.agent_tls_required =
            c.agent_tls == "required" || (c.agent_tls == "auto" && !loopback_agents);
        log("agent link: TLS with the key " + id.pin + " (" + cert.string() +
            "); agents pin it with --tls-pin " + id.pin +
            (app.agent_tls_required ? "; plain agents are refused"
                                    : "; plain agents are taken too (--agent-tls optional)"));
    }
    if (c.update_key) {
        auto made = protocol::tls::load_signing_key(*c.update_key, true);
        if (auto* why = std::get_if<std::string>(&made)) {
            log("cannot set up --agent-update-key: " + *why);
            return 1;
        }
        app.update_key = std::make_shared<const protocol::tls::signing_key>(
            std::get<protocol::tls::signing_key>(std::move(made)));
        log("agent updates are signed with " + *c.update_key +
            "; agents take them with --update-pubkey " + app.update_key->public_key);
    }

    tcp::acceptor agents(io), web(io);
    if (!open_acceptor(agents, c.agent_bind, c.agent_port, "agents") ||
        !open_acceptor(web, c.http_bind, c.http_port, "HTTP"))
        return 1;
    app.agent_listen_address = c.agent_bind + ":" + std::to_string(agents.local_endpoint().port());
    log("agents on " + app.agent_listen_address + "; sessions in " + c.sessions_dir);
    const std::string url = (app.http_tls ? "https://" : "http://") +
                            (c.http_bind == "0.0.0.0" ? std::string("127.0.0.1") : c.http_bind) +
                            ":" + std::to_string(web.local_endpoint().port()) + "/";
    app.ui_url = url;
    const bool loopback_http =
        c.http_bind == "localhost" || c.http_bind == "::1" || c.http_bind.rfind("127.", 0) == 0;
    if (!loopback_http && !app.http_tls)
        log("warning: the UI and API are served beyond loopback (" + c.http_bind +
            ") without --http-tls: the access token and every profile cross the network in "
            "the clear");
    if (app.api_token.empty()) {
        log("UI and API on " + url);
        log("warning: --http-auth none: whoever reaches " + url +
            " can read every profile and steer every agent");
    } else {
        // The link signs one browser in (a cookie) and is then spent: the next is printed.
        log("UI and API on " + url + "?code=" + app.sign_in.current());
        log("open that link to sign in (once: each use prints the next), or paste the token "
            "kept in " +
            app.api_token_file + " into the UI; API clients send Authorization: Bearer with it");
    }

    // Runs a stop or a crash left open: their sessions continue when their devices are back.
    app.agents.runs().recall(app.store);
    asio::co_spawn(io, agents::accept_agents(app, agents), report);
    asio::co_spawn(io, serve_http(app, web), report);
    asio::co_spawn(io, keep_within_bounds(app), report);

    // Stopping (docs/architecture.md): 1. stop accepting; 2. end every connection and cancel
    // the work in flight; 3. the loop runs until nothing is left (every coroutine returned,
    // every job handed to the pool done and its answer handled); 4. join the pool; 5. destroy
    // (the context, then the loop, which holds nothing by then). Further signals meanwhile
    // are taken and ignored: a terminal's Ctrl-C and a script's kill often come together.
    std::optional<asio::signal_set> signals(std::in_place, io, SIGINT, SIGTERM);
    drain_watch watch;
    signals->async_wait([&](boost::system::error_code ec, int signo) {
        if (ec)
            return;
        log(std::string("stopping (") + (signo == SIGINT ? "SIGINT" : "SIGTERM") + ")");
        boost::system::error_code ignored;
        agents.close(ignored);
        web.close(ignored);
        app.stops.stop();
        if (app.debuginfod)
            app.debuginfod->stop(); // before the drain: its answers are posted to the loop
        app.browsers->stop();
        watch.start(drain_deadline);
    });
    for (;;) {
        // A handler that throws is a bug, logged; the loop goes on, so the order above holds.
        try {
            io.run();
            break;
        } catch (const std::exception& e) {
            log(std::string("error (continuing): ") + e.what());
        }
    }
    watch.done();
    app.pool.join();
    app.symbol_loads.join();
    if (app.fleet_queries)
        app.fleet_queries->join();
    if (app.backlog)
        app.backlog->stop();
    if (app.fleet) { // what waits for ClickHouse: a few seconds, then the session folders keep it
        if (!app.fleet->flush(std::chrono::seconds(5)))
            log("fleet store", "samples still waiting for ClickHouse are not written: " +
                                   boost::json::serialize(app.fleet->status()));
        app.fleet->stop();
    }
    // Signals stay blocked while asio hands them back to their default action, then ignored:
    // one arriving now must not end the process halfway through its cleanup.
    sigset_t stop_signals;
    sigemptyset(&stop_signals);
    sigaddset(&stop_signals, SIGINT);
    sigaddset(&stop_signals, SIGTERM);
    ::pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
    signals.reset();
    std::signal(SIGINT, SIG_IGN);
    std::signal(SIGTERM, SIG_IGN);
    log("stopped");
    return 0;
}

} // namespace collector
