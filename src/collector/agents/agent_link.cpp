#include "collector/agents/agent_link.hpp"

#include "collector/agents/admission.hpp"
#include "collector/agents/continuous.hpp"
#include "collector/agents/dial.hpp"
#include "collector/agents/kernel_turns.hpp"
#include "collector/agents/registry.hpp"
#include "collector/agents/runs.hpp"
#include "collector/agents/target_view.hpp"
#include "collector/live_session.hpp"
#include "collector/log.hpp"

#include "protocol/error.hpp"
#include "protocol/frame.hpp"
#include "protocol/frame_reader.hpp"
#include "protocol/link_stream.hpp"
#include "protocol/use_nothrow.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>

#include <algorithm>
#include <cmath>
#include <optional>

namespace collector {
using namespace asio::experimental::awaitable_operators;
using protocol::agent_state;
using protocol::command_response;
using protocol::frame_flag;
namespace json = boost::json;
using protocol::use_nothrow;

namespace {

// A call-graph mode an agent names, kept only if it is one perf has (anything else: unknown).
std::string known_callgraph(std::string_view mode) {
    for (const std::string_view known : {"fp", "dwarf", "lbr", "none"})
        if (mode == known)
            return std::string(known);
    return {};
}

// The next frame; with a `deadline` (before the hello), timed_out once it passes.
asio::awaitable<boost::system::result<protocol::frame>>
next_frame(protocol::frame_reader<protocol::link_stream>& frames, asio::steady_timer* deadline) {
    if (!deadline)
        co_return co_await frames.next();
    auto r = co_await (frames.next() || deadline->async_wait(use_nothrow));
    if (r.index() == 1)
        co_return make_error_code(asio::error::timed_out);
    co_return std::move(std::get<0>(r));
}

double wall_seconds() {
    return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch())
        .count();
}

// Data received but not yet stored and parsed, per connection: past either bound, reading
// pauses. One chunk is parsed while the next waits, no more: a collector that cannot keep up
// leaves the rest on the agent's side, where a slow link makes fewer, larger chunks, so what
// it shows lags by a chunk or two, never by a queue of them (and one agent's queue never
// delays the others' chunks on the shared pool).
constexpr std::size_t max_undigested_bytes = std::size_t{16} << 20;
constexpr std::size_t max_undigested_chunks = 2;
// While this collector waits for an answer, reading goes on up to larger bounds: the answer
// is behind whatever data the agent sent before it, and a command (a stop, a user's start
// taking over continuous profiling) must not wait for those chunks to be parsed — a parse
// held up by a large module's symbol table would make its answer late. An agent ends a run
// at once when told not to drain it and keeps little data queued (it waits to flush a chunk
// while 64 KiB are), so what lies before an answer is a few chunks in flight, well within.
constexpr std::size_t max_read_ahead_bytes = std::size_t{64} << 20;
constexpr std::size_t max_read_ahead_chunks = 64;
// Commands past their deadline whose answers still count (one start and a few more).
constexpr std::size_t max_late_answers = 8;

} // namespace

agent_link::agent_link(std::unique_ptr<protocol::link_stream> stream, app_context& app,
                       std::string target_id, std::optional<std::string> token, bool dialled)
    : stream_(std::move(stream))
    , ex_(stream_->get_executor())
    , app_(app)
    , id_(std::move(target_id))
    , token_(std::move(token))
    , dialled_(dialled)
    , idle_wake_(ex_, asio::steady_timer::time_point::max())
    , closed_wake_(ex_, asio::steady_timer::time_point::max())
    , wake_writer_(ex_, asio::steady_timer::time_point::max())
    , settled_(ex_, asio::steady_timer::time_point::max())
    , digested_(ex_, asio::steady_timer::time_point::max()) {
    boost::system::error_code ec;
    const auto ep = stream_->socket().remote_endpoint(ec);
    peer_ = ec ? "unknown" : ep.address().to_string() + ":" + std::to_string(ep.port());
    stream_->socket().set_option(asio::socket_base::keep_alive(true), ec);
    connected_at_ = wall_seconds();
}

agent_link::~agent_link() = default;

agent_link::security agent_link::link_security() const {
    security out;
    out.encrypted = stream_->encrypted();
    if (out.encrypted)
        out.tls = stream_->tls_version();
    out.pinned = dialled_ ? stream_->peer_pin() : std::string();
    if (!dialled_ && out.encrypted && hello_ && hello_->tls_check)
        out.pinned = *hello_->tls_check;
    return out;
}

void agent_link::set_updating(std::optional<update_progress> u) {
    updating_ = std::move(u);
    app_.changed(change::targets, id_);
}

std::optional<std::string> agent_link::dial_pin() const {
    if (!dialled_ || !stream_->encrypted())
        return std::nullopt;
    return stream_->peer_pin();
}

void agent_link::send(const std::string& payload) {
    if (closed_)
        return;
    out_.push_back(protocol::encode_frame(frame_flag::command, payload));
    wake_writer_.cancel_one();
}

void agent_link::hold(connection_budget::slot s) {
    slot_ = std::move(s);
    slot_.on_evict([weak = weak_from_this()] {
        if (auto link = weak.lock())
            link->close();
    });
}

void agent_link::close() {
    if (closed_)
        return;
    closed_ = true;
    stream_->close();
    wake_writer_.cancel();
    digested_.cancel();
    settled_.cancel();
    idle_wake_.cancel();
    closed_wake_.cancel();
    for (auto& [id, p] : pending_)
        p.timer->cancel();
}

