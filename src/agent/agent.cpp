#include "agent/agent.hpp"
#include "agent/probe_cache.hpp"

#include "agent/backoff.hpp"
#include "agent/collection.hpp"
#include "agent/metrics.hpp"
#include "agent/session.hpp"
#include "protocol/descriptors.hpp"
#include "protocol/error.hpp"
#include "protocol/frame.hpp"
#include "protocol/link_stream.hpp"
#include "protocol/pairing.hpp"
#include "protocol/tls.hpp"
#include "protocol/use_nothrow.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/connect.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <set>
#include <unistd.h>

namespace agent {
using namespace asio::experimental::awaitable_operators;
using asio::ip::tcp;
using protocol::use_nothrow;

namespace {

void log(const std::string& what) {
    std::cerr << "perfwire-agent: " << what << "\n";
}

// Sessions alive now, so a signal can stop their profiling cleanly before exit.
struct registry {
    std::set<std::shared_ptr<session>> live;
    bool shutting_down = false;
    bool restart = false;       // a new build is in place: stop, then start it
    std::function<void()> stop; // as on SIGTERM
    // What perf was found able to do, for every connection of this run.
    std::shared_ptr<probe_memory> probed = std::make_shared<probe_memory>();
    // The run: the agent's, whichever connection sends it (run.hpp).
    std::shared_ptr<run_state> run;
};

// A session that installs an update stops the agent, which then starts the new build.
void restart_on_update(registry& reg, session& s) {
    s.on_update_installed = [&reg] {
        reg.restart = true;
        if (reg.stop)
            reg.stop();
    };
}

asio::awaitable<void> run_session(registry& reg, std::shared_ptr<session> s) {
    reg.live.insert(s);
    try {
        co_await s->run();
    } catch (const std::exception& e) {
        log(std::string("session failed: ") + e.what());
    }
    s->close(); // settles it, whatever happened: the listener takes the next connection
    reg.live.erase(s);
}

asio::awaitable<void> server_mode(const config& c, registry& reg, asio::steady_timer& wake,
                                  std::shared_ptr<asio::ssl::context> tls) {
    auto ex = co_await asio::this_coro::executor;
    backoff delays;
    tcp::resolver resolver(ex);
    const std::string target = c.server_host + ":" + std::to_string(c.server_port);
    while (!reg.shutting_down) {
        // Resolve on every attempt: the collector's address may have changed.
        auto [rec, endpoints] = co_await resolver.async_resolve(
            c.server_host, std::to_string(c.server_port), use_nothrow);
        boost::system::error_code failure = rec;
        if (!rec) {
            tcp::socket socket(ex);
            asio::steady_timer connect_deadline(ex, std::chrono::seconds(10));
            auto result = co_await (asio::async_connect(socket, endpoints, use_nothrow) ||
                                    connect_deadline.async_wait(use_nothrow));
            if (result.index() == 0 && !std::get<0>(std::get<0>(result))) {
                auto stream = std::make_unique<protocol::link_stream>(std::move(socket));
                std::string refused;
                if (tls) {
                    // (Locals, not temporaries in the co_await: GCC 12 frees those twice.)
                    const protocol::peer_check check{c.tls_pin, c.tls_ca, c.server_host};
                    const auto limit = std::chrono::seconds(10);
                    refused = co_await stream->connect_tls(tls, check, limit);
                }
                if (!refused.empty()) {
                    stream->close();
                    log("collector " + target + ": " + refused);
                } else {
                    log("connected to collector " + target +
                        (stream->encrypted() ? " (" + stream->tls_version() + ", its key " +
                                                   (c.tls_pin ? "pinned)" : "checked by CA)")
                                             : " (plain TCP)"));
                    auto s =
                        std::make_shared<session>(std::move(stream), c, reg.run, c.token,
                                                  std::make_shared<pairing_guard>(), reg.probed);
                    restart_on_update(reg, *s);
                    co_await run_session(reg, s);
                    if (s->was_authenticated())
                        delays.reset();
                }
                failure = {};
            } else {
                failure =
                    result.index() == 0 ? std::get<0>(std::get<0>(result)) : asio::error::timed_out;
            }
        }
        if (reg.shutting_down)
            break;
        const auto delay = delays.next();
        log((failure ? "cannot reach collector " + target + ": " + failure.message()
                     : "connection to " + target + " ended") +
            "; retrying in " + std::to_string(delay.count() / 1000.0).substr(0, 4) + " s");
        wake.expires_after(delay);
        co_await wake.async_wait(use_nothrow);
    }
}

asio::awaitable<void> listen_mode(const config& c, registry& reg, tcp::acceptor& acceptor,
                                  std::string token, std::shared_ptr<asio::ssl::context> tls) {
    auto ex = co_await asio::this_coro::executor;
    // One collector at a time: a newcomer may connect, but only when it presents the pairing
    // code does it take over, and the older connection is closed. A stale connection (a
    // collector that crashed) therefore never locks the device out, and nobody without the
    // code can disturb a running session.
    auto active = std::make_shared<std::weak_ptr<session>>();
    // One connection without the code at a time: the next waits in the listen backlog until
    // it has authenticated or gone. Failures back off across connections (pairing_guard).
    auto guard = std::make_shared<pairing_guard>();
    std::weak_ptr<session> unsettled;
    auto turn = std::make_shared<asio::steady_timer>(ex); // shared: a session may outlive us
    while (!reg.shutting_down) {
        while (!reg.shutting_down) {
            const auto waiting = unsettled.lock();
            if (!waiting || waiting->settled())
                break;
            turn->expires_at(asio::steady_timer::time_point::max());
            co_await turn->async_wait(use_nothrow);
        }
        if (reg.shutting_down)
            break;
        auto [ec, socket] = co_await acceptor.async_accept(use_nothrow);
        if (ec) {
            if (reg.shutting_down || ec == asio::error::operation_aborted)
                break;
            log("accept: " + ec.message());
            continue;
        }
        auto s =
            std::make_shared<session>(std::make_unique<protocol::link_stream>(std::move(socket)), c,
                                      reg.run, token, guard, reg.probed, tls);
        restart_on_update(reg, *s);
        unsettled = s;
        s->on_settled = [turn] { turn->cancel(); };
        s->on_authenticated = [active](session& me) {
            if (auto previous = active->lock(); previous && previous.get() != &me) {
                log("collector " + me.peer() + " took over from " + previous->peer());
                previous->close();
            }
            *active = me.weak_from_this();
        };
        asio::co_spawn(ex, run_session(reg, s), [](std::exception_ptr e) {
            if (e)
                log("session failed: " + protocol::describe(e));
        });
    }
}

asio::awaitable<int> output_mode(const config& c, registry& reg, asio::steady_timer& wake) {
    std::error_code ec;
    if (!std::filesystem::exists("/proc/" + std::to_string(*c.pid), ec)) {
        log("no such process " + std::to_string(*c.pid));
        co_return 1;
    }
    if (const auto why = c.off_cpu ? off_cpu_problem(c.events) : std::string(); !why.empty()) {
        log(why);
        co_return 1;
    }
    std::FILE* out = c.output_path == "-" ? stdout : std::fopen(c.output_path.c_str(), "wb");
    if (!out) {
        log("cannot write " + c.output_path + ": " + std::strerror(errno));
        co_return 1;
    }
    // What an earlier start found of this perf, else a probe (kept for the next start).
    const auto print = probe_fingerprint(c.perf_path);
    auto kept = recall_probe(c.state_dir, print, c.pid);
    if (kept)
        log("probe: perf as found at an earlier start, kept in " + c.state_dir);
    capabilities caps;
    if (kept) {
        caps = std::move(*kept);
    } else {
        caps = co_await probe(c.perf_path, c.pid);
        (void)keep_probe(c.state_dir, print, caps, c.pid);
    }
    for (const auto& w : caps.warnings)
        log("probe: " + w);
    for (const auto& why : caps.cannot)
        log("probe: this perf cannot " + why);
    if (caps.record_events.empty() && c.events.empty()) {
        if (out != stdout) {
            std::fclose(out);
            std::remove(c.output_path.c_str());
        }
        log("no data: this perf cannot sample any event");
        co_return 1;
    }
    collection_settings s;
    s.record = {c.events.empty() ? caps.record_events : c.events, c.frequency, caps.callgraph,
                c.pid};
    s.record.off_cpu = c.off_cpu;
    s.record.off_cpu_min_ns = static_cast<std::uint64_t>(c.off_cpu_min_us) * 1000;
    s.stat_events = s.record.events;
    s.stat_events.insert(s.stat_events.end(), caps.stat_only_events.begin(),
                         caps.stat_only_events.end());
    s.script_fields = caps.script_fields;
    s.chunk_duration = std::chrono::seconds(c.duration_sec);
    s.encoding = chunker::encoding::text;
    s.periods = c.rounds; // the last round ends with the drain: no partial round after it
    s.rounds = !caps.pipe_mode;
    int written = 0;
    bool write_failed = false, done = false;
    // Each round starts with the target's binaries and their build-ids when they changed, as
    // the live link sends them (a comment perf's readers skip: protocol::metrics_note), so the
    // recording imported later names its frames as a live session would.
    metrics_sampler sampler;
    std::shared_ptr<collection> coll;
    coll = std::make_shared<collection>(c.perf_path, s, [&](std::string text) {
        if (write_failed)
            return;
        const double now =
            std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch())
                .count();
        if (const auto b = sampler.binaries(*c.pid, now))
            text.insert(0, std::string(protocol::metrics_note) + protocol::serialize(*b) + "\n");
        if (std::fwrite(text.data(), 1, text.size(), out) != text.size() || std::fflush(out) != 0) {
            write_failed = true;
            done = true;
            wake.cancel();
        }
        ++written;
    });
    log("profiling pid " + std::to_string(*c.pid) + " for " + std::to_string(c.rounds) +
        " round(s) of " + std::to_string(c.duration_sec) + " s");
    auto runner = [&]() -> asio::awaitable<void> {
        co_await coll->run();
        done = true;
        wake.cancel();
    };
    auto stopper = [&]() -> asio::awaitable<void> {
        // Woken by a failed write, the collection's end or a signal; a signal ends the run
        // early, still through SIGINT, so the round in progress is written.
        if (!done && !reg.shutting_down) {
            wake.expires_at(asio::steady_timer::time_point::max());
            co_await wake.async_wait(use_nothrow);
        }
        coll->request_stop();
    };
    co_await (runner() && stopper());
    if (out != stdout)
        std::fclose(out);
    if (const auto* waits = coll->waits())
        log(waits->summary());
    if (write_failed) {
        log("write failed: " + c.output_path);
        co_return 1;
    }
    if (written == 0 || coll->script_bytes() == 0) {
        // A file of perf stat's complaint alone would pass for a recording: none is left.
        if (out != stdout)
            std::remove(c.output_path.c_str());
        const auto why = perf_complaint(coll->record_stderr());
        log("no samples: " + (!coll->error().empty() ? coll->error()
                              : !why.empty()         ? "perf record said: " + why
                                             : "perf recorded nothing (perf record exited with "
                                               "status " +
                                                   std::to_string(coll->record_status()) + ")"));
        co_return 1;
    }
    co_return 0;
}

// Stopped while no link carries the run (SIGTERM during an outage): it ends as it would with
// a link, perf flushing, its last chunk kept with the others (in the spool, if there is one).
asio::awaitable<void> end_run(registry& reg) {
    auto& run = *reg.run;
    for (int i = 0; i < 3 && run.current; ++i) {
        run.current->request_stop();
        run.collection_done.expires_after(std::chrono::seconds(35));
        co_await run.collection_done.async_wait(use_nothrow);
    }
    run.now = run_state::state::idle;
    // What the collector has not stored waits in the spool for the next start.
    run.kept.spool_all();
}

// Coroutines take their state as parameters (copied into the frame): a capturing lambda's
// closure would die before the coroutine it started.
asio::awaitable<int> server_task(const config& c, registry& reg, asio::steady_timer& wake,
                                 std::shared_ptr<asio::ssl::context> tls) {
    co_await server_mode(c, reg, wake, std::move(tls));
    co_await end_run(reg);
    co_return 0;
}

asio::awaitable<int> listen_task(const config& c, registry& reg, tcp::acceptor& acceptor,
                                 std::string token, std::shared_ptr<asio::ssl::context> tls) {
    co_await listen_mode(c, reg, acceptor, std::move(token), std::move(tls));
    // Let live sessions finish their shutdown.
    asio::steady_timer t(co_await asio::this_coro::executor);
    for (int i = 0; i < 50 && !reg.live.empty(); ++i) {
        t.expires_after(std::chrono::milliseconds(100));
        co_await t.async_wait(use_nothrow);
    }
    co_await end_run(reg);
    co_return 0;
}

asio::awaitable<void> stop_sessions(registry& reg) {
    const auto sessions = reg.live;
    for (const auto& s : sessions)
        co_await s->shutdown();
}

} // namespace

