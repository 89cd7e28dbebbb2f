#include "agent/session.hpp"
#include "agent/perf_commands.hpp"
#include "agent/probe_cache.hpp"

#include "agent/build_arch.hpp"
#include "agent/version.hpp"

#include "protocol/error.hpp"
#include "protocol/frame.hpp"
#include "protocol/frame_reader.hpp"
#include "protocol/link_stream.hpp"
#include "protocol/pairing.hpp"
#include "protocol/use_nothrow.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/json/parse.hpp>
#include <boost/json/value_from.hpp>

#include <algorithm>
#include <chrono>
#include <iostream>
#include <set>
#include <sys/utsname.h>
#include <unistd.h>

namespace agent {
using namespace asio::experimental::awaitable_operators;
namespace json = boost::json;
using protocol::command_response;
using protocol::frame_flag;
using protocol::use_nothrow;

namespace {

constexpr std::size_t max_queued_bytes = std::size_t{64} << 20;
// Data still queued past which the collection's next flush waits (metrics records are small).
constexpr std::size_t flush_backlog = std::size_t{64} << 10;
// The collector sends the code right after the hello: a connection that does not is closed
// soon, so it cannot hold the one unpaired slot of a --listen agent for long.
constexpr auto auth_timeout = std::chrono::seconds(10);
constexpr int max_auth_failures = 3;
constexpr int max_unauthenticated_commands = 3;
// The reader stops reading commands while this much of answers waits to be sent: a collector
// that does not read them gets TCP backpressure, not an agent that grows. (Data and metrics
// have their own cap, max_queued_bytes, past which chunks are dropped and counted.)
constexpr std::size_t max_backlog_for_reading = std::size_t{1} << 20;
constexpr int max_pid = 4194304; // PID_MAX_LIMIT

double wall_seconds() {
    return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch())
        .count();
}

double monotonic_seconds() {
    timespec ts{};
    ::clock_gettime(CLOCK_MONOTONIC, &ts);
    return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) / 1e9;
}

// An integer argument: nullopt when absent or null; an error for anything but a JSON integer
// in [lo, hi] ("12abc", 12.5 and 2^40 are not a pid).
struct int_value {
    std::optional<int> value;
    std::string error;
};

int_value int_arg(const json::object& args, std::string_view key, std::int64_t lo,
                  std::int64_t hi) {
    const auto* v = args.if_contains(key);
    if (!v || v->is_null())
        return {};
    const bool in_range = (v->is_int64() && v->as_int64() >= lo && v->as_int64() <= hi) ||
                          (v->is_uint64() && v->as_uint64() <= static_cast<std::uint64_t>(hi) &&
                           static_cast<std::int64_t>(v->as_uint64()) >= lo);
    if (!in_range)
        return {std::nullopt, std::string(key) + " must be an integer from " + std::to_string(lo) +
                                  " to " + std::to_string(hi)};
    return {
        static_cast<int>(v->is_int64() ? v->as_int64() : static_cast<std::int64_t>(v->as_uint64())),
        {}};
}

// A flight recorder as the command line sets it (window 0: none).
flight_settings flight_of_config(const config& cfg) {
    flight_settings f;
    f.window = std::chrono::seconds(cfg.flight_recorder_sec);
    f.after = std::chrono::seconds(cfg.after_sec);
    f.memory_bytes = static_cast<std::size_t>(cfg.flight_memory_mb) << 20;
    f.triggers = cfg.triggers;
    return f;
}

// A start's flight recorder: flight_recorder (seconds; 0 none), after, flight_memory_mb and
// the levels and process name to watch (trigger_cpu, trigger_memory, trigger_load,
// trigger_process), over the command line's. A log or a file to watch is the device owner's to
// name (--trigger-log, --trigger-file), never a request's: those stay as the command line says.
std::variant<flight_settings, std::string> flight_of_start(const json::object& args,
                                                           const config& cfg, bool has_pid) {
    for (const char* key : {"trigger_log", "trigger_file"})
        if (args.contains(key))
            return std::string(key) +
                   ": a log or file to watch is the device owner's to name (the agent's "
                   "--trigger-log and --trigger-file), not a start's";
    auto f = flight_of_config(cfg);
    const auto window = int_arg(args, "flight_recorder", 0, 3600);
    const auto after = int_arg(args, "after", 0, 3600);
    const auto memory = int_arg(args, "flight_memory_mb", 1, 1024);
    for (const auto* a : {&window, &after, &memory})
        if (!a->error.empty())
            return a->error;
    bool asked = after.value || memory.value;
    if (window.value)
        f.window = std::chrono::seconds(*window.value);
    if (after.value)
        f.after = std::chrono::seconds(*after.value);
    if (memory.value)
        f.memory_bytes = static_cast<std::size_t>(*memory.value) << 20;
    for (auto [key, field] : {std::pair{"trigger_cpu", &f.triggers.cpu},
                              {"trigger_memory", &f.triggers.memory},
                              {"trigger_load", &f.triggers.load},
                              {"trigger_process", &f.triggers.process}})
        if (const auto* v = args.if_contains(key); v && !v->is_null()) {
            if (!v->is_string())
                return std::string(key) + " must be a string (\"\": none)";
            *field = std::string(v->as_string());
            asked = true;
        }
    if (f.window.count() == 0) {
        if (asked)
            return std::string("after, flight_memory_mb and the triggers go with flight_recorder");
        return f;
    }
    if (auto why = check_triggers(f.triggers, has_pid); !why.empty())
        return why;
    if (f.memory_bytes > static_cast<std::size_t>(cfg.buffer_mb) << 20 && cfg.spool_dir.empty())
        return "flight_memory_mb past the agent's --buffer-mb (" + std::to_string(cfg.buffer_mb) +
               "): a capture's window would not fit where the link sends it from";
    return f;
}

// A process that exited but was not yet reaped by its parent is a zombie: gone for profiling.
bool pid_exists(int pid) {
    if (pid <= 0)
        return false;
    const auto text = procfs::read_file("/proc/" + std::to_string(pid) + "/stat");
    const auto stat = text ? procfs::parse_pid_stat(*text) : std::nullopt;
    return stat && stat->state != 'Z' && stat->state != 'X';
}

// JSON built outside the coroutines: GCC 12 mis-compiles braced initializer lists inside a
// coroutine ("array used as initializer").
json::object process_info(const std::string& comm, const std::string& cmdline) {
    return {{"comm", comm}, {"cmdline", cmdline}};
}

json::object process_list(const std::vector<process_row>& rows) {
    json::array list;
    list.reserve(rows.size());
    for (const auto& r : rows)
        list.push_back({{"pid", r.pid}, {"comm", r.comm}, {"cmdline", r.cmdline}, {"cpu", r.cpu}});
    return {{"processes", std::move(list)}};
}

json::object timing_fields(int frequency, std::chrono::milliseconds duration) {
    return {{"frequency", frequency},
            {"duration", std::chrono::duration_cast<std::chrono::seconds>(duration).count()}};
}

// The state an answer to start, stop, pause or resume leaves the agent in.
json::object state_fields(std::string_view state) {
    return {{"state", state}};
}

// The last chunk the run under way made (0: none yet — a flight recorder's capture whose
// window was empty has a new id before its first chunk).
std::uint64_t last_seq_of_run(const run_state& r) {
    return r.kept.last_run() == r.id ? r.kept.last_seq() : 0;
}

// A run that ends while a capture is under way: the capture's last chunk is the run's last (a
// link that comes back is told where it ends).
void capture_ended(run_state& run) {
    if (!run.capture_notes.empty() && run.capture_notes.back().run == run.id &&
        !run.capture_notes.back().last_seq)
        run.capture_notes.back().last_seq = last_seq_of_run(run);
}

// What the run is doing, as the collector is told: a flight recorder between captures is armed.
std::string_view run_state_name(const run_state& r) {
    if (r.now == run_state::state::idle)
        return "idle";
    if (r.now == run_state::state::paused)
        return "paused";
    return r.flight && r.flight->holding() ? "armed" : "profiling";
}

// A flight recorder's triggers as set: only those set.
std::map<std::string, std::string> triggers_of(const trigger_settings& t) {
    std::map<std::string, std::string> o;
    for (const auto& [key, value] : {std::pair{"cpu", &t.cpu},
                                     {"memory", &t.memory},
                                     {"load", &t.load},
                                     {"log", &t.log},
                                     {"process", &t.process},
                                     {"file", &t.file}})
        if (!value->empty())
            o[key] = *value;
    return o;
}

// A flight recorder's window now, what fires it and what fired (metrics and status).
protocol::flight_metrics flight_record(const flight_state& fl, double ts) {
    protocol::flight_metrics m;
    m.ts = ts;
    m.window_s = static_cast<double>(fl.settings.window.count());
    m.held_s = std::chrono::duration<double>(fl.ring.held_span()).count();
    m.after_s = static_cast<double>(fl.settings.after.count());
    m.held_bytes = fl.ring.bytes();
    m.memory_bytes = fl.settings.memory_bytes;
    m.cut_for_room = fl.ring.dropped_for_room();
    m.captures = fl.captures;
    m.refused = fl.plan.refused();
    m.capturing = fl.plan.capturing();
    m.triggers = triggers_of(fl.settings.triggers);
    // The last readings of the levels watched (absent before the first).
    const auto reading = [](double v) {
        return std::isfinite(v) ? std::optional(v) : std::nullopt;
    };
    m.cpu_pct = reading(fl.watch.cpu_pct());
    m.memory_pct = reading(fl.watch.memory_pct());
    m.load = reading(fl.watch.load());
    if (auto why = fl.watch.log_problem(); !why.empty())
        m.log_problem = std::move(why);
    if (!fl.plan.fires().empty())
        m.last_fired = fl.plan.fires().front().what;
    return m;
}