asio::awaitable<void> agent_link::run() {
    auto self = shared_from_this();
    struct give_back {
        connection_budget::slot& slot;
        ~give_back() { slot.release(); }
    } giving_back{slot_};
    const auto end = app_.stops.on_stop([this] { close(); });
    if (!dialled_ && !co_await open_link()) {
        close();
        finish_session();
        co_return;
    }
    say("agent connected (" + id_ +
        (stream_->encrypted() ? ", " + stream_->tls_version() : ", plain TCP") + ")");
    agents::keeper_settings keeping;
    keeping.hz = app_.cfg.continuous_hz;
    keeping.chunk_s = std::min(5u, app_.cfg.continuous_session_s);
    co_await (reader() && writer() && agents::keep_profiling(self, keeping));
    close();
    finish_session();
    say("agent disconnected (" + id_ + ")");
}

bool agent_link::reading_paused() const noexcept {
    const bool answering = !pending_.empty();
    return undigested_bytes_ > (answering ? max_read_ahead_bytes : max_undigested_bytes) ||
           undigested_chunks_ >= (answering ? max_read_ahead_chunks : max_undigested_chunks);
}

void agent_link::say(const std::string& line) const {
    if (!probation_ || hello_) // on probation: closed without a word until it proves itself
        log(peer_, line);
}

asio::awaitable<bool> agent_link::open_link() {
    // The agent speaks first either way: a TLS ClientHello, or its hello frame. 10 s for the
    // first byte and the handshake, then the hello has its own 10 s.
    asio::steady_timer deadline(ex_, std::chrono::seconds(10));
    auto r = co_await (stream_->peer_opens_tls() || deadline.async_wait(use_nothrow));
    if (r.index() == 1) {
        say("no hello within 10 s; closing");
        co_return false;
    }
    const auto [ec, tls] = std::get<0>(r);
    if (ec) {
        if (!protocol::peer_went_away(ec) && ec != asio::error::operation_aborted)
            say("read: " + ec.message());
        co_return false;
    }
    if (!tls) {
        if (!app_.agent_tls_required)
            co_return true;
        say("a plain TCP agent, and this collector takes only TLS ones (--agent-tls "
            "required): start it with --tls-pin " +
            app_.tls_pin + "; closing");
        co_return false;
    }
    if (!app_.agent_tls) {
        say("the agent opens with TLS and this collector was not started with --tls; "
            "closing");
        co_return false;
    }
    const auto left = deadline.expiry() - asio::steady_timer::clock_type::now();
    const auto limit = std::max(left, left.zero());
    const auto why = co_await stream_->accept_tls(app_.agent_tls, limit);
    if (!why.empty()) {
        say(why + "; closing");
        co_return false;
    }
    co_return true;
}

asio::awaitable<void> agent_link::writer() {
    while (!closed_) {
        if (out_.empty()) {
            co_await wake_writer_.async_wait(use_nothrow);
            continue;
        }
        auto [ec, n] =
            co_await asio::async_write(*stream_, asio::buffer(out_.front()), use_nothrow);
        if (ec) {
            close();
            break;
        }
        out_.pop_front();
    }
}

asio::awaitable<void> agent_link::reader() {
    // The first frame (the hello) may be no larger than a hello: refused on its 5-byte header,
    // so a peer that has not introduced itself cannot make the collector hold more than that.
    protocol::frame_reader<protocol::link_stream> frames(*stream_, protocol::collector_max_frame,
                                                         64 << 10, protocol::hello_max_frame);
    // A peer that says nothing is dropped after 10 s.
    asio::steady_timer hello_deadline(ex_, std::chrono::seconds(10));
    while (!closed_) {
        while (reading_paused() && !closed_) {
            digested_.expires_at(asio::steady_timer::time_point::max());
            co_await digested_.async_wait(use_nothrow);
        }
        asio::steady_timer* deadline = hello_ ? nullptr : &hello_deadline; // (no ?: in co_await)
        auto f = co_await next_frame(frames, deadline);
        if (!f) {
            if (f.error() == asio::error::timed_out)
                say("no hello within 10 s; closing");
            else if (auto why = protocol::peer_went_away(f.error())
                                    ? std::string()
                                    : protocol::read_end_reason(f.error());
                     !why.empty())
                say(why);
            break;
        }
        on_frame(std::move(*f));
    }
    close();
}