int run(const config& c) {
    std::signal(SIGPIPE, SIG_IGN);
    // A script on the device asks a flight recorder to capture now (its watch takes it). (Any
    // other agent keeps SIGUSR1's default.)
    if (c.flight_recorder_sec > 0)
        std::signal(SIGUSR1, [](int) { flight_signalled().store(true); });
    asio::io_context io(1);
    registry reg;
    // The run's chunks the collector lacks: in memory, then (--spool-dir) on disk, where an
    // earlier start may have left some.
    std::optional<spool_dir> spool;
    if (!c.spool_dir.empty() && c.run_mode != mode::output) {
        auto opened = spool_dir::open(c.spool_dir);
        if (auto* why = std::get_if<std::string>(&opened)) {
            log(*why + "; chunks past --buffer-mb are dropped instead");
        } else {
            spool = std::move(std::get<spool_dir>(opened));
        }
    }
    outbox box(static_cast<std::size_t>(c.buffer_mb) << 20, std::move(spool),
               static_cast<std::uint64_t>(c.spool_mb) << 20);
    box.recover();
    if (box.count() || box.broken_files())
        log("the spool holds " + std::to_string(box.count()) + " chunks (" +
            std::to_string(box.spooled_bytes() >> 10) + " KiB) of an earlier start, sent first" +
            (box.broken_files() ? "; " + std::to_string(box.broken_files()) +
                                      " files not whole (a power loss) were removed"
                                : std::string()));
    reg.run = std::make_shared<run_state>(io.get_executor(), std::move(box),
                                          std::chrono::seconds(c.offline_max_sec));
    int exit_code = 0;

    asio::signal_set signals(io, SIGINT, SIGTERM);
    asio::steady_timer wake(io);
    std::optional<tcp::acceptor> acceptor;

    // A perf that is not there: --output fails now, not after a misleading probe; a serving
    // agent says so at once and stays up (the collector's perf check tells the user too).
    if (find_program(c.perf_path).empty()) {
        log("perf not found: " + c.perf_path +
            " (install perf for this kernel, e.g. Debian's linux-perf, or give --perf PATH)");
        if (c.run_mode == mode::output)
            return 1;
    }

    reg.stop = [&] {
        if (reg.shutting_down)
            return;
        reg.shutting_down = true;
        wake.cancel();
        if (acceptor) {
            boost::system::error_code ignored;
            acceptor->close(ignored);
        }
        asio::co_spawn(io, stop_sessions(reg), [](std::exception_ptr e) {
            if (e)
                log("stopping failed: " + protocol::describe(e));
        });
    };
    signals.async_wait([&](boost::system::error_code ec, int sig) {
        if (ec)
            return;
        log(std::string("received ") + (sig == SIGINT ? "SIGINT" : "SIGTERM") + "; stopping");
        reg.stop();
    });

    auto finish = [&](std::exception_ptr e, int code) {
        if (e) {
            log("fatal: " + protocol::describe(e));
            code = 1;
        }
        exit_code = code;
        signals.cancel();
        io.stop();
    };

    switch (c.run_mode) {
    case mode::server: {
        std::shared_ptr<asio::ssl::context> tls;
        if (c.tls_pin || c.tls_ca) {
            auto made = protocol::client_context({c.tls_pin, c.tls_ca, c.server_host});
            if (auto* why = std::get_if<std::string>(&made)) {
                log(*why);
                return 2;
            }
            tls = std::get<0>(std::move(made));
        }
        asio::co_spawn(io, server_task(c, reg, wake, std::move(tls)), finish);
        break;
    }
    case mode::listen: {
        std::shared_ptr<asio::ssl::context> tls;
        std::string pin;
        if (c.listen_tls) {
            char host[256] = {};
            ::gethostname(host, sizeof host - 1);
            auto made = protocol::tls::load_identity(c.tls_key_file, c.tls_key_file, true,
                                                     std::string("perfwire-agent ") + host);
            if (auto* why = std::get_if<std::string>(&made)) {
                log("cannot set up TLS: " + *why + " (give --tls-key FILE somewhere writable)");
                return 1;
            }
            const auto& id = std::get<protocol::tls::identity>(made);
            tls = protocol::server_context(id);
            pin = id.pin;
        }
        std::string token = c.token.value_or("");
        if (token.empty()) {
            token = protocol::generate_typeable_code();
            std::cerr << "perfwire-agent: pairing code: " << token << "\n";
        }
        if (tls)
            std::cerr << "perfwire-agent: this device's key: " << pin
                      << " (give it to the collector with the pairing code)\n";
        boost::system::error_code ec;
        const auto address = asio::ip::make_address(c.bind_address, ec);
        if (ec) {
            log("bad --bind address " + c.bind_address);
            return 2;
        }
        acceptor.emplace(io);
        const tcp::endpoint ep(address, c.listen_port);
        acceptor->open(ep.protocol(), ec);
        if (!ec)
            acceptor->set_option(tcp::acceptor::reuse_address(true), ec);
        if (!ec)
            acceptor->bind(ep, ec);
        if (!ec)
            acceptor->listen(asio::socket_base::max_listen_connections, ec);
        if (ec) {
            log("cannot listen on " + c.bind_address + ":" + std::to_string(c.listen_port) + ": " +
                ec.message());
            return 1;
        }
        log("listening on " + c.bind_address + ":" +
            std::to_string(acceptor->local_endpoint().port()));
        asio::co_spawn(io, listen_task(c, reg, *acceptor, token, tls), finish);
        break;
    }
    case mode::output:
        asio::co_spawn(io, output_mode(c, reg, wake), finish);
        break;
    }
    io.run();
    return reg.restart ? restart_exit_code : exit_code;
}

int restart(const config& c) {
    std::vector<std::string> args = c.argv;
    if (args.empty())
        args.push_back(c.self_path);
    args[0] = c.self_path;
    if (!c.launcher.empty())
        args.insert(args.begin(), c.launcher);
    std::vector<char*> argv;
    for (auto& a : args)
        argv.push_back(a.data());
    argv.push_back(nullptr);
    log("starting " + args[0] + (c.launcher.empty() ? "" : " " + args[1]));
    protocol::close_on_exec_from_3(); // the new build opens its own connections
    ::execvp(argv[0], argv.data());
    log("cannot start the new build (" + std::string(std::strerror(errno)) + "); exiting with " +
        std::to_string(restart_exit_code) + " for a supervisor to restart it");
    return restart_exit_code;
}

} // namespace agent