json::object clock_fields() {
    return {{"monotonic", monotonic_seconds()}, {"realtime", wall_seconds()}};
}

std::vector<std::string> perf_check_args() {
    return {"stat", "-e", "task-clock", "--", "true"};
}

void log(const std::string& peer, const std::string& what) {
    std::cerr << "perfwire-agent: [" << peer << "] " << what << "\n";
}

} // namespace

session::session(std::unique_ptr<protocol::link_stream> stream, const config& cfg,
                 std::shared_ptr<run_state> run, std::optional<std::string> token,
                 std::shared_ptr<pairing_guard> guard, std::shared_ptr<probe_memory> probed,
                 std::shared_ptr<asio::ssl::context> accept_tls)
    : stream_(std::move(stream))
    , ex_(stream_->get_executor())
    , accept_tls_(std::move(accept_tls))
    , cfg_(cfg)
    , token_(std::move(token))
    , guard_(std::move(guard))
    , wake_writer_(ex_, asio::steady_timer::time_point::max())
    , drained_(ex_, asio::steady_timer::time_point::max())
    , wake_auth_(ex_, asio::steady_timer::time_point::max())
    , metrics_timer_(ex_)
    , run_(std::move(run))
    , legacy_wait_(ex_)
    , probed_(std::move(probed))
    , probe_done_(ex_, asio::steady_timer::time_point::max()) {
    boost::system::error_code ec;
    const auto ep = stream_->socket().remote_endpoint(ec);
    peer_ = ec ? "unknown" : ep.address().to_string() + ":" + std::to_string(ep.port());
    stream_->socket().set_option(asio::socket_base::keep_alive(true), ec);
    stream_->socket().set_option(asio::ip::tcp::no_delay(true), ec);
    authenticated_ = !token_;
    ever_authenticated_ = authenticated_;
}

session::~session() = default;

bool session::pinned_link() const noexcept {
    return cfg_.run_mode == mode::server && cfg_.tls_pin && stream_->encrypted();
}

asio::awaitable<void> session::run() {
    if (accept_tls_) {
        // --listen --tls: the collector that dials checks this device's key (printed with the
        // pairing code); nothing is said before the handshake.
        const auto limit = std::chrono::seconds(10);
        const auto why = co_await stream_->accept_tls(accept_tls_, limit);
        if (!why.empty()) {
            log(peer_, why + "; closing");
            close();
            co_return;
        }
    }
    protocol::hello h;
    h.agent_version = std::string(version());
    h.update_arch = std::string(build_arch);
    h.updates = std::string(update_policy());
    h.auth = token_ ? "token" : "none";
    char host[256] = {};
    ::gethostname(host, sizeof host - 1);
    h.hostname = cfg_.device_name.empty() ? std::string(host) : cfg_.device_name;
    protocol::platform_info p;
    if (const auto k = procfs::read_file("/proc/sys/kernel/osrelease"))
        p.kernel = k->substr(0, k->find('\n'));
    p.arch = std::string(build_arch);
    if (utsname u{}; ::uname(&u) == 0)
        p.machine = u.machine; // the kernel's: aarch64 under a 32-bit userland, the host's
                               // under qemu-user
    p.perf_event_paranoid = read_perf_event_paranoid();
    const auto version =
        co_await run_command(cfg_.perf_path, perf_version_args(), std::chrono::milliseconds(3000));
    if (const auto line = perf_version_line(version.out); !line.empty())
        p.perf_version = line;
    h.platform = p;
    platform_ = p;
    if (cfg_.run_mode == mode::server)
        h.enrollment = cfg_.enroll; // only to the collector this agent was told to dial
    if (cfg_.run_mode == mode::server && stream_->encrypted())
        h.tls_check = cfg_.tls_pin ? *cfg_.tls_pin : std::string("ca");
    // The run whose chunks the collector may lack: the oldest held, else the one under way.
    h.resumable = true;
    if (const auto* oldest = run_->kept.front())
        h.run = protocol::run_info{
            oldest->run, run_->kept.last_run() == oldest->run ? run_->kept.last_seq() : oldest->seq,
            static_cast<double>(run_->offline_max.count())};
    else if (!run_->id.empty() && run_->now != run_state::state::idle)
        h.run = protocol::run_info{run_->id, last_seq_of_run(*run_),
                                   static_cast<double>(run_->offline_max.count())};
    // A run to resume: its chunks wait for the collector to say which it has. Otherwise they
    // go as flag 1 until it asks for `sequence` (an older collector never does).
    if (h.run)
        data_mode_ = data_mode::held;
    sent_pos_ = run_->kept.front() ? run_->kept.front()->pos - 1 : run_->kept.last_pos();
    send(frame_flag::response, protocol::serialize(h));
    log(peer_, std::string("connected") + (token_ ? ", waiting for the pairing code" : ""));

    if (authenticated_)
        attach_run();
    if (authenticated_ && cfg_.pid && cfg_.run_mode == mode::server &&
        run_->now == run_state::state::idle)
        start_from_command_line();
    else if (authenticated_)
        probe_in_background();
    co_await (reader() && writer() && metrics_loop() && auth_deadline() && legacy_deadline());
    const bool owner = owns_run();
    const bool goes_on = run_->now != run_state::state::idle && data_mode_ != data_mode::legacy &&
                         cfg_.run_mode != mode::output;
    if (!owner) {
        log(peer_, "disconnected");
    } else if (goes_on) {
        detach_run();
        log(peer_, "disconnected; the run goes on, its chunks kept for the collector (" +
                       std::to_string(run_->kept.count()) + " held)");
    } else {
        co_await end_collection(); // (its own: ended before it is let go)
        detach_run();
        log(peer_, "disconnected");
    }
}

void session::close() {
    if (closed_)
        return;
    closed_ = true;
    stream_->close();
    wake_writer_.cancel();
    wake_auth_.cancel();
    metrics_timer_.cancel();
    drained_.cancel();
    legacy_wait_.cancel();
    update_.reset(); // an update under way goes with its connection
    settle();
}

void session::settle() {
    if (auto f = std::exchange(on_settled, nullptr))
        f();
}

asio::awaitable<void> session::shutdown() {
    const bool running = owns_run() && run_->now != run_state::state::idle;
    co_await end_collection(); // the final chunk is made before this returns
    if (running) {             // the run ends with the agent: said after its last chunk
        run_->now = run_state::state::idle;
        send_state("the agent stopped");
    }
    asio::steady_timer t(ex_);
    const auto unsent = [&] {
        return !queue_.empty() || (data_flows() && run_->kept.after(sent_pos_));
    };
    for (int i = 0; i < 20 && unsent() && !closed_; ++i) {
        t.expires_after(std::chrono::milliseconds(100));
        co_await t.async_wait(use_nothrow);
    }
    close();
}

void session::send(frame_flag flag, std::string_view payload, bool droppable, bool ordered) {
    if (closed_)
        return;
    if (droppable && queued_bytes_ + payload.size() > max_queued_bytes) {
        // The collector is not keeping up; keep control traffic flowing, count the loss.
        ++dropped_chunks_;
        return;
    }
    const bool reply = flag == frame_flag::response;
    queue_.push_back(
        {protocol::encode_frame(flag, payload), reply, ordered ? run_->kept.last_pos() : 0});
    queued_bytes_ += queue_.back().bytes.size();
    if (reply)
        reply_bytes_ += queue_.back().bytes.size();
    wake_writer_.cancel_one();
}

protocol::state_notice session::state_now(std::string reason) const {
    protocol::state_notice n;
    n.state = run_state_name(*run_);
    n.reason = std::move(reason);
    n.pid = run_->settings.record.pid;
    n.lost_samples = run_->lost_samples;
    if (run_->now != run_state::state::idle) {
        const auto now = run_->effective();
        n.callgraph = now.record.callgraph.empty() ? "none" : now.record.callgraph;
        n.run = run_->id;
        n.frequency = now.record.frequency;
    }
    return n;
}

void session::send_state(std::string reason) {
    send(frame_flag::response, protocol::serialize(state_now(std::move(reason))), false, true);
}

asio::awaitable<void> session::writer() {
    // Answers and notices in the order queued; the run's chunks in theirs, from the outbox; a
    // notice or answer that changes the run only once the chunks made before it are sent.
    std::string chunk_frame;
    while (!closed_) {
        const auto* next = data_flows() ? run_->kept.after(sent_pos_) : nullptr;
        // (An ordered one waits for chunks held back too, until they may flow.)
        const bool front_due =
            !queue_.empty() && (queue_.front().after <= sent_pos_ || !run_->kept.after(sent_pos_));
        if (!front_due && !next) {
            co_await wake_writer_.async_wait(use_nothrow);
            continue;
        }
        if (front_due) {
            auto [ec, n] = co_await asio::async_write(*stream_, asio::buffer(queue_.front().bytes),
                                                      use_nothrow);
            if (ec) {
                close();
                break;
            }
            queued_bytes_ -= queue_.front().bytes.size();
            if (queue_.front().reply)
                reply_bytes_ -= queue_.front().bytes.size();
            queue_.pop_front();
            if (reply_bytes_ <= max_backlog_for_reading)
                drained_.cancel();
            continue;
        }
        const auto pos = next->pos;
        const auto run = next->run;
        const auto seq = next->seq;
        const auto payload = run_->kept.payload(*next);
        if (!payload) { // dropped (the buffers' caps), or lost from the spool: counted
            sent_pos_ = std::max(sent_pos_, pos);
            continue;
        }
        chunk_frame = data_mode_ == data_mode::sequenced
                          ? protocol::encode_sequenced(run, seq, *payload)
                          : protocol::encode_frame(frame_flag::zstd, *payload);
        auto [ec, n] = co_await asio::async_write(*stream_, asio::buffer(chunk_frame), use_nothrow);
        if (ec) {
            close();
            break;
        }
        sent_pos_ = std::max(sent_pos_, pos);
        if (data_mode_ == data_mode::legacy) { // nobody will ask for it again
            run_->kept.stored(run, seq);
            legacy_run_ = run;
            legacy_seq_ = seq;
        }
    }
}