void agent_link::on_hello(protocol::frame&& f) {
    auto h = f.flag == frame_flag::response
                 ? protocol::parse_hello(f.payload)
                 : protocol::parse_result<protocol::hello>(protocol::parse_error{
                       protocol::errc::invalid_message, "first frame must be the hello"});
    if (!h) {
        say("bad hello: " + h.error().message() + "; closing");
        close();
        return;
    }
    if (h->version != protocol::protocol_version) {
        say("the agent speaks protocol version " + std::to_string(h->version) +
            "; this collector speaks " + std::to_string(protocol::protocol_version) +
            ": update one of them; closing");
        close();
        return;
    }
    // Enrollment: an agent that dialled in proves it may store sessions here (the token is
    // never kept, logged or written); its label names its devices in the fleet store.
    const auto presented = std::exchange(h->enrollment, std::nullopt);
    std::string label;
    if (!dialled_ && !app_.enrollment.empty()) {
        auto enrolled = agents::enrolled_as(app_.enrollment, presented);
        if (!enrolled) {
            say(presented ? "wrong enrollment token; closing"
                          : "agent not enrolled: start it with PERFWIRE_ENROLL_TOKEN set "
                            "to this collector's enrollment token; closing");
            close();
            return;
        }
        label = std::move(*enrolled);
    }
    hello_ = std::move(*h);
    slot_.prove(); // counts against the unproven agents' cap no more
    device_key_ = (dialled_ ? "dialled|" : "dialled-in|") + label + "|" +
                  hello_->hostname.value_or(hello_->agent);
    session_meta_["agent"] = hello_->agent;
    session_meta_["agent_version"] = hello_->agent_version.value_or("");
    session_meta_["hostname"] = hello_->hostname.value_or("");
    if (!label.empty())
        session_meta_["enrolled_as"] = label;
    session_meta_["peer"] = peer_;
    session_meta_["started_at"] = connected_at_;
    session_meta_["live"] = true;
    session_meta_["platform"] = agents::platform_json(*hello_);
    state_ = agent_state::idle;
    log(peer_, "hello from " + hello_->agent + " " + hello_->agent_version.value_or("?") + " on " +
                   hello_->hostname.value_or("?"));
    if (!token_) {
        settled_.cancel(); // ready: no code to present
        ask_sequence();
    }
    if (token_) {
        // Authenticate; the response arrives like any other.
        state_ = agent_state::authenticating;
        auto self = shared_from_this();
        asio::co_spawn(
            ex_,
            [self]() -> asio::awaitable<void> {
                json::object args;
                args["token"] = *self->token_;
                const auto r =
                    co_await self->command(std::string(protocol::cmd::auth), std::move(args));
                if (!r.ok) {
                    log(self->peer_, "agent refused the pairing code: " + r.error);
                    self->close();
                } else if (self->state_ == agent_state::authenticating) {
                    self->state_ = agent_state::idle;
                    self->ask_sequence(); // before any other command is asked
                    self->settled_.cancel();
                    self->app_.changed(change::targets, self->id_);
                }
            },
            [peer = peer_](std::exception_ptr e) {
                if (e)
                    log(peer, "pairing failed: " + protocol::describe(e));
            });
    }
    app_.changed(change::targets, id_);
}

// Kernel frames the device could not name: its kallsyms, once per connection. An agent may
// refuse (it was not started with --allow-kallsyms, or its kernel hides the addresses); the
// session then says why.
void agent_link::give_kernel_symbols() {
    if (kernel_.answered) {
        if (kernel_.given_to != session_->id()) { // a later run on this connection
            kernel_.given_to = session_->id();
            session_->kernel(kernel_.table, kernel_.why);
        }
        return;
    }
    if (kernel_.asked)
        return;
    kernel_.asked = true;
    auto self = shared_from_this();
    asio::co_spawn(
        ex_,
        [self]() -> asio::awaitable<void> {
            auto answer = co_await agents::ask_kernel_symbols(self->app_, self);
            if (!answer)
                co_return; // closed before its turn
            auto& k = self->kernel_;
            k.table = std::move(answer->table);
            k.why = std::move(answer->why);
            k.answered = true;
            if (self->session_) {
                k.given_to = self->session_->id();
                self->session_->kernel(k.table, k.why);
            }
        },
        [peer = peer_](std::exception_ptr e) {
            if (e)
                log(peer, "asking for kernel symbols failed: " + protocol::describe(e));
        });
}

bool agent_link::open_session() {
    if (!session_ && !run_id_.empty())
        take_run(run_id_); // its session, if this collector holds one
    if (session_)
        return true;
    json::object meta = session_meta_;
    meta["started_at"] = wall_seconds();
    if (pid_)
        meta["pid"] = *pid_;
    if (!callgraph_.empty())
        meta["callgraph"] = callgraph_;
    if (frequency_)
        meta["frequency"] = *frequency_;
    if (!origin_.empty())
        meta["origin"] = std::exchange(origin_, {});
    if (continuous_run_)
        meta["continuous"] = true;
    if (!pending_capture_.empty()) // what fired a flight recorder's capture
        meta["capture"] = std::exchange(pending_capture_, {});
    else if (const auto note = capture_notes_.find(run_id_); note != capture_notes_.end())
        meta["capture"] = note->second.capture; // one that began while the link was down
    if (!run_id_.empty()) { // found again by its device and id when the link comes back
        meta["run_id"] = run_id_;
        meta["run_device"] = device_key_;
    }
    session_opened_ = std::chrono::steady_clock::now();
    // Kernel frames its device could not name: its kallsyms, asked once per connection.
    auto kernel_wanted = [weak = weak_from_this()] {
        if (auto self = weak.lock();
            self && self->session_ && self->session_->wants_kernel_symbols())
            self->give_kernel_symbols();
    };
    auto created = live_session::open(app_, peer_, hello_->hostname.value_or(hello_->agent), meta,
                                      kernel_wanted);
    if (!created) {
        log(peer_, "cannot create a session on disk: " + created.error().message() + "; closing");
        close();
        return false;
    }
    session_ = std::move(*created);
    session_id_ = session_->id();
    if (!run_id_.empty()) {
        auto& r = app_.agents.runs().at(run_key());
        r.session_id = session_id_;
        r.holder = weak_from_this();
    }
    for (const auto& [type, record] : kept_metrics_.records())
        session_->metrics(record);
    log(peer_, "session " + session_id_);
    app_.changed(change::targets, id_);
    return true;
}