asio::awaitable<void> session::reader() {
    protocol::frame_reader<protocol::link_stream> frames(*stream_, protocol::agent_max_frame,
                                                         16 << 10);
    while (!closed_) {
        if (unauthenticated_commands_ >= max_unauthenticated_commands) {
            log(peer_, "commands without the pairing code; closing");
            co_await shutdown(); // the answers already queued still go out
            co_return;
        }
        while (reply_bytes_ > max_backlog_for_reading && !closed_) {
            drained_.expires_at(asio::steady_timer::time_point::max());
            co_await drained_.async_wait(use_nothrow);
        }
        auto f = co_await frames.next();
        if (!f) {
            if (auto why = protocol::peer_went_away(f.error())
                               ? std::string()
                               : protocol::read_end_reason(f.error());
                !why.empty())
                log(peer_, why);
            break;
        }
        if (f->flag != frame_flag::command) {
            log(peer_,
                "ignoring unexpected " + std::string(protocol::to_string(f->flag)) + " frame");
            continue;
        }
        auto req = protocol::parse_command_request(f->payload);
        if (!req) {
            if (!authenticated_)
                ++unauthenticated_commands_;
            log(peer_, "bad command: " + req.error().message());
            send(frame_flag::response,
                 protocol::serialize(command_response::failure("", req.error().message())));
            continue;
        }
        auto resp = co_await handle(*req);
        // An answer that changes the run goes after the chunks made before it.
        const bool ordered = req->cmd == protocol::cmd::start || req->cmd == protocol::cmd::stop ||
                             req->cmd == protocol::cmd::pause ||
                             req->cmd == protocol::cmd::resume ||
                             req->cmd == protocol::cmd::configure;
        send(frame_flag::response, protocol::serialize(resp), false, ordered);
        if (restart_after_answer_) {
            restart_after_answer_ = false;
            if (on_update_installed)
                on_update_installed();
        }
        if (auth_failures_ >= max_auth_failures) {
            log(peer_, "3 failed pairing attempts; closing");
            co_await shutdown();
            co_return;
        }
    }
    close();
}

asio::awaitable<void> session::auth_deadline() {
    if (authenticated_)
        co_return;
    wake_auth_.expires_after(auth_timeout);
    co_await wake_auth_.async_wait(use_nothrow);
    if (!authenticated_ && !closed_) {
        log(peer_, "no pairing code within 10 s; closing");
        close();
    }
}

void session::set_authenticated() {
    authenticated_ = ever_authenticated_ = true;
    legacy_wait_.cancel(); // the wait for `sequence` starts now
    attach_run();
    wake_auth_.cancel();
    settle();
    metrics_timer_.cancel(); // first metrics right away
    if (on_authenticated)
        on_authenticated(*this);
}

asio::awaitable<void> session::metrics_loop() {
    while (!closed_) {
        if (authenticated_ && metrics_enabled_) {
            const double ts = wall_seconds();
            send(frame_flag::metrics, protocol::serialize(sampler_.system(ts)), true);
            const auto pid = run_->settings.record.pid;
            if (pid) {
                if (auto m = sampler_.process(*pid, ts))
                    send(frame_flag::metrics, protocol::serialize(*m), true);
                if (metrics_threads_)
                    if (auto t = sampler_.threads(*pid, ts))
                        send(frame_flag::metrics, protocol::serialize(*t), true);
                if (auto b = sampler_.binaries(*pid, ts)) // sent once per change: never dropped
                    send(frame_flag::metrics, protocol::serialize(*b), false);
            } else if (run_->now != run_state::state::idle) {
                // The whole system: the build-ids of what runs most, for the collector to
                // name their frames and the fleet store to tell builds apart.
                for (const auto& b : sampler_.busiest_binaries(ts))
                    send(frame_flag::metrics, protocol::serialize(b), false);
            }
            if (metrics_network_)
                send(frame_flag::metrics, protocol::serialize(sampler_.network(ts)), true);
            if (metrics_disk_)
                send(frame_flag::metrics, protocol::serialize(sampler_.disk(ts)), true);
            if (run_->flight && run_->now != run_state::state::idle)
                send(frame_flag::metrics, protocol::serialize(flight_record(*run_->flight, ts)),
                     true);
        }
        metrics_timer_.expires_after(authenticated_ ? metrics_interval_
                                                    : std::chrono::milliseconds(auth_timeout));
        co_await metrics_timer_.async_wait(use_nothrow);
    }
}

asio::awaitable<command_response> session::handle(const protocol::command_request& req) {
    const auto& id = req.id;
    if (req.cmd == protocol::cmd::auth) {
        if (!token_)
            co_return command_response::success(id);
        const auto* t = req.args.if_contains("token");
        const std::string presented = t && t->is_string() ? std::string(t->as_string()) : "";
        // After failures, on any connection, the next attempt waits its turn.
        if (guard_->failures &&
            std::chrono::steady_clock::now() - guard_->last_failure > std::chrono::minutes(5))
            guard_->failures = 0;
        if (const auto wait = guard_->next_attempt - std::chrono::steady_clock::now();
            wait > wait.zero()) {
            asio::steady_timer turn(ex_, wait);
            co_await turn.async_wait(use_nothrow);
            if (closed_)
                co_return command_response::failure(id, "auth failed");
        }
        if (protocol::code_matches(*token_, presented)) {
            auth_failures_ = 0;
            guard_->failures = 0;
            log(peer_, "authenticated");
            set_authenticated();
            if (cfg_.pid && cfg_.run_mode == mode::server && run_->now == run_state::state::idle)
                start_from_command_line();
            else
                probe_in_background();
            co_return command_response::success(id);
        }
        ++auth_failures_;
        ++guard_->failures;
        // 0.1 s, 0.2 s, 0.4 s … capped at 10 s (under the collector's wait for an answer).
        const auto delay = std::chrono::milliseconds(
            std::min<std::int64_t>(100LL << std::min(guard_->failures - 1, 16), 10000));
        guard_->last_failure = std::chrono::steady_clock::now();
        guard_->next_attempt = std::chrono::steady_clock::now() + delay;
        log(peer_, "wrong pairing code (" + std::to_string(auth_failures_) +
                       " of 3 on this connection, " + std::to_string(guard_->failures) +
                       " in a row; the next attempt waits " +
                       std::to_string(delay.count() / 1000.0).substr(0, 4) + " s)");
        co_return command_response::failure(id, "auth failed");
    }
    if (!authenticated_) {
        ++unauthenticated_commands_;
        co_return command_response::failure(id, "unauthenticated");
    }

    // The commands an authenticated collector may ask, by their protocol names.
    using handler =
        asio::awaitable<command_response> (session::*)(const protocol::command_request&);
    static constexpr std::pair<std::string_view, handler> commands[] = {
        {protocol::cmd::ping, &session::cmd_ping},
        {protocol::cmd::kallsyms, &session::cmd_kallsyms},
        {protocol::cmd::status, &session::cmd_status},
        {protocol::cmd::list_processes, &session::cmd_list_processes},
        {protocol::cmd::verify_pid, &session::cmd_verify_pid},
        {protocol::cmd::verify_perf, &session::cmd_verify_perf},
        {protocol::cmd::reprobe, &session::cmd_reprobe},
        {protocol::cmd::start, &session::cmd_start},
        {protocol::cmd::stop, &session::cmd_stop},
        {protocol::cmd::pause, &session::cmd_pause},
        {protocol::cmd::resume, &session::cmd_resume},
        {protocol::cmd::configure, &session::cmd_configure},
        {protocol::cmd::configure_metrics, &session::cmd_configure_metrics},
        {protocol::cmd::update, &session::cmd_update},
        {protocol::cmd::update_data, &session::cmd_update_data},
        {protocol::cmd::update_apply, &session::cmd_update_apply},
        {protocol::cmd::sequence, &session::cmd_sequence},
        {protocol::cmd::ack, &session::cmd_ack},
        {protocol::cmd::capture, &session::cmd_capture},
    };
    for (const auto& [name, run] : commands)
        if (req.cmd == name)
            co_return co_await (this->*run)(req);
    co_return command_response::failure(id, "unknown command: " + req.cmd);
}

asio::awaitable<command_response> session::cmd_ping(const protocol::command_request& req) {
    co_return command_response::success(req.id);
}

asio::awaitable<command_response> session::cmd_verify_pid(const protocol::command_request& req) {
    const auto& id = req.id;
    const auto arg = int_arg(req.args, "pid", 1, max_pid);
    if (!arg.error.empty())
        co_return command_response::failure(id, arg.error);
    if (!arg.value)
        co_return command_response::failure(id, "pid required");
    const int* pid = &*arg.value;
    json::object f;
    f["pid"] = *pid;
    const auto stat = procfs::read_file("/proc/" + std::to_string(*pid) + "/stat");
    const auto parsed = stat ? procfs::parse_pid_stat(*stat) : std::nullopt;
    f["exists"] = parsed.has_value();
    if (parsed)
        f["info"] = process_info(parsed->comm, read_cmdline(*pid));
    co_return command_response::success(id, std::move(f));
}