void agent_link::on_frame(protocol::frame&& f) {
    if (!hello_) {
        on_hello(std::move(f));
        return;
    }
    // A session is a run: it opens when the agent says it is profiling, or with its first
    // data. Metrics belong to the run in progress; between runs only the last record of each
    // type is kept, and the next run starts with them (the binaries' build-ids come first).
    // A continuous run is cut into sessions of --continuous-session seconds, between chunks.
    if (f.flag == frame_flag::sequenced) {
        on_sequenced(std::move(f));
        return;
    }
    const bool data = f.flag == frame_flag::text || f.flag == frame_flag::zstd;
    if (data && session_ && continuous_run_ &&
        std::chrono::steady_clock::now() - session_opened_ >=
            std::chrono::seconds(app_.cfg.continuous_session_s))
        end_session();
    if (data && !open_session())
        return;

    switch (f.flag) {
    case frame_flag::text:
    case frame_flag::zstd: {
        if (state_ == agent_state::idle || state_ == agent_state::armed)
            set_state(agent_state::profiling);
        const std::size_t n = f.payload.size();
        undigested_bytes_ += n;
        ++undigested_chunks_;
        session_->chunk(f.flag == frame_flag::zstd, std::move(f.payload),
                        [self = shared_from_this(), n](bool) {
                            self->undigested_bytes_ -= n;
                            --self->undigested_chunks_;
                            self->digested_.cancel();
                        });
        break;
    }
    case frame_flag::metrics: {
        // Parsed and written again: only the known fields of a known type reach the disk and
        // the browsers, as one line of JSON.
        std::optional<protocol::health_metrics> parsed;
        std::string refused = std::to_string(f.payload.size()) + " bytes, over the limit";
        if (f.payload.size() <= protocol::max_metrics_frame) {
            auto r = protocol::parse_metrics(f.payload);
            if (r)
                parsed = std::move(*r);
            else
                refused = r.error().message();
        }
        if (!parsed) {
            if (!std::exchange(metrics_refusal_logged_, true))
                log(peer_, "metrics refused (logged once): " + refused);
            break;
        }
        if (auto* fl = std::get_if<protocol::flight_metrics>(&*parsed)) {
            // (Said bounded and printable: an agent chooses its words.)
            for (auto* text : {&fl->log_problem, &fl->last_fired})
                if (*text)
                    **text = peer_text(**text, 200);
            for (auto& [key, value] : fl->triggers)
                value = peer_text(value, 600);
            if (state_ != agent_state::idle) {
                flight_ = *fl;
                app_.changed(change::targets, id_);
            }
        }
        auto record = protocol::serialize(*parsed);
        kept_metrics_.keep(*parsed, record);
        if (session_)
            session_->metrics(std::move(record));
        break;
    }
    case frame_flag::response: {
        auto reply = protocol::parse_agent_reply(f.payload);
        if (!reply) {
            log(peer_, "bad response ignored: " + reply.error().message());
            break;
        }
        if (auto* n = std::get_if<protocol::state_notice>(&*reply)) {
            pid_ = n->pid; // null: the whole system
            if (n->run && protocol::valid_run_id(*n->run) && hello_->resumable.value_or(false) &&
                n->state != "idle" && *n->run != run_id_ && !session_)
                run_id_ = *n->run; // a run the agent began itself: its session is the run's
            if (state_ == agent_state::idle)
                callgraph_.clear(); // a run the agent began itself: its mode as it says
            if (n->callgraph)
                callgraph_ = known_callgraph(*n->callgraph);
            // The agent changed the rate of the run under way (its --max-overhead): said in
            // the session, whose views weigh samples by their period.
            if (n->frequency && *n->frequency > 0 && *n->frequency <= 100000) {
                if (frequency_ && *frequency_ != *n->frequency && session_ &&
                    n->state == "profiling")
                    session_->rate_change(wall_seconds(), *frequency_, *n->frequency, callgraph_,
                                          n->reason ? peer_text(*n->reason, 200) : std::string());
                frequency_ = *n->frequency;
            }
            // (Kept and logged bounded: an agent chooses its reasons.)
            state_reason_ = n->reason ? peer_text(*n->reason, 200) : std::string();
            log(peer_, "agent is " + peer_text(n->state, 32) +
                           (state_reason_.empty() ? "" : ": " + state_reason_));
            // A flight recorder's capture begins: said in the session it opens.
            if (n->capture && n->state == "profiling") {
                json::object c{{"trigger", peer_text(*n->capture, 200)}};
                if (n->capture_at && std::isfinite(*n->capture_at))
                    c["fired_at"] = std::clamp(*n->capture_at, 0.0, 1e11);
                if (n->capture_window && std::isfinite(*n->capture_window))
                    c["window_s"] = std::clamp(*n->capture_window, 0.0, 86400.0);
                pending_capture_ = std::move(c);
            }
            if (const auto st = protocol::agent_state_from(n->state);
                st && *st != agent_state::connecting && *st != agent_state::authenticating)
                set_state(*st);
            app_.changed(change::targets, id_);
        } else if (auto* r = std::get_if<command_response>(&*reply)) {
            if (const auto it = pending_.find(r->id); it != pending_.end()) {
                on_answer(it->second, *r);
                it->second.result = std::move(*r);
                it->second.timer->cancel();
            } else if (const auto late =
                           std::find_if(late_.begin(), late_.end(),
                                        [&](const auto& l) { return l.first == r->id; });
                       late != late_.end()) {
                log(peer_, "late answer to " + late->second.cmd + ": " +
                               (r->ok ? std::string("ok") : r->error));
                on_answer(late->second, *r);
                late_.erase(late);
                app_.changed(change::targets, id_);
            }
        }
        break;
    }
    case frame_flag::command:
        log(peer_, "agent sent a command frame; ignored");
        break;
    case frame_flag::sequenced:
        break; // (on_sequenced)
    }
}

asio::awaitable<command_response>
agent_link::command(std::string cmd, json::object args,
                    std::optional<std::chrono::milliseconds> timeout, bool continuous) {
    auto self = shared_from_this();
    const std::string id = "c" + std::to_string(next_command_++);
    if (closed_)
        co_return command_response::failure(id, "agent disconnected");
    std::optional<int> asked_pid; // a start names the process it profiles
    if (const auto* p = args.if_contains("pid"); p && p->is_int64())
        asked_pid = static_cast<int>(p->as_int64());
    asio::steady_timer timer(ex_, timeout ? *timeout : agents::deadline_for(cmd));
    pending_[id] = pending{std::nullopt, &timer, cmd, asked_pid, continuous};
    digested_.cancel(); // a reader paused on the parse's backlog reads on to the answer
    send(protocol::serialize(protocol::command_request{id, cmd, std::move(args)}));
    co_await timer.async_wait(use_nothrow);
    auto asked = std::move(pending_[id]);
    pending_.erase(id);
    auto result = std::move(asked.result);
    if (!result && !closed_) {
        asked.timer = nullptr;
        late_.emplace_back(id, std::move(asked));
        if (late_.size() > max_late_answers)
            late_.pop_front();
    }
    if (!result)
        co_return command_response::failure(id, closed_ ? "agent disconnected"
                                                        : "no answer from the agent in time");
    co_return std::move(*result);
}

void agent_link::on_answer(const pending& asked, const command_response& answer) {
    if (!answer.ok) {
        if (asked.cmd == protocol::cmd::start)
            origin_.clear(); // (not this run's: there is none)
        return;
    }
    // What the agent is doing now, for /api/targets: what its answer says ("state"); an
    // agent that does not say is taken at its word that the command did what it names.
    std::optional<agent_state> now;
    if (const auto* st = answer.fields.if_contains("state"); st && st->is_string())
        now = protocol::agent_state_from(st->as_string());
    else if (asked.cmd == protocol::cmd::start || asked.cmd == protocol::cmd::resume)
        now = agent_state::profiling;
    else if (asked.cmd == protocol::cmd::stop)
        now = agent_state::idle;
    else if (asked.cmd == protocol::cmd::pause)
        now = agent_state::paused;
    if (asked.cmd == protocol::cmd::start) {
        if (const auto* p = answer.fields.if_contains("pid"); p && p->is_int64())
            pid_ = static_cast<int>(p->as_int64());
        else
            pid_ = asked.asked_pid; // none: the whole system
        const auto* cg = answer.fields.if_contains("callgraph");
        callgraph_ = cg && cg->is_string() ? known_callgraph(cg->as_string()) : std::string();
        const auto* hz = answer.fields.if_contains("frequency");
        frequency_ = hz && hz->is_int64() && hz->as_int64() > 0 && hz->as_int64() <= 100000
                         ? std::optional<int>(static_cast<int>(hz->as_int64()))
                         : std::nullopt;
        continuous_run_ = asked.continuous;
        // The run's id, so its session is found again when the link comes back.
        if (const auto* run = answer.fields.if_contains("run");
            run && run->is_string() && protocol::valid_run_id(run->as_string()) &&
            hello_->resumable.value_or(false) && !session_)
            run_id_ = std::string(run->as_string());
    }
    if (asked.cmd == protocol::cmd::sequence) {
        take_capture_notes(answer.fields.if_contains("captures"));
        sequence_state_ = now;
        // The run's chunks the agent sent before it was asked, unnumbered: taken already.
        const auto* run = answer.fields.if_contains("run");
        const auto* sent = answer.fields.if_contains("sent");
        const std::uint64_t n = !sent               ? 0
                                : sent->is_uint64() ? sent->as_uint64()
                                : sent->is_int64() && sent->as_int64() > 0
                                    ? static_cast<std::uint64_t>(sent->as_int64())
                                    : 0;
        if (run && run->is_string() && protocol::valid_run_id(run->as_string()) && n > 0) {
            auto& r = app_.agents.runs().at(agents::run_book::key(device_key_, run->as_string()));
            r.received = std::max(r.received, n);
        }
        // What the agent held when the link came back: the catch-up ahead.
        const auto* last = answer.fields.if_contains("seq");
        const auto* held_bytes = answer.fields.if_contains("held_bytes");
        if (run && run->is_string() && protocol::valid_run_id(run->as_string()) && last &&
            (last->is_int64() || last->is_uint64())) {
            const auto* r =
                app_.agents.runs().find(agents::run_book::key(device_key_, run->as_string()));
            const std::uint64_t to =
                last->is_uint64()
                    ? last->as_uint64()
                    : static_cast<std::uint64_t>(std::max<std::int64_t>(last->as_int64(), 0));
            if (r && to > r->received + 1) {
                catch_up_run_ = std::string(run->as_string());
                catch_up_to_ = to;
                catch_up_from_ = r->received;
                catch_up_bytes_ = held_bytes && held_bytes->is_int64()
                                      ? static_cast<std::uint64_t>(
                                            std::max<std::int64_t>(held_bytes->as_int64(), 0))
                                      : 0;
            }
        }
        // A run under way (one this collector may hold the session of, from before the link
        // dropped or before it restarted): the state below opens it as that run's.
        const auto* st = answer.fields.if_contains("state");
        if (run && run->is_string() && protocol::valid_run_id(run->as_string()) && st &&
            st->is_string() && st->as_string() != "idle" && !session_) {
            run_id_ = std::string(run->as_string());
            const auto* p = answer.fields.if_contains("pid");
            pid_ = p && p->is_int64() ? std::optional<int>(static_cast<int>(p->as_int64()))
                                      : std::nullopt;
        }
    }
    if (now)
        set_state(*now); // a started run is a session from now on, before its first data
}