asio::awaitable<command_response> session::cmd_reprobe(const protocol::command_request& req) {
    const auto& id = req.id;
    const auto arg = int_arg(req.args, "pid", 1, max_pid);
    if (!arg.error.empty())
        co_return command_response::failure(id, arg.error);
    auto pid = arg.value;
    if (!pid)
        pid = run_->settings.record.pid;
    co_await ensure_probed(pid, true);
    co_return command_response::success(id, capabilities_json());
}

json::object session::capabilities_json() const {
    // What the probe found, and whether this device can record where threads wait (why not,
    // else empty): the start form offers off-CPU only where it works.
    auto o = caps_->to_json();
    o["off_cpu_problem"] = off_cpu_problem(caps_->record_events);
    return o;
}

asio::awaitable<command_response> session::cmd_stop(const protocol::command_request& req) {
    const auto& id = req.id;
    // "drain": false ends the run at once, dropping what perf script has not printed yet.
    const auto* drain_arg = req.args.if_contains("drain");
    if (drain_arg && !drain_arg->is_bool())
        co_return command_response::failure(id, "drain must be true or false");
    const bool drain = !drain_arg || drain_arg->as_bool();
    if (run_->now == run_state::state::idle)
        co_return command_response::failure(id, "not profiling");
    co_await end_collection(drain);
    run_->now = run_state::state::idle;
    capture_ended(*run_);
    log(peer_, drain ? "profiling stopped" : "profiling stopped (not drained)");
    co_return command_response::success(id, state_fields("idle"));
}

asio::awaitable<command_response> session::cmd_pause(const protocol::command_request& req) {
    const auto& id = req.id;
    if (run_->now != run_state::state::profiling)
        co_return command_response::failure(id, "not profiling");
    co_await end_collection();
    run_->now = run_state::state::paused;
    log(peer_, "profiling paused");
    co_return command_response::success(id, state_fields("paused"));
}

asio::awaitable<command_response> session::cmd_resume(const protocol::command_request& req) {
    const auto& id = req.id;
    if (run_->now != run_state::state::paused)
        co_return command_response::failure(id, "not paused");
    begin_collection();
    log(peer_, "profiling resumed");
    co_return command_response::success(id, state_fields(run_state_name(*run_)));
}

asio::awaitable<command_response> session::cmd_configure(const protocol::command_request& req) {
    const auto& id = req.id;
    const auto freq_arg = int_arg(req.args, "frequency", 1, 100000);
    const auto dur_arg = int_arg(req.args, "duration", 1, 3600);
    if (!freq_arg.error.empty() || !dur_arg.error.empty())
        co_return command_response::failure(id, freq_arg.error.empty() ? dur_arg.error
                                                                       : freq_arg.error);
    const auto freq = freq_arg.value;
    const auto dur = dur_arg.value;
    if (freq) {
        run_->settings.record.frequency = *freq;
        if (run_->governor)
            run_->governor->ask(*freq); // (the budget holds from this rate)
    }
    if (dur)
        run_->settings.chunk_duration = std::chrono::seconds(*dur);
    if (run_->now == run_state::state::profiling) {
        // Takes effect now: restart the pipeline with the new settings.
        co_await end_collection();
        begin_collection();
    }
    co_return command_response::success(
        id, timing_fields(run_->settings.record.frequency, run_->settings.chunk_duration));
}

std::string_view session::update_policy() const {
    if (!cfg_.allow_update)
        return protocol::updates::disabled;
    if (cfg_.update_pubkey)
        return protocol::updates::signed_only;
    if (pinned_link())
        return protocol::updates::pinned;
    return protocol::updates::needs_key;
}

asio::awaitable<command_response> session::cmd_update(const protocol::command_request& req) {
    update_.reset(); // an earlier offer's file goes
    if (!cfg_.allow_update)
        co_return command_response::failure(req.id, "refused: this agent was started with "
                                                    "--no-update");
    auto text = [&](const char* key) -> std::string {
        const auto* v = req.args.if_contains(key);
        return v && v->is_string() ? std::string(v->get_string()) : std::string();
    };
    update_offer offer{text("version"), text("arch"), text("sha256"), text("signature"), 0};
    // (A size that is not one reads as 0, which begin() refuses after its policy: an agent
    // that takes no update says so before it judges the offer.)
    if (const auto* size = req.args.if_contains("size"); size && size->is_int64())
        offer.size = static_cast<std::uint64_t>(std::max<std::int64_t>(size->get_int64(), 0));
    auto made =
        update_receiver::begin(offer, cfg_.self_path, cfg_.update_pubkey, pinned_link(), version());
    if (auto* why = std::get_if<std::string>(&made)) {
        log(peer_, "update refused: " + *why);
        co_return command_response::failure(req.id, *why);
    }
    update_ = std::move(std::get<0>(made));
    log(peer_, "receiving agent " + offer.version + " (" + std::to_string(offer.size) +
                   " bytes) into " + update_->file().string());
    json::object f;
    f["piece"] = max_update_piece;
    co_return command_response::success(req.id, std::move(f));
}

asio::awaitable<command_response> session::cmd_update_data(const protocol::command_request& req) {
    if (!update_)
        co_return command_response::failure(req.id, "no update offered");
    // Any bad piece ends the offer, and its file goes with it.
    const auto abandon = [&](const std::string& why) {
        update_.reset();
        log(peer_, "update abandoned: " + why);
        return command_response::failure(req.id, why);
    };
    const auto* offset = req.args.if_contains("offset");
    const auto* data = req.args.if_contains("data");
    if (!offset || !offset->is_int64() || offset->get_int64() < 0 || !data || !data->is_string())
        co_return abandon("update_data needs offset and data (base64)");
    if (data->get_string().size() > (max_update_piece + 2) / 3 * 4)
        co_return abandon("a piece is at most " + std::to_string(max_update_piece) + " bytes");
    const auto bytes = protocol::base64_decode(data->get_string());
    if (!bytes)
        co_return abandon("data is not base64");
    if (auto why = update_->write(static_cast<std::uint64_t>(offset->get_int64()), *bytes);
        !why.empty())
        co_return abandon(why);
    json::object f;
    f["received"] = update_->received();
    co_return command_response::success(req.id, std::move(f));
}

asio::awaitable<command_response> session::cmd_update_apply(const protocol::command_request& req) {
    const auto& id = req.id;
    if (!update_)
        co_return command_response::failure(id, "no update offered");
    auto receiver = std::move(update_); // whatever happens, this offer is over
    auto fail = [&](const std::string& why) {
        log(peer_, "update refused: " + why + "; this agent keeps running");
        return command_response::failure(id, why);
    };
    if (auto why = receiver->finish(); !why.empty())
        co_return fail(why);
    // The new build must run here and be the version offered.
    const auto file = receiver->file().string();
    std::vector<std::string> check_args;
    if (!cfg_.launcher.empty())
        check_args.push_back(file);
    check_args.push_back("--version");
    const std::string exe = cfg_.launcher.empty() ? file : cfg_.launcher;
    const auto ran = co_await run_command(exe, check_args, std::chrono::seconds(30));
    const std::string want = "perfwire-agent " + receiver->offer().version;
    const std::string said = ran.out.substr(0, ran.out.find('\n'));
    std::string wrong;
    if (!ran.error.empty())
        wrong = ran.error;
    else if (ran.timed_out)
        wrong = "--version did not answer in 30 s";
    else if (ran.exit_code != 0)
        wrong = "--version exited with " + std::to_string(ran.exit_code) + " " +
                perf_complaint(ran.err);
    else if (said != want)
        wrong = "--version says \"" + said + "\", not \"" + want + "\"";
    if (!wrong.empty())
        co_return fail("the new build does not run here: " + wrong);
    if (auto why = receiver->install(); !why.empty())
        co_return fail(why);
    log(peer_, "updated to " + receiver->offer().version + "; restarting");
    restart_after_answer_ = true;
    json::object f;
    f["version"] = receiver->offer().version;
    f["restarting"] = true;
    co_return command_response::success(id, std::move(f));
}

asio::awaitable<command_response> session::cmd_kallsyms(const protocol::command_request& req) {
    const auto& id = req.id;
    if (!cfg_.allow_kallsyms)
        co_return command_response::failure(id, "not permitted: the agent was started without "
                                                "--allow-kallsyms");
    const auto text = procfs::read_file("/proc/kallsyms");
    if (!text)
        co_return command_response::failure(id, "cannot read /proc/kallsyms");
    auto symbols = procfs::parse_kallsyms(*text);
    if (symbols.empty())
        co_return command_response::failure(
            id, "the kernel hides its symbol addresses (kernel.kptr_restrict)");
    json::object f;
    f["count"] = std::count(symbols.begin(), symbols.end(), '\n');
    f["symbols"] = std::move(symbols);
    co_return command_response::success(id, std::move(f));
}