void agent_link::take_capture_notes(const json::value* notes) {
    capture_notes_.clear();
    if (!notes || !notes->is_array())
        return;
    for (const auto& v : notes->as_array()) {
        const auto* o = v.if_object();
        const auto* run = o ? o->if_contains("run") : nullptr;
        const auto* trigger = o ? o->if_contains("trigger") : nullptr;
        if (!run || !run->is_string() || !protocol::valid_run_id(run->as_string()) || !trigger ||
            !trigger->is_string())
            continue;
        capture_note n;
        n.capture["trigger"] = peer_text(trigger->as_string(), 200);
        const auto number = [&](const char* key, double most) -> std::optional<double> {
            const auto* x = o->if_contains(key);
            if (!x || !x->is_number())
                return std::nullopt;
            const double d = x->to_number<double>();
            return std::isfinite(d) ? std::optional(std::clamp(d, 0.0, most)) : std::nullopt;
        };
        if (const auto at = number("at", 1e11))
            n.capture["fired_at"] = *at;
        if (const auto w = number("window_s", 86400))
            n.capture["window_s"] = *w;
        if (const auto* last = o->if_contains("last_seq"); last && last->is_uint64())
            n.last_seq = last->as_uint64();
        else if (last && last->is_int64() && last->as_int64() >= 0)
            n.last_seq = static_cast<std::uint64_t>(last->as_int64());
        capture_notes_[std::string(run->as_string())] = std::move(n);
        if (capture_notes_.size() >= 16)
            break; // (an agent keeps its last 16)
    }
}

void agent_link::set_state(agent_state now) {
    if (now == state_)
        return;
    const bool running = state_ == agent_state::profiling || state_ == agent_state::paused;
    state_ = now;
    // (A flight recorder armed again: its capture, a run of its own, is over.)
    if (now == agent_state::idle || now == agent_state::armed)
        pending_capture_ = {}; // (a capture never opened is no later session's)
    if (now == agent_state::idle) {
        flight_.reset();
        kept_metrics_.forget("flight");
        frequency_.reset();
    }
    if (running && (now == agent_state::idle || now == agent_state::armed)) {
        end_session(); // everything of the run arrived before the answer or notice that says so
        if (!run_id_.empty()) { // the run is over: what comes of it later is sent twice
            if (auto* r = app_.agents.runs().find(run_key())) {
                r->ended = true;
                r->holder.reset();
            }
            run_id_.clear();
        }
        continuous_run_ = false;
        idle_wake_.cancel(); // --continuous starts it again
    } else if (!running && now == agent_state::profiling && hello_)
        (void)open_session(); // a run began (a start, or --pid on the agent's command line)
    app_.changed(change::targets, id_);
}

void agent_link::end_session() {
    if (!session_)
        return;
    last_session_id_ = session_id_;
    std::exchange(session_, nullptr)->end(wall_seconds(), pid_);
    session_id_.clear();
}

void agent_link::finish_session() {
    app_.agents.remove(id_);
    if (hello_) // a connection that never said hello was never listed
        app_.changed(change::targets, id_);
    if (park_session()) {
        // An agent this collector dialled cannot dial back: it is dialled again, as before.
        if (dialled_ && !dial_host_.empty() && !app_.stops.stopping())
            agents::redial_for_run(app_, {dial_host_, dial_port_, token_, dial_pin()}, run_key());
        return;
    }
    if (session_ && !run_id_.empty() && app_.stops.stopping() &&
        (state_ == agent_state::profiling || state_ == agent_state::paused))
        session_->keep_run_open(); // continued when the device is back after a restart
    end_session();
}

asio::awaitable<void> agent_link::went_idle(std::chrono::milliseconds timeout) {
    auto self = shared_from_this();
    if (closed_)
        co_return;
    idle_wake_.expires_after(timeout);
    co_await idle_wake_.async_wait(use_nothrow);
}

asio::awaitable<bool> agent_link::wait_closed(std::chrono::steady_clock::duration timeout) {
    auto self = shared_from_this();
    if (!closed_) {
        closed_wake_.expires_after(timeout);
        co_await closed_wake_.async_wait(use_nothrow);
    }
    co_return closed_;
}

asio::awaitable<bool> agent_link::ready(std::chrono::steady_clock::duration timeout) {
    auto self = shared_from_this();
    asio::steady_timer deadline(ex_, timeout);
    while (!closed_ && pending_ready()) {
        auto r = co_await (settled_.async_wait(use_nothrow) || deadline.async_wait(use_nothrow));
        if (r.index() == 1)
            break;
    }
    co_return !closed_ && !pending_ready();
}

} // namespace collector

namespace collector {

std::string agent_link::run_key() const {
    return agents::run_book::key(device_key_, run_id_);
}

std::optional<agent_link::catching_up> agent_link::catch_up() const {
    if (catch_up_run_.empty())
        return std::nullopt;
    const auto* r = app_.agents.runs().peek(agents::run_book::key(device_key_, catch_up_run_));
    if (!r || r->received >= catch_up_to_)
        return std::nullopt;
    return catching_up{catch_up_to_ - r->received, catch_up_to_ - catch_up_from_, catch_up_bytes_};
}

void agent_link::ask_sequence() {
    if (!hello_ || !hello_->resumable.value_or(false) || closed_)
        return;
    // The run it carries (if any): which of its chunks this collector has, so none is sent
    // twice. A run held by another link of this device (one not yet known dead) moves here.
    std::uint64_t after = 0;
    json::object args;
    args["run"] = nullptr;
    if (hello_->run) {
        const auto key = agents::run_book::key(device_key_, hello_->run->id);
        if (auto* r = app_.agents.runs().find(key)) {
            if (auto other = r->holder.lock(); other && other.get() != this)
                other->release_run();
            // What is on disk: a chunk taken but not stored yet is sent again, and skipped
            // while this collector still holds it (a crash meanwhile: stored then).
            after = r->stored;
        }
        args["run"] = hello_->run->id;
        if (hello_->run->offline_max)
            offline_max_ = std::chrono::seconds(static_cast<std::int64_t>(
                std::clamp(*hello_->run->offline_max, 0.0, 30.0 * 86400)));
    }
    args["after"] = after;
    auto self = shared_from_this();
    asio::co_spawn(
        ex_,
        [self, args]() mutable -> asio::awaitable<void> {
            const auto r =
                co_await self->command(std::string(protocol::cmd::sequence), std::move(args));
            if (!r.ok) {
                log(self->peer_, "the agent does not resume runs: " + r.error);
                co_return;
            }
            const auto* held = r.fields.if_contains("held");
            const auto* bytes = r.fields.if_contains("held_bytes");
            if (held && held->is_number() && held->to_number<double>() > 0)
                log(self->peer_, "the agent sends its run's chunks this collector lacks: " +
                                     std::to_string(held->to_number<std::uint64_t>()) + " held (" +
                                     std::to_string(bytes && bytes->is_number()
                                                        ? bytes->to_number<std::uint64_t>() >> 10
                                                        : 0) +
                                     " KiB)");
        },
        [peer = peer_](std::exception_ptr e) {
            if (e)
                log(peer, "asking for the run's sequence failed: " + protocol::describe(e));
        });
}

void agent_link::take_run(const std::string& run) {
    auto& book = app_.agents.runs();
    if (!run_id_.empty() && session_)
        end_session(); // the run before ended on the agent (its end notice said so)
    run_id_ = run;
    auto& r = book.at(run_key());
    if (r.ended) {
        // Closed here (given up after --offline-max, or its end was said): what comes now is
        // a session of its own; chunks already taken stay skipped.
        log(peer_, "run " + run + " had been closed here (session " + r.session_id +
                       "): its further chunks make a new session");
        r.ended = false;
        r.session_id.clear();
    }
    if (auto other = r.holder.lock(); other && other.get() != this)
        other->release_run();
    if (!r.parked && r.on_disk && !r.session_id.empty()) {
        // Saved as this collector stopped (or crashed) mid-run: it goes on.
        r.on_disk = false;
        auto kernel_wanted = [weak = weak_from_this()] {
            if (auto self = weak.lock();
                self && self->session_ && self->session_->wants_kernel_symbols())
                self->give_kernel_symbols();
        };
        auto reopened = live_session::reopen(app_, peer_, r.session_id, kernel_wanted);
        if (reopened)
            r.parked = std::move(*reopened);
        else
            log(peer_, "cannot continue session " + r.session_id + " of run " + run + ": " +
                           reopened.error().message() + "; a new session takes the rest");
        if (!reopened)
            r.session_id.clear();
    }
    if (r.parked) {
        if (session_)
            end_session();
        continuous_run_ = r.continuous;
        session_opened_ = std::chrono::steady_clock::now();
        session_ = std::move(r.parked);
        session_id_ = session_->id();
        const double now = wall_seconds();
        const std::uint64_t late = !catch_up_run_.empty() && catch_up_run_ == run
                                       ? catch_up_to_ - std::min(catch_up_to_, r.received)
                                       : 0;
        if (r.link_down_at > 0)
            session_->link_gap(r.link_down_at, now, late);
        log(peer_,
            "run " + run + " resumed in session " + session_id_ +
                (r.link_down_at > 0
                     ? " after " + std::to_string(static_cast<long long>(now - r.link_down_at)) +
                           " s without a link"
                     : std::string()));
        app_.changed(change::targets, id_);
    } else if (session_ && r.session_id.empty()) {
        r.session_id = session_id_; // the session this link opened for the run's start
    }
    r.holder = weak_from_this();
}

void agent_link::on_sequenced(protocol::frame&& f) {
    auto chunk = protocol::split_sequenced(f.payload);
    if (!chunk || !hello_->resumable.value_or(false)) {
        say(chunk ? "a sequenced chunk from an agent that did not say it resumes runs; closing"
                  : "a sequenced chunk without its run, number or data; closing");
        close();
        return;
    }
    // Exactly once: a number taken already is skipped, before anything else (a run that
    // ended here sends its unacknowledged last chunks again).
    if (auto* known = app_.agents.runs().find(agents::run_book::key(device_key_, chunk->run));
        known && chunk->seq <= known->received) {
        ++known->duplicates;
        return;
    }
    // A continuous run is cut into sessions of --continuous-session seconds, between chunks.
    if (session_ && continuous_run_ &&
        std::chrono::steady_clock::now() - session_opened_ >=
            std::chrono::seconds(app_.cfg.continuous_session_s)) {
        end_session();
        if (auto* r = app_.agents.runs().find(run_key()))
            r->session_id.clear();
    }
    if (chunk->run != run_id_ || !session_)
        take_run(chunk->run);
    auto* r = &app_.agents.runs().at(run_key());
    // One past a gap says how many the agent's buffers let go.
    // A number far ahead of anything the run could have made is a peer's lie, not a gap.
    constexpr std::uint64_t max_gap = std::uint64_t{1} << 24;
    if (chunk->seq - r->received > max_gap) {
        say("a chunk numbered " + std::to_string(chunk->seq) + " in a run at " +
            std::to_string(r->received) + "; closing");
        close();
        return;
    }
    if (chunk->seq > r->received + 1) {
        r->missing += chunk->seq - r->received - 1;
        log(peer_, std::to_string(chunk->seq - r->received - 1) + " chunks of run " + run_id_ +
                       " never came (the device's buffer let them go)");
    }
    const auto seq = chunk->seq;
    if (state_ == agent_state::idle || state_ == agent_state::armed)
        set_state(agent_state::profiling);
    if (!open_session())
        return; // (closed: the agent sends it again, to this collector or the next)
    // Taken once a session holds it (the book's entry found again: opening may have made it).
    r = &app_.agents.runs().at(run_key());
    r->received = seq;
    if (!catch_up_run_.empty() && chunk->run == catch_up_run_ &&
        (seq % 8 == 0 || seq >= catch_up_to_))
        app_.changed(change::targets, id_); // how far the catch-up is, now and then
    f.payload.erase(0, protocol::sequence_size);
    const std::size_t n = f.payload.size();
    undigested_bytes_ += n;
    ++undigested_chunks_;
    session_->chunk(
        true, std::move(f.payload),
        [self = shared_from_this(), n, key = run_key(), run = run_id_, seq](bool stored) {
            self->undigested_bytes_ -= n;
            --self->undigested_chunks_;
            self->digested_.cancel();
            // Acknowledged once on disk: a collector that crashes after it still has it. (By
            // the chunk's run: its last chunks are acknowledged after the run ended here.)
            if (auto* entry = self->app_.agents.runs().find(key); entry && stored)
                entry->stored = std::max(entry->stored, seq);
            self->ack_run(run);
        },
        seq);
    // A capture that ended while the link was down: its session ends with its last chunk, and
    // the agent is as it said when the link came back (armed again, or idle).
    if (const auto note = capture_notes_.find(run_id_);
        note != capture_notes_.end() && note->second.last_seq && seq >= *note->second.last_seq) {
        capture_notes_.erase(note);
        set_state(sequence_state_ == agent_state::idle ? agent_state::idle : agent_state::armed);
    }
}

void agent_link::ack_run(const std::string& run) {
    if (acking_) {
        ack_next_ = run; // once the one in flight is answered
        return;
    }
    if (closed_ || run.empty())
        return;
    const auto* r = app_.agents.runs().peek(agents::run_book::key(device_key_, run));
    if (!r || (acked_run_ == run && r->stored <= acked_))
        return;
    acking_ = true;
    json::object args;
    args["run"] = run;
    args["seq"] = r->stored;
    auto self = shared_from_this();
    asio::co_spawn(
        ex_,
        [self, args, run, seq = r->stored]() mutable -> asio::awaitable<void> {
            const auto answer =
                co_await self->command(std::string(protocol::cmd::ack), std::move(args));
            self->acking_ = false;
            if (answer.ok) {
                self->acked_run_ = run;
                self->acked_ = seq;
            }
            // What was stored meanwhile, of this run or the next.
            const auto next = std::exchange(self->ack_next_, std::string());
            self->ack_run(next.empty() ? run : next);
        },
        [peer = peer_](std::exception_ptr e) {
            if (e)
                log(peer, "acknowledging the run failed: " + protocol::describe(e));
        });
}

bool agent_link::park_session() {
    if (!session_ || run_id_.empty() || app_.stops.stopping() ||
        (state_ != agent_state::profiling && state_ != agent_state::paused))
        return false;
    auto* r = app_.agents.runs().find(run_key());
    if (!r || r->ended)
        return false;
    r->parked = std::move(session_);
    r->continuous = continuous_run_;
    r->link_down_at = wall_seconds();
    r->parked->link_down(r->link_down_at);
    r->wait_until = std::chrono::steady_clock::now() + offline_max_ + std::chrono::minutes(1);
    r->holder.reset();
    log(peer_, "the link went mid-run: session " + session_id_ + " waits for run " + run_id_ +
                   " to come back (up to " + std::to_string(offline_max_.count()) + " s)");
    for (auto& given_up :
         app_.agents.runs().parked_beyond(device_key_, agents::run_book::max_parked_per_device)) {
        log(peer_, "too many runs of this device wait for their link: session " + given_up->id() +
                       " ends");
        given_up->end(wall_seconds());
    }
    last_session_id_ = session_id_;
    session_id_.clear();
    return true;
}

void agent_link::release_run() {
    if (session_ && !run_id_.empty()) {
        if (auto* r = app_.agents.runs().find(run_key()); r && !r->ended && !r->parked) {
            log(peer_, "the device is back on another connection: it takes run " + run_id_);
            r->parked = std::move(session_);
            r->continuous = continuous_run_;
            r->link_down_at = wall_seconds();
            r->parked->link_down(r->link_down_at);
            r->wait_until = std::chrono::steady_clock::now() + offline_max_;
            r->holder.reset();
            session_id_.clear();
        }
    }
    run_id_.clear();
    close();
}

} // namespace collector