asio::awaitable<command_response> session::cmd_status(const protocol::command_request& req) {
    const auto& id = req.id;
    json::object f;
    f["state"] = run_state_name(*run_);
    f["pid"] =
        run_->settings.record.pid ? json::value(*run_->settings.record.pid) : json::value(nullptr);
    f["frequency"] = run_->settings.record.frequency;
    f["duration"] =
        std::chrono::duration_cast<std::chrono::seconds>(run_->settings.chunk_duration).count();
    f["agent_version"] = std::string(version());
    // How this agent takes updates over the link: signed for its --update-pubkey, unsigned
    // over this pinned TLS link, or not at all (update_policy says why).
    const auto policy = update_policy();
    f["update"] = policy == protocol::updates::signed_only ? "signed"
                  : policy == protocol::updates::pinned    ? "pinned"
                                                           : "refused";
    f["update_policy"] = std::string(update_policy());
    f["platform"] = json::value_from(platform_);
    f["events"] = json::value_from(run_->settings.record.events);
    f["capabilities"] = caps_ ? json::value(capabilities_json()) : json::value(nullptr);
    f["probing"] = probing_;
    f["lost_samples"] = run_->lost_samples;
    if (const auto& g = run_->governor) { // a budget: what profiling costs, the rate it takes
        json::object o{{"budget_pct", g->asked().budget_pct},
                       {"cost_pct", g->last_cost()},
                       {"asked_hz", g->asked().asked_hz}};
        const auto now = run_->effective();
        o["frequency"] = now.record.frequency;
        o["callgraph"] = now.record.callgraph.empty() ? std::string("none") : now.record.callgraph;
        f["overhead"] = std::move(o);
    }
    if (const auto& fl = run_->flight) { // a flight recorder: what its window holds now
        auto w = json::parse(protocol::serialize(flight_record(*fl, wall_seconds()))).as_object();
        w.erase("type");
        f["flight"] = std::move(w);
    }
    f["dropped_chunks"] = dropped_chunks_;
    f["chunks"] = run_->current ? run_->current->chunks() : 0;
    // The run's chunks not yet stored by the collector, and those its outbox let go.
    f["run"] = run_->id.empty() ? json::value(nullptr) : json::value(run_->id);
    f["held_chunks"] = run_->kept.count();
    f["held_bytes"] = run_->kept.bytes();
    f["outbox_dropped_chunks"] = run_->kept.dropped_chunks();
    f["spooled_bytes"] = run_->kept.spooled_bytes();
    if (!run_->kept.spool_error().empty())
        f["spool_error"] = run_->kept.spool_error();
    co_return command_response::success(id, std::move(f));
}

asio::awaitable<command_response>
session::cmd_list_processes(const protocol::command_request& req) {
    const auto& id = req.id;
    const auto before = snapshot_processes();
    asio::steady_timer t(ex_, std::chrono::milliseconds(500));
    co_await t.async_wait(use_nothrow);
    const auto rows = top_processes(before, snapshot_processes(), 0.5);
    co_return command_response::success(id, process_list(rows));
}

asio::awaitable<command_response> session::cmd_verify_perf(const protocol::command_request& req) {
    const auto& id = req.id;
    json::object f;
    f["perf_event_paranoid"] = read_perf_event_paranoid();
    const auto path = find_program(cfg_.perf_path);
    f["available"] = !path.empty();
    if (path.empty()) {
        f["version"] = nullptr;
        f["functional"] = false;
        f["error"] = cfg_.perf_path + " not found; install linux-perf";
        co_return command_response::success(id, std::move(f));
    }
    const auto to = std::chrono::milliseconds(5000);
    auto [version, check] = co_await (run_command(path, perf_version_args(), to) &&
                                      run_command(path, perf_check_args(), to));
    f["version"] = perf_version_line(version.out);
    f["functional"] = check.exit_code == 0;
    f["error"] = check.exit_code == 0 ? json::value(nullptr)
                                      : json::value(check.err.substr(0, 500) + check.error);
    co_return command_response::success(id, std::move(f));
}

asio::awaitable<command_response>
session::cmd_configure_metrics(const protocol::command_request& req) {
    auto flag = [&](std::string_view key, bool& slot) {
        if (const auto* v = req.args.if_contains(key); v && v->is_bool())
            slot = v->as_bool();
    };
    flag("enabled", metrics_enabled_);
    flag("network", metrics_network_);
    flag("disk", metrics_disk_);
    flag("threads", metrics_threads_);
    const auto [interval, bad] = int_arg(req.args, "interval", 1, 60000);
    if (!bad.empty())
        co_return command_response::failure(req.id, bad);
    if (interval) {
        // seconds, or milliseconds when large
        const int ms = *interval <= 60 ? *interval * 1000 : *interval;
        metrics_interval_ = std::chrono::milliseconds(std::clamp(ms, 250, 60000));
    }
    metrics_timer_.cancel();
    co_return command_response::success(
        req.id, {{"enabled", metrics_enabled_},
                 {"interval", static_cast<double>(metrics_interval_.count()) / 1000.0},
                 {"network", metrics_network_},
                 {"disk", metrics_disk_},
                 {"threads", metrics_threads_}});
}

asio::awaitable<void> session::auto_start() {
    // Told what to profile on the command line: start without waiting for a command, and say
    // so, since the collector did not ask.
    if (!pid_exists(*cfg_.pid)) {
        log(peer_, "no such process: " + std::to_string(*cfg_.pid) + "; idle");
        send_state("no such process: " + std::to_string(*cfg_.pid));
        co_return;
    }
    co_await ensure_probed(cfg_.pid);
    if (closed_ || run_->now != run_state::state::idle)
        co_return; // the collector left, or a start command came first
    if (run_->settings.record.events.empty()) {
        const std::string why =
            "this perf cannot " +
            (caps_->cannot.empty() ? std::string("sample any event") : caps_->cannot.front());
        log(peer_, why + "; idle");
        send_state(why);
        co_return;
    }
    if (const auto why = run_->settings.record.off_cpu
                             ? off_cpu_problem(run_->settings.record.events)
                             : std::string();
        !why.empty()) {
        log(peer_, why + "; idle");
        send_state(why);
        co_return;
    }
    run_->settings.record.pid = cfg_.pid;
    run_->settings.rounds = !caps_->pipe_mode;
    begin_collection();
    send_state("started from the command line");
}

void session::start_from_command_line() {
    // Beside the reader and the writer: the hello, the pairing answer and any command go out
    // while perf is probed, and status says a probe is under way (claimed now).
    if (pid_exists(*cfg_.pid))
        probe_in_background();
    if (probing_) {
        // Said now, before any command read with the authentication is answered (seconds on
        // a loaded device): the target's row reads "probing perf", not "idle".
        protocol::state_notice n;
        n.state = "idle";
        n.reason = "probing perf";
        n.pid = cfg_.pid;
        send(frame_flag::response, protocol::serialize(n), false, true);
    }
    auto self = shared_from_this();
    asio::co_spawn(ex_, auto_start(), [self](std::exception_ptr e) {
        if (e)
            log(self->peer_, "start from the command line failed: " + protocol::describe(e));
    });
}

void session::probe_in_background() {
    if (caps_ || probing_ || closed_ || recall_probe(run_->settings.record.pid))
        return;
    // Claimed here, not when the coroutine first runs: a status read in the same buffer as
    // the authentication must already say a probe is under way.
    probing_ = true;
    auto self = shared_from_this();
    asio::co_spawn(ex_, run_probe(run_->settings.record.pid), [self](std::exception_ptr e) {
        if (e)
            log(self->peer_, "probe failed: " + protocol::describe(e));
    });
}

asio::awaitable<void> session::ensure_probed(std::optional<int> pid, bool again) {
    auto self = shared_from_this();
    while (probing_) { // one probe at a time: a start waits for the one under way
        co_await probe_done_.async_wait(use_nothrow);
    }
    if (caps_ && (probed_pid_ == pid || caps_->judged) && !again)
        co_return;
    if (!again && recall_probe(pid))
        co_return;
    probing_ = true;
    co_await run_probe(pid);
}

asio::awaitable<void> session::run_probe(std::optional<int> pid) {
    auto self = shared_from_this();
    std::optional<capabilities> probed;
    std::exception_ptr failed;
    try {
        probed = co_await probe(cfg_.perf_path, pid);
    } catch (...) {
        failed = std::current_exception();
    }
    // Released whatever happened: a failed probe must not leave every later start waiting.
    probing_ = false;
    probe_done_.cancel();
    probe_done_.expires_at(asio::steady_timer::time_point::max());
    if (failed)
        std::rethrow_exception(failed);
    auto caps = std::move(*probed);
    for (const auto& w : caps.warnings)
        log(peer_, "probe: " + w);
    for (const auto& c : caps.cannot)
        log(peer_, "probe: this perf cannot " + c);
    log(peer_,
        "probe: sampling " +
            (caps.record_events.empty() ? std::string("nothing") : caps.record_events.front()) +
            ", call graphs " + (caps.callgraph.empty() ? "none" : caps.callgraph) + ", " +
            (caps.pipe_mode ? "continuous" : "rounds") + " (" +
            std::to_string(caps.probe_seconds).substr(0, 4) + " s)");
    probed_->caps = caps;
    probed_->pid = pid;
    (void)keep_probe(cfg_.state_dir, probe_fingerprint(cfg_.perf_path), caps, pid);
    use_capabilities(std::move(caps), pid);
}

bool session::recall_probe(std::optional<int> pid) {
    if (!probed_->for_pid(pid)) {
        // Kept on the device by an earlier start with this perf, kernel and setting.
        auto kept = agent::recall_probe(cfg_.state_dir, probe_fingerprint(cfg_.perf_path), pid);
        if (!kept)
            return false;
        log(peer_, "probe: perf as found at an earlier start, kept in " + cfg_.state_dir +
                       " (reprobe to probe it again)");
        probed_->caps = std::move(*kept);
        probed_->pid = pid;
    } else {
        log(peer_, "probe: perf as found at an earlier connection (reprobe to probe it again)");
    }
    use_capabilities(*probed_->caps, probed_->pid);
    return true;
}

void session::use_capabilities(capabilities caps, std::optional<int> pid) {
    caps_ = std::move(caps);
    probed_pid_ = pid;
    run_->settings.record.events = caps_->record_events;
    if (!cfg_.events.empty())
        run_->settings.record.events = cfg_.events;
    run_->settings.record.callgraph = caps_->callgraph;
    run_->settings.script_fields = caps_->script_fields;
}

asio::awaitable<command_response> session::cmd_start(const protocol::command_request& req) {
    const auto& id = req.id;
    if (run_->now != run_state::state::idle)
        co_return command_response::failure(id, "already profiling");
    const auto pid_arg = int_arg(req.args, "pid", 1, max_pid);
    const auto freq_arg = int_arg(req.args, "frequency", 1, 100000);
    const auto dur_arg = int_arg(req.args, "duration", 1, 3600);
    const std::string bad = !pid_arg.error.empty()    ? pid_arg.error
                            : !freq_arg.error.empty() ? freq_arg.error
                                                      : dur_arg.error;
    if (!bad.empty())
        co_return command_response::failure(id, bad);
    auto pid = pid_arg.value;
    const auto freq = freq_arg.value;
    const auto dur = dur_arg.value;
    std::vector<std::string> events;
    if (const auto* ev = req.args.if_contains("events"); ev && !ev->is_null()) {
        if (!ev->is_array())
            co_return command_response::failure(id, "events must be an array of event names");
        for (const auto& e : ev->as_array()) {
            if (!e.is_string())
                co_return command_response::failure(id, "events must be an array of event names");
            events.emplace_back(e.as_string());
        }
    }
    if (!pid && !req.args.contains("pid"))
        pid = cfg_.pid; // absent: the command line's --pid; explicit null: whole system
    if (pid && !pid_exists(*pid))
        co_return command_response::failure(id, "no such process: " + std::to_string(*pid));

    co_await ensure_probed(pid);
    if (run_->now !=
        run_state::state::idle) // a start from the command line began while this one waited
        co_return command_response::failure(id, "already profiling");
    // Only what the probe found this perf can do (or the command line named), and a refusal
    // says why. Checked before anything changes: a refused start leaves the settings as they were.
    for (const auto& e : events) {
        const auto& known = caps_->record_events;
        if (std::find(known.begin(), known.end(), e) == known.end() &&
            std::find(cfg_.events.begin(), cfg_.events.end(), e) == cfg_.events.end())
            co_return command_response::failure(id, caps_->why_not_event(e));
    }
    if (events.empty() && run_->settings.record.events.empty())
        co_return command_response::failure(
            id, "this perf cannot " + (caps_->cannot.empty() ? std::string("sample any event")
                                                             : caps_->cannot.front()));
    // A call-graph mode the probe saw work ("none": no stacks).
    std::optional<std::string> callgraph;
    if (const auto* cg = req.args.if_contains("callgraph"); cg && !cg->is_null()) {
        const auto& modes = caps_->callgraph_modes;
        const std::string asked = cg->is_string() ? std::string(cg->as_string()) : "";
        if (asked != "none" && std::find(modes.begin(), modes.end(), asked) == modes.end())
            co_return command_response::failure(id, caps_->why_not_callgraph(asked));
        callgraph = asked == "none" ? "" : asked;
    }
    // Where the threads wait too: a process's, never the whole system's (every switch of every
    // CPU would be more than the link takes).
    std::optional<bool> off_cpu;
    if (const auto* oc = req.args.if_contains("off_cpu"); oc && !oc->is_null()) {
        if (!oc->is_bool())
            co_return command_response::failure(id, "off_cpu must be true or false");
        off_cpu = oc->as_bool();
    }
    const auto off_cpu_min_us = int_arg(req.args, "off_cpu_min_us", 0, 60'000'000);
    if (!off_cpu_min_us.error.empty())
        co_return command_response::failure(id, off_cpu_min_us.error);
    if (off_cpu.value_or(run_->settings.record.off_cpu) && !pid)
        co_return command_response::failure(
            id, "off_cpu needs a process (pid): the whole system's switches are too many");
    if (const auto why =
            off_cpu.value_or(run_->settings.record.off_cpu)
                ? off_cpu_problem(events.empty() ? run_->settings.record.events : events)
                : std::string();
        !why.empty())
        co_return command_response::failure(id, why);
    // Rounds when perf cannot stream through a pipe, or when asked for.
    const auto* mode_arg = req.args.if_contains("mode");
    const std::string mode =
        mode_arg && mode_arg->is_string() ? std::string(mode_arg->as_string()) : std::string();
    if (mode_arg && !mode_arg->is_null() && mode != "rounds" && mode != "continuous")
        co_return command_response::failure(id, "mode must be continuous or rounds");
    if (mode == "continuous" && !caps_->pipe_mode)
        co_return command_response::failure(id, "this perf cannot write perf.data to a pipe (" +
                                                    caps_->pipe_problem +
                                                    "): only mode rounds works here");
    auto flight = flight_of_start(req.args, cfg_, pid.has_value());
    if (const auto* why = std::get_if<std::string>(&flight))
        co_return command_response::failure(id, *why);
    // A budget for what profiling costs (% of one core; 0 none), over the command line's.
    double overhead = cfg_.max_overhead_pct;
    if (const auto* mo = req.args.if_contains("max_overhead"); mo && !mo->is_null()) {
        overhead = mo->is_number() ? mo->to_number<double>() : -1;
        if (!(overhead == 0 || (overhead >= 0.1 && overhead <= 100)))
            co_return command_response::failure(
                id, "max_overhead must be a number from 0.1 to 100 (% of one core; 0: none)");
    }
    run_->overhead_asked = overhead;
    run_->flight_asked = std::get<flight_settings>(std::move(flight));
    run_->settings.record.pid = pid;
    if (callgraph)
        run_->settings.record.callgraph = *callgraph;
    if (off_cpu)
        run_->settings.record.off_cpu = *off_cpu;
    if (off_cpu_min_us.value)
        run_->settings.record.off_cpu_min_ns =
            static_cast<std::uint64_t>(*off_cpu_min_us.value) * 1000;
    if (freq)
        run_->settings.record.frequency = *freq;
    if (dur)
        run_->settings.chunk_duration = std::chrono::seconds(*dur);
    if (!events.empty())
        run_->settings.record.events = events;
    run_->settings.rounds = !caps_->pipe_mode || mode == "rounds";
    begin_collection();
    log(peer_, "profiling " + (pid ? "pid " + std::to_string(*pid) : std::string("the system")) +
                   " at " + std::to_string(run_->settings.record.frequency) + " Hz");

    json::object f;
    f["pid"] = pid ? json::value(*pid) : json::value(nullptr);
    f["frequency"] = run_->settings.record.frequency;
    f["duration"] =
        std::chrono::duration_cast<std::chrono::seconds>(run_->settings.chunk_duration).count();
    f["events"] = json::value_from(run_->settings.record.events);
    f["callgraph"] =
        run_->settings.record.callgraph.empty() ? "none" : run_->settings.record.callgraph;
    f["mode"] = run_->settings.rounds ? "rounds" : "continuous";
    f["off_cpu"] = run_->settings.record.off_cpu;
    f["off_cpu_min_us"] = run_->settings.record.off_cpu_min_ns / 1000;
    f["state"] = run_state_name(*run_);
    f["max_overhead"] = run_->overhead_asked;
    if (run_->flight) {
        f["flight_recorder"] = run_->flight->settings.window.count();
        f["after"] = run_->flight->settings.after.count();
        f["triggers"] = json::value_from(triggers_of(run_->flight->settings.triggers));
    }
    f["run"] = run_->id;
    // Lets the collector place perf's monotonic timestamps on the wall clock.
    f["clock"] = clock_fields();
    co_return command_response::success(id, std::move(f));
}

namespace {

// Why a collection ended by itself: the target exited, or perf failed.
std::string why_it_ended(const collection& c, const collection_settings& settings) {
    if (!c.error().empty() && c.chunks() == 0)
        return "perf failed: " + c.error();
    if (c.target_exited())
        return "target process exited";
    if (c.record_status() > 0) {
        std::string reason = "perf record exited with status " + std::to_string(c.record_status());
        if (const auto why = perf_complaint(c.record_stderr()); !why.empty())
            reason += ": " + why;
        return reason;
    }
    if (c.record_status() == 0)
        return "perf record ended by itself (exit status 0)" +
               (settings.record.pid
                    ? " while process " + std::to_string(*settings.record.pid) + " still runs"
                    : std::string());
    return "perf exited";
}

capture_plan::answer fire(run_state& run, flight_state& f, const std::string& what);

// One collection of the run, to its end; the run, not a link, holds it.
asio::awaitable<void> collect(std::shared_ptr<run_state> run, std::shared_ptr<collection> c) {
    co_await c->run();
    run->lost_samples += c->lost_samples();
    if (const auto* waits = c->waits())
        log("run " + run->id, waits->summary());
    if (c->prompt_refused())
        run->settings.prompt = false;
    if (run->current == c) {
        run->current.reset();
        const bool expired = std::exchange(run->offline_expired, false);
        if ((!c->stop_requested() || expired) && run->now == run_state::state::profiling) {
            // A flight recorder's run that ends by itself (the target exited, perf failed) sends
            // what it held: the moments before are what it is for.
            if (run->flight && run->flight->holding() && !expired && run->flight->ring.count())
                fire(*run, *run->flight, "the run ended: " + why_it_ended(*c, run->settings));
            run->now = run_state::state::idle;
            capture_ended(*run);
            const auto reason = expired ? "no link to the collector for " +
                                              std::to_string(run->offline_max.count()) +
                                              " s (--offline-max)"
                                        : why_it_ended(*c, run->settings);
            if (run->on_end)
                run->on_end(reason);
            else
                run->ended_offline = reason;
        }
    }
    run->collection_done.cancel();
}

// A trigger fired: a capture begins (the window held goes out first, as a run of its own), or
// the one under way grows, or it is refused (too soon after the last).
capture_plan::answer fire(run_state& run, flight_state& f, const std::string& what) {
    const auto now = flight_clock::now();
    const auto answer = f.plan.fire(now, what);
    switch (answer) {
    case capture_plan::answer::refused:
        if (!std::exchange(f.refusing, true))
            log("flight recorder", what + ": not captured (the last capture began under " +
                                       std::to_string(f.settings.min_gap.count()) + " s ago)");
        return answer;
    case capture_plan::answer::extended:
        if (f.plan.fired() <= capture_plan::max_fires)
            log("flight recorder", what + ": the capture under way goes on");
        return answer;
    case capture_plan::answer::begun:
        break;
    }
    f.refusing = false;
    f.draining.reset();
    ++f.captures;
    run.id = make_run_id();
    // (The window up to the firing: the session's first sample is its start, so the moment
    // falls this far into the session.)
    const double window_s = std::chrono::duration<double>(f.ring.span_to(now)).count();
    auto window = f.ring.take();
    log("flight recorder", what + ": capture " + std::to_string(f.captures) + " (run " + run.id +
                               "), " + std::to_string(window.size()) + " chunks held before it");
    run.capture_notes.push_back({run.id, what, wall_seconds(), window_s, std::nullopt});
    if (run.capture_notes.size() > run_state::max_capture_notes)
        run.capture_notes.pop_front();
    if (run.on_flight) // said before the window, which follows it
        run.on_flight("flight recorder: " + what, what, run.capture_notes.back().at, window_s);
    for (auto& chunk : window)
        run.kept.add(run.id, std::move(chunk));
    if (run.on_chunk)
        run.on_chunk();
    return answer;
}

// A flight recorder's memory holds less than its window: said at once, in the log and to the
// collector (the target's reason), never a shorter window in silence.
void memory_bound(run_state& run, const flight_state& f) {
    char what[240];
    std::snprintf(what, sizeof what,
                  "flight recorder: its %zu MiB hold only %.0f s of the %lld s asked "
                  "(--flight-memory-mb, or a shorter --flight-recorder)",
                  f.settings.memory_bytes >> 20,
                  std::chrono::duration<double>(f.ring.held_span()).count(),
                  static_cast<long long>(f.settings.window.count()));
    log("flight recorder", std::string(what));
    if (run.on_flight)
        run.on_flight(what, "", 0, 0);
}

// A capture's last chunk came (or there was none to cut): armed again, the ring holding from
// now on.
void armed_again(run_state& run, flight_state& f) {
    f.draining.reset();
    if (!run.capture_notes.empty() && run.capture_notes.back().run == run.id)
        run.capture_notes.back().last_seq = last_seq_of_run(run);
    f.ring.restart(flight_clock::now());
    log("flight recorder", "capture " + std::to_string(f.captures) + " over; holding the last " +
                               std::to_string(f.settings.window.count()) + " s again");
    if (run.on_flight)
        run.on_flight("flight recorder: capture over; holding the last " +
                          std::to_string(f.settings.window.count()) + " s",
                      "", 0, 0);
}

// A flight recorder's watch, four times a second for as long as its run: the triggers, and the
// end of a capture.
asio::awaitable<void> flight_loop(std::shared_ptr<run_state> run, std::shared_ptr<flight_state> f) {
    asio::steady_timer tick(co_await asio::this_coro::executor);
    for (;;) { // (spawned before the run says it profiles)
        tick.expires_after(std::chrono::milliseconds(250));
        co_await tick.async_wait(use_nothrow);
        if (run->flight != f || run->now == run_state::state::idle)
            break;
        if (run->now != run_state::state::profiling)
            continue; // paused: no trigger fires, no capture ends
        const auto reading = f->watch.poll(flight_clock::now());
        for (const auto& what : reading.fired)
            if (fire(*run, *f, what) == capture_plan::answer::refused)
                f->watch.refused(); // (tried again while a level stays above)
        if (reading.holding)
            f->plan.extend(flight_clock::now()); // a spike lasts: so does its capture
        if (flight_signalled().exchange(false))
            fire(*run, *f, "SIGUSR1");
        const auto now = flight_clock::now();
        if (f->plan.over(now)) {
            // The chunk being made is the capture's: cut it now, whatever the link holds.
            f->draining = now;
            if (run->current)
                run->current->request_cut();
        } else if (f->draining && now - *f->draining >= std::chrono::milliseconds(500)) {
            armed_again(*run, *f); // nothing was left to cut
        }
    }
}

// --offline-max: the run ends when no link came back in time.
asio::awaitable<void> end_when_offline_too_long(std::shared_ptr<run_state> run) {
    run->offline_timer.expires_after(run->offline_max);
    auto [ec] = co_await run->offline_timer.async_wait(asio::as_tuple(asio::use_awaitable));
    if (ec || run->attached)
        co_return;
    std::cerr << "perfwire-agent: no link to the collector for " << run->offline_max.count()
              << " s (--offline-max): the run ends\n";
    if (run->current) {
        run->offline_expired = true;
        run->current->request_stop();
    } else if (run->now != run_state::state::idle) { // paused
        run->now = run_state::state::idle;
        run->ended_offline = "no link to the collector for " +
                             std::to_string(run->offline_max.count()) + " s (--offline-max)";
    }
}

} // namespace

void session::begin_collection() {
    // perf stat counts the sampling events and the probe's extras alongside.
    run_->settings.stat_events = run_->settings.record.events;
    if (caps_)
        for (const auto& e : caps_->stat_only_events)
            if (std::find(run_->settings.stat_events.begin(), run_->settings.stat_events.end(),
                          e) == run_->settings.stat_events.end())
                run_->settings.stat_events.push_back(e);
    if (run_->now == run_state::state::idle) { // a new run (not a resume after pause)
        run_->id = make_run_id();
        run_->governor.reset();
        if (run_->overhead_asked > 0) {
            const auto& modes = caps_ ? caps_->callgraph_modes : std::vector<std::string>{};
            run_->governor.emplace(overhead_governor::settings{
                run_->overhead_asked, run_->settings.record.frequency,
                run_->settings.record.callgraph == "dwarf",
                std::find(modes.begin(), modes.end(), "fp") != modes.end(), 1, ladder_rungs()});
            run_->meter = cost_meter();
        }
        run_->flight.reset();
        if (run_->flight_asked.window.count() > 0) {
            flight_signalled().store(false); // (one from before this run asks nothing of it)
            run_->flight =
                std::make_shared<flight_state>(run_->flight_asked, run_->settings.record.pid);
            asio::co_spawn(ex_, flight_loop(run_, run_->flight), asio::detached);
        }
    }
    auto run = run_;
    auto on_chunk = [run](std::string payload) {
        // A flight recorder between captures keeps its chunks to itself.
        if (run->flight && run->flight->holding()) {
            auto& f = *run->flight;
            const bool was_whole = f.ring.dropped_for_room() == 0;
            f.ring.add(flight_clock::now(), std::move(payload));
            if (was_whole && f.ring.dropped_for_room() > 0)
                memory_bound(*run, f); // said once: the window held is shorter than asked
            return;
        }
        run->kept.add(run->id, std::move(payload));
        if (run->on_chunk)
            run->on_chunk();
        if (run->flight && run->flight->draining) // the capture's last chunk
            armed_again(*run, *run->flight);
    };
    // A flush waits while the link still holds earlier data, or there is no link: the chunks
    // grow instead of queueing up (a flight recorder's window takes them whatever the link).
    auto may_flush = [run] {
        return (run->flight && run->flight->holding()) || (run->may_flush && run->may_flush());
    };
    run_->current =
        std::make_shared<collection>(cfg_.perf_path, run_->effective(), on_chunk, may_flush);
    run_->now = run_state::state::profiling;
    watch_overhead();
    auto task = collect(run_, run_->current);
    asio::co_spawn(ex_, std::move(task), [peer = peer_](std::exception_ptr e) {
        if (e)
            log(peer, "collection failed: " + protocol::describe(e));
    });
}

void session::attach_run() {
    if (owns_run())
        return;
    if (run_->now == run_state::state::idle && !run_->current) {
        // A collector that attaches starts from the command line's settings; a run that went
        // on without a link keeps its own. (Not before it paired: a stranger changes nothing.)
        run_->settings.record.frequency = cfg_.frequency;
        run_->settings.record.pid = cfg_.pid;
        run_->settings.record.off_cpu = cfg_.off_cpu;
        run_->settings.record.off_cpu_min_ns =
            static_cast<std::uint64_t>(cfg_.off_cpu_min_us) * 1000;
        run_->flight_asked = flight_of_config(cfg_);
        run_->overhead_asked = cfg_.max_overhead_pct;
        run_->settings.chunk_duration = std::chrono::seconds(cfg_.duration_sec);
    }
    run_->attached = true;
    run_->owner = this;
    run_->offline_timer.cancel();
    auto weak = weak_from_this();
    run_->on_chunk = [weak] {
        if (auto self = weak.lock())
            self->wake_writer_.cancel_one();
    };
    run_->may_flush = [weak] {
        auto self = weak.lock();
        return self && self->data_flows() &&
               self->run_->kept.bytes_after(self->sent_pos_) <= flush_backlog;
    };
    run_->on_end = [weak](const std::string& why) {
        if (auto self = weak.lock()) {
            log(self->peer_, why + "; idle");
            self->send_state(why);
        }
    };
    run_->on_flight = [weak](const std::string& reason, const std::string& capture, double at,
                             double window_s) {
        if (auto self = weak.lock())
            self->send_flight(reason, capture, at, window_s);
    };
    if (run_->now != run_state::state::idle)
        watch_overhead(); // (a run that went on without a link: watched again from here)
}

int session::ladder_rungs() const {
    // Rates perf record holds at once, where its control descriptor takes event names and the
    // events take a rate each: a file descriptor per event, rate and thread (or CPU), at most
    // 1,000 of them, under the usual limit of 1,024 open files (a process of many threads holds
    // fewer rates).
    const auto& rec = run_->settings.record;
    if (run_->settings.rounds || !ladder_possible(rec) ||
        !perf_enables_by_name(caps_ ? caps_->perf_version : platform_.perf_version.value_or("")))
        return 0;
    long units = std::max(1L, ::sysconf(_SC_NPROCESSORS_ONLN));
    if (rec.pid) {
        const auto text = procfs::read_file("/proc/" + std::to_string(*rec.pid) + "/stat");
        const auto st = text ? procfs::parse_pid_stat(*text) : std::nullopt;
        units = st ? static_cast<long>(st->threads) : 1;
    }
    const long per_rate = std::max(1L, units) * static_cast<long>(rec.events.size());
    return static_cast<int>(std::clamp(1000 / per_rate, 0L, 16L));
}

void session::watch_overhead() {
    // One loop at a time, the attached session's: a loop of a session gone ends at its next
    // reading (the new one watches from now).
    if (run_->governor && run_->watcher != this && owns_run() && !closed_) {
        run_->watcher = this;
        asio::co_spawn(ex_, overhead_loop(), asio::detached);
    }
}

asio::awaitable<void> session::overhead_loop() {
    auto self = shared_from_this();
    asio::steady_timer tick(ex_);
    (void)run_->meter.read(monotonic_seconds()); // from now
    const auto watching = [this] {
        return !closed_ && run_->watcher == this && owns_run() && run_->governor &&
               run_->now != run_state::state::idle;
    };
    while (watching()) {
        tick.expires_after(std::chrono::seconds(5));
        co_await tick.async_wait(use_nothrow);
        if (!watching())
            break;
        const auto cost = run_->meter.read(monotonic_seconds());
        if (!cost || run_->now != run_state::state::profiling || !run_->current)
            continue;                                    // (paused: nothing to judge)
        const auto change = run_->governor->feed(*cost); // (the governor holds the rate now)
        if (!change)
            continue;
        log(peer_, change->why);
        // A rate perf record already holds: told, nothing restarts.
        if (!change->to_fp && run_->current->set_rate(change->frequency)) {
            if (!closed_)
                send_state(change->why);
            continue;
        }
        // Else the collection restarts at the new rate: the run's, whatever the link does
        // meanwhile (a stop or pause meanwhile ends it; the next start begins from what was
        // asked).
        run_->governor->restarted();
        co_await end_collection();
        if (run_->now != run_state::state::profiling || run_->current ||
            (closed_ && data_mode_ == data_mode::legacy))
            break;
        begin_collection();
        if (!closed_)
            send_state(change->why);
    }
    if (run_->watcher == this)
        run_->watcher = nullptr;
}

void session::send_flight(const std::string& reason, const std::string& capture, double at,
                          double window_s) {
    auto n = state_now(reason);
    if (!capture.empty()) {
        n.capture = capture;
        n.capture_at = at;
        n.capture_window = window_s;
    }
    // After the chunks made before it: the capture's window follows it.
    send(frame_flag::response, protocol::serialize(n), false, true);
}

void session::detach_run() {
    if (!owns_run())
        return;
    run_->attached = false;
    run_->owner = nullptr;
    run_->on_chunk = nullptr;
    run_->may_flush = nullptr;
    run_->on_end = nullptr;
    run_->on_flight = nullptr;
    // (A flight recorder holding its window needs no link: it ends only when asked.)
    if (run_->now != run_state::state::idle && data_mode_ != data_mode::legacy &&
        !(run_->flight && run_->flight->holding())) {
        auto task = end_when_offline_too_long(run_);
        asio::co_spawn(ex_, std::move(task), asio::detached);
    }
}

asio::awaitable<void> session::legacy_deadline() {
    // A collector that can resume asks for `sequence` right after the hello (after the
    // pairing code); one that does not within 10 s of it takes the data as before.
    if (data_mode_ != data_mode::held)
        co_return;
    if (!authenticated_) { // counted from the pairing code (set_authenticated wakes it)
        legacy_wait_.expires_at(asio::steady_timer::time_point::max());
        co_await legacy_wait_.async_wait(use_nothrow);
        if (closed_ || data_mode_ != data_mode::held)
            co_return;
    }
    legacy_wait_.expires_after(std::chrono::seconds(10));
    co_await legacy_wait_.async_wait(use_nothrow);
    if (closed_ || data_mode_ != data_mode::held)
        co_return;
    log(peer_, "the collector does not resume runs: data goes as to an older collector, and a "
               "lost link ends the run");
    data_mode_ = data_mode::legacy;
    sent_pos_ = run_->kept.front() ? run_->kept.front()->pos - 1 : run_->kept.last_pos();
    wake_writer_.cancel_one();
}

asio::awaitable<command_response> session::cmd_sequence(const protocol::command_request& req) {
    const auto* run_arg = req.args.if_contains("run");
    const auto* after_arg = req.args.if_contains("after");
    std::uint64_t after = 0;
    if (after_arg && after_arg->is_uint64())
        after = after_arg->as_uint64();
    else if (after_arg && after_arg->is_int64() && after_arg->as_int64() >= 0)
        after = static_cast<std::uint64_t>(after_arg->as_int64());
    else if (after_arg && !after_arg->is_null())
        co_return command_response::failure(req.id, "after must be a chunk number");
    if (data_mode_ == data_mode::sequenced)
        co_return command_response::failure(req.id, "already sequenced");
    const std::string run =
        run_arg && run_arg->is_string() ? std::string(run_arg->as_string()) : std::string();
    // What the collector has of the run it names goes; the rest is sent from the oldest held.
    sent_pos_ = run_->kept.stored(run, after);
    data_mode_ = data_mode::sequenced;
    legacy_wait_.cancel();
    wake_writer_.cancel_one();
    json::object f;
    f["run"] = run_->id.empty() ? json::value(nullptr) : json::value(run_->id);
    f["seq"] = last_seq_of_run(*run_);
    f["held"] = run_->kept.count();
    f["held_bytes"] = run_->kept.bytes();
    f["dropped_chunks"] = run_->kept.dropped_chunks();
    // Chunks of the run under way this link sent before it was asked (as flag 1): the
    // collector has them, and numbers the rest after them.
    f["sent"] = legacy_run_ == run_->id && !run_->id.empty() ? legacy_seq_ : 0;
    // What the run is doing: a collector that meets it again takes its state from here.
    f["state"] = run_state_name(*run_);
    f["pid"] =
        run_->settings.record.pid ? json::value(*run_->settings.record.pid) : json::value(nullptr);
    f["captures"] = capture_notes_ahead();
    if (run_->now != run_state::state::idle && !run.empty())
        log(peer_, "resuming run " + run + ": " + std::to_string(run_->kept.count()) +
                       " chunks to send (" + std::to_string(run_->kept.bytes() >> 10) + " KiB)");
    // A run that ended while no link was there: said after its last chunks.
    if (auto why = std::exchange(run_->ended_offline, std::nullopt)) {
        log(peer_, *why + "; idle");
        send_state(*why);
    }
    co_return command_response::success(req.id, std::move(f));
}

json::array session::capture_notes_ahead() const {
    // The captures whose chunks this link is still to send: what fired each, and where each
    // ends (a capture that began or ended while no link was there).
    std::set<std::string> ahead;
    for (auto* h = run_->kept.after(sent_pos_); h; h = run_->kept.after(h->pos))
        ahead.insert(h->run);
    json::array out;
    for (const auto& n : run_->capture_notes)
        if (ahead.count(n.run)) {
            json::object o{
                {"run", n.run}, {"trigger", n.trigger}, {"at", n.at}, {"window_s", n.window_s}};
            o["last_seq"] = n.last_seq ? json::value(*n.last_seq) : json::value(nullptr);
            out.push_back(std::move(o));
        }
    return out;
}

asio::awaitable<command_response> session::cmd_capture(const protocol::command_request& req) {
    // The collector's user asks a flight recorder for what it holds, now.
    const auto f = run_->flight;
    if (!f || run_->now != run_state::state::profiling)
        co_return command_response::failure(
            req.id, "not a flight recorder under way (the agent's --flight-recorder SECONDS)");
    const auto answer = fire(*run_, *f, "asked by the collector");
    if (answer == capture_plan::answer::refused)
        co_return command_response::failure(
            req.id, "the last capture began under " + std::to_string(f->settings.min_gap.count()) +
                        " s ago: try again later");
    json::object out{{"state", run_state_name(*run_)}, {"run", run_->id}};
    out["capture"] = answer == capture_plan::answer::begun ? "begun" : "extended";
    co_return command_response::success(req.id, std::move(out));
}

asio::awaitable<command_response> session::cmd_ack(const protocol::command_request& req) {
    const auto* run = req.args.if_contains("run");
    const auto* seq = req.args.if_contains("seq");
    if (!run || !run->is_string() || !seq || !(seq->is_uint64() || seq->is_int64()) ||
        (seq->is_int64() && seq->as_int64() < 0))
        co_return command_response::failure(req.id, "ack needs run and seq");
    const auto through =
        seq->is_uint64() ? seq->as_uint64() : static_cast<std::uint64_t>(seq->as_int64());
    (void)run_->kept.stored(run->as_string(), through);
    co_return command_response::success(req.id);
}

asio::awaitable<void> session::end_collection(bool drain) {
    if (!owns_run())
        co_return; // another connection's (a --listen agent's newcomer that did not pair)
    while (run_->current) {
        auto c = run_->current;
        c->request_stop(drain);
        co_await run_->collection_done.async_wait(use_nothrow);
        run_->collection_done.expires_at(asio::steady_timer::time_point::max());
    }
}

} // namespace agent
