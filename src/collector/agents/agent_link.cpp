#include "collector/agents/agent_link.hpp"

#include "collector/accepting.hpp"

#include "collector/live_session.hpp"
#include "collector/log.hpp"

#include "protocol/digest.hpp"
#include "protocol/error.hpp"
#include "protocol/frame.hpp"
#include "protocol/frame_reader.hpp"
#include "protocol/link_stream.hpp"
#include "protocol/pairing.hpp"
#include "protocol/tls.hpp"
#include "protocol/update.hpp"
#include "protocol/use_nothrow.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/connect.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>

#include <algorithm>
#include <optional>
#include <unordered_map>

namespace collector {
using namespace asio::experimental::awaitable_operators;
using asio::ip::tcp;
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
// Bytes of an agent build per update_data command (base64 in JSON: ~512 KiB a frame).
constexpr std::size_t update_piece = std::size_t{384} << 10;

// Connections per source address: a bucket of `burst` that refills at `per_second`. A flood of
// connect-hello-close from one address is refused at accept, before a byte is read (where agents
// enroll, past a second, larger bucket); the buckets stay bounded however many addresses there
// are.
class admission {
public:
    enum class verdict { admit, refuse, refuse_first };

    admission(double burst_size, double rate)
        : burst(burst_size)
        , per_second(rate) {}

    verdict check(const std::string& address, std::chrono::steady_clock::time_point now) {
        if (buckets_.size() >= max_addresses)
            std::erase_if(buckets_, [&](const auto& kv) { return level(kv.second, now) >= burst; });
        if (buckets_.size() >= max_addresses)
            buckets_.clear(); // a spread-out flood: start over rather than grow
        auto [it, fresh] = buckets_.try_emplace(address, bucket{burst, now, false});
        bucket& b = it->second;
        b.tokens = level(b, now);
        b.at = now;
        if (b.tokens >= 1) {
            b.tokens -= 1;
            b.refusing = false;
            return verdict::admit;
        }
        return std::exchange(b.refusing, true) ? verdict::refuse : verdict::refuse_first;
    }

private:
    struct bucket {
        double tokens;
        std::chrono::steady_clock::time_point at;
        bool refusing;
    };
    const double burst, per_second;
    static constexpr std::size_t max_addresses = 4096;

    double level(const bucket& b, std::chrono::steady_clock::time_point now) const {
        return std::min(burst,
                        b.tokens + per_second * std::chrono::duration<double>(now - b.at).count());
    }

    std::unordered_map<std::string, bucket> buckets_;
};

} // namespace

// Whose turn it is to answer something large: one at a time, the others wait in order.
struct turn_queue {
    bool busy = false;
    std::deque<std::weak_ptr<asio::steady_timer>> waiting;
    void release() {
        busy = false;
        while (!waiting.empty()) {
            auto next = waiting.front().lock();
            waiting.pop_front();
            if (next) {
                next->cancel();
                return;
            }
        }
    }
};

agent_link::agent_link(std::unique_ptr<protocol::link_stream> stream, app_context& app,
                       std::string target_id, std::optional<std::string> token, bool dialled)
    : stream_(std::move(stream))
    , ex_(stream_->get_executor())
    , app_(app)
    , id_(std::move(target_id))
    , token_(std::move(token))
    , dialled_(dialled)
    , continuous_wake_(ex_, asio::steady_timer::time_point::max())
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

std::optional<std::string> agent_link::dial_pin() const {
    if (!dialled_ || !stream_->encrypted())
        return std::nullopt;
    return stream_->peer_pin();
}

json::object agent_link::describe() const {
    json::object o;
    o["id"] = id_;
    o["session_id"] = session_id_.empty() ? json::value(nullptr) : json::value(session_id_);
    o["last_session_id"] =
        last_session_id_.empty() ? json::value(nullptr) : json::value(last_session_id_);
    o["agent"] = hello_ ? json::value(hello_->agent) : json::value(nullptr);
    o["agent_version"] = hello_ && hello_->agent_version ? json::value(*hello_->agent_version)
                                                         : json::value(nullptr);
    o["hostname"] =
        hello_ && hello_->hostname ? json::value(*hello_->hostname) : json::value(nullptr);
    o["peer"] = peer_;
    json::object platform;
    if (hello_ && hello_->platform) {
        const auto& p = *hello_->platform;
        if (p.arch)
            platform["arch"] = *p.arch;
        if (p.machine)
            platform["machine"] = *p.machine;
        if (p.kernel)
            platform["kernel"] = *p.kernel;
        if (p.perf_version)
            platform["perf_version"] = *p.perf_version;
        if (p.perf_event_paranoid)
            platform["perf_event_paranoid"] = *p.perf_event_paranoid;
    }
    o["platform"] = std::move(platform);
    o["state"] = protocol::to_string(state_);
    o["pid"] = pid_ ? json::value(*pid_) : json::value(nullptr);
    o["continuous"] = continuous_run_;
    o["connected_at"] = connected_at_;
    // The link: encrypted or not, and the key pinned — by the collector when it dialled (the
    // agent's), else the one the agent says it checked the collector's against.
    json::object link;
    link["encrypted"] = stream_->encrypted();
    link["tls"] = stream_->encrypted() ? json::value(stream_->tls_version()) : json::value(nullptr);
    std::string pinned = dialled_ ? stream_->peer_pin() : std::string();
    if (!dialled_ && stream_->encrypted() && hello_ && hello_->tls_check)
        pinned = *hello_->tls_check;
    link["pinned"] = pinned.empty() ? json::value(nullptr) : json::value(pinned);
    o["link"] = std::move(link);
    const auto* offer = offered_update();
    o["update"] = offer ? json::value(offer->version) : json::value(nullptr);
    o["updates"] = hello_ && hello_->updates ? json::value(*hello_->updates) : json::value(nullptr);
    const auto blocked = offer ? update_blocked() : std::string();
    o["update_blocked"] = blocked.empty() ? json::value(nullptr) : json::value(blocked);
    if (updating_) {
        json::object u;
        u["version"] = updating_->version;
        u["size"] = updating_->size;
        u["sent"] = updating_->sent;
        u["applying"] = updating_->applying;
        o["updating"] = std::move(u);
    } else {
        o["updating"] = nullptr;
    }
    return o;
}

const agent_binary* agent_link::offered_update() const {
    if (!hello_)
        return nullptr;
    std::string arch = hello_->update_arch.value_or("");
    if (arch.empty() && hello_->platform && hello_->platform->arch)
        arch = *hello_->platform->arch;
    for (const auto& b : app_.agent_binaries)
        if (!arch.empty() && b.arch == arch && !b.sha256.empty() &&
            protocol::later_version(b.version, hello_->agent_version.value_or("")))
            return &b;
    return nullptr;
}

std::string agent_link::update_blocked() const {
    const std::string policy = hello_ ? hello_->updates.value_or("") : "";
    if (policy == protocol::updates::needs_key)
        return "the agent takes updates only signed for its --update-pubkey (the key this "
               "collector's --agent-update-key prints), or over TLS to a collector it pinned "
               "(--tls-pin)";
    if (policy == protocol::updates::cannot_verify)
        return "the agent cannot check update signatures (its Python has no Ed25519): it takes "
               "updates only over TLS to a collector it pinned (--tls-pin)";
    if (policy == protocol::updates::disabled)
        return "the agent was started with --no-update";
    if (policy == protocol::updates::needs_pairing)
        return "the agent (an older build) takes updates only from a collector it paired with";
    if (policy == protocol::updates::signed_only && !app_.update_key)
        return "the agent takes only signed updates, and this collector signs them only with "
               "--agent-update-key";
    if (policy != protocol::updates::signed_only && policy != protocol::updates::pinned)
        return "the agent did not say how it takes updates";
    return {};
}

asio::awaitable<command_response> agent_link::push_update(agent_binary b, std::string bytes,
                                                          std::string sum) {
    auto self = shared_from_this();
    if (updating_)
        co_return command_response::failure("", "an update to " + updating_->version +
                                                    " is already under way");
    if (sum != b.sha256)
        co_return command_response::failure("", b.file + " does not match its .sha256 (" + sum +
                                                    "): not sent");
    if (const auto why = update_blocked(); !why.empty())
        co_return command_response::failure("", why + ": not sent");
    protocol::update_offer signed_offer{b.version, b.arch, sum, {}, bytes.size()};
    json::object offer;
    offer["version"] = b.version;
    offer["arch"] = b.arch;
    offer["size"] = static_cast<std::int64_t>(bytes.size());
    offer["sha256"] = sum;
    // Signed whenever this collector has a key: a pinned agent takes it either way.
    offer["signature"] =
        app_.update_key
            ? protocol::tls::sign(*app_.update_key, protocol::update_signed_text(signed_offer))
            : std::string();
    log(peer_, "offering agent " + b.version + " (" + b.arch + ", " + std::to_string(bytes.size()) +
                   " bytes)");
    updating_ = update_progress{b.version, bytes.size(), 0, false};
    app_.changed(change::targets, id_);
    auto answer = co_await push_pieces(std::move(offer), bytes);
    updating_.reset();
    app_.changed(change::targets, id_);
    log(peer_, answer.ok ? "agent updated to " + b.version + "; it restarts"
                         : "agent update refused: " + answer.error);
    co_return answer;
}

asio::awaitable<command_response> agent_link::push_pieces(json::object offer,
                                                          const std::string& bytes) {
    auto self = shared_from_this();
    auto answer = co_await command(std::string(protocol::cmd::update), std::move(offer));
    if (!answer.ok)
        co_return answer;
    std::size_t piece = update_piece;
    if (const auto* p = answer.fields.if_contains("piece");
        p && p->is_int64() && p->as_int64() >= 4096)
        piece = std::min(piece, static_cast<std::size_t>(p->as_int64()));
    for (std::size_t at = 0; at < bytes.size(); at += piece) {
        json::object data;
        data["offset"] = static_cast<std::int64_t>(at);
        data["data"] = protocol::base64_encode(std::string_view(bytes).substr(at, piece));
        answer = co_await command(std::string(protocol::cmd::update_data), std::move(data));
        if (!answer.ok)
            co_return answer;
        updating_->sent = std::min<std::uint64_t>(at + piece, bytes.size());
        app_.changed(change::targets, id_);
    }
    updating_->applying = true;
    app_.changed(change::targets, id_);
    co_return co_await command(std::string(protocol::cmd::update_apply), json::object());
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
    continuous_wake_.cancel();
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
    co_await (reader() && writer() && keep_profiling());
    close();
    finish_session();
    say("agent disconnected (" + id_ + ")");
}

asio::awaitable<void> agent_link::keep_profiling() {
    const unsigned hz = app_.cfg.continuous_hz;
    if (!hz)
        co_return;
    while (!co_await ready(std::chrono::seconds(60))) // (a slow pairing: as long as it takes)
        if (closed_)
            co_return;
    auto self = shared_from_this();
    const auto refused_pause = std::chrono::seconds(60), resume_pause = std::chrono::seconds(2);
    std::string refused; // the last refusal, logged once
    while (!closed_) {
        if (state_ == agent_state::idle) {
            // The whole system, at a low rate, in chunks of a few seconds; the agent's own
            // events and call-graph mode (what its probe found works).
            json::object args;
            args["pid"] = nullptr;
            args["frequency"] = hz;
            args["duration"] = std::min(5u, app_.cfg.continuous_session_s);
            std::string start(protocol::cmd::start); // (a local: GCC 12 and co_await)
            const auto r = co_await command(std::move(start), std::move(args), std::nullopt, true);
            if (!r.ok && !closed_ && r.error != "already profiling" && r.error != refused) {
                refused = r.error;
                log(peer_, "continuous profiling: the agent refused to start (" + r.error +
                               "); asking again every minute");
            } else if (r.ok) {
                refused.clear();
            }
        }
        // (closed while it waited for the answer: close() found no wait to cancel)
        if (closed_)
            break;
        // Until the agent goes idle (then a moment, so that a user's run that ended may be
        // followed by theirs), or a minute after a refusal.
        continuous_wake_.expires_after(state_ == agent_state::idle ? refused_pause
                                                                   : std::chrono::hours(24));
        co_await continuous_wake_.async_wait(use_nothrow);
        if (closed_)
            break;
        continuous_wake_.expires_after(resume_pause);
        co_await continuous_wake_.async_wait(use_nothrow);
    }
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
    // Enrollment: an agent that dialled in proves it may store sessions here. The token is
    // compared in constant time and never kept, logged or written.
    // The label of the token it presented names its devices in the fleet store.
    const auto presented = std::exchange(h->enrollment, std::nullopt);
    std::string label;
    if (!dialled_ && !app_.enrollment.empty()) {
        bool enrolled = false;
        for (const auto& [token, token_label] : app_.enrollment)
            if (presented && protocol::constant_time_equal(token, *presented)) {
                enrolled = true;
                label = token_label;
            }
        if (!enrolled) {
            say(presented ? "wrong enrollment token; closing"
                          : "agent not enrolled: start it with PERFWIRE_ENROLL_TOKEN set "
                            "to this collector's enrollment token; closing");
            close();
            return;
        }
    }
    hello_ = std::move(*h);
    slot_.prove(); // counts against the unproven agents' cap no more
    session_meta_["agent"] = hello_->agent;
    session_meta_["agent_version"] = hello_->agent_version.value_or("");
    session_meta_["hostname"] = hello_->hostname.value_or("");
    if (!label.empty())
        session_meta_["enrolled_as"] = label;
    session_meta_["peer"] = peer_;
    session_meta_["started_at"] = connected_at_;
    session_meta_["live"] = true;
    session_meta_["platform"] = describe().at("platform");
    state_ = agent_state::idle;
    log(peer_, "hello from " + hello_->agent + " " + hello_->agent_version.value_or("?") + " on " +
                   hello_->hostname.value_or("?"));
    if (!token_)
        settled_.cancel(); // ready: no code to present
    if (token_) {
        // Authenticate; the response arrives like any other.
        state_ = agent_state::authenticating;
        auto self = shared_from_this();
        asio::co_spawn(
            ex_,
            [self]() -> asio::awaitable<void> {
                json::object args;
                args["token"] = *self->token_;
                const auto r = co_await self->command("auth", std::move(args));
                if (!r.ok) {
                    log(self->peer_, "agent refused the pairing code: " + r.error);
                    self->close();
                } else if (self->state_ == agent_state::authenticating) {
                    self->state_ = agent_state::idle;
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
            // One agent's answer at a time, collector-wide.
            auto& turns_slot = self->app_.kernel_symbol_turns;
            if (!turns_slot)
                turns_slot = std::make_shared<turn_queue>();
            const auto turns = turns_slot;
            while (turns->busy && !self->closed_ && !self->app_.stops.stopping()) {
                auto wait =
                    std::make_shared<asio::steady_timer>(self->ex_, std::chrono::seconds(30));
                turns->waiting.push_back(wait);
                const auto stopping = self->app_.stops.on_stop([wait] { wait->cancel(); });
                co_await wait->async_wait(use_nothrow);
            }
            if (self->closed_ || self->app_.stops.stopping()) {
                if (!turns->busy)
                    turns->release(); // woken for a turn it will not take: the next one's
                co_return;
            }
            turns->busy = true;
            struct release_turn {
                std::shared_ptr<turn_queue> t;
                ~release_turn() { t->release(); }
            } releasing{turns};
            std::string text;
            {
                const auto r = co_await self->command("kallsyms", {});
                const auto* symbols = r.ok ? r.fields.if_contains("symbols") : nullptr;
                if (!r.ok)
                    self->kernel_.why = "the agent did not send them: " + r.error;
                else if (!symbols || !symbols->is_string() ||
                         symbols->as_string().size() > max_kernel_symbols_text)
                    self->kernel_.why = "the agent's answer held no symbols";
                else
                    text = std::string(symbols->as_string());
            }
            // Parsed on the pool, once for every device that runs this kernel; the text is
            // not kept.
            if (!text.empty()) {
                auto* tables = &self->app_.symbols.kernels();
                auto parse = [tables, t = std::move(text)]()
                    -> asio::awaitable<std::shared_ptr<const kernel_symbols>> {
                    co_return tables->get(t);
                };
                self->kernel_.table =
                    co_await asio::co_spawn(self->app_.pool, std::move(parse), asio::use_awaitable);
                if (!self->kernel_.table)
                    self->kernel_.why = kernel_tables::full;
            }
            auto& k = self->kernel_;
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
    if (session_)
        return true;
    json::object meta = session_meta_;
    meta["started_at"] = wall_seconds();
    if (pid_)
        meta["pid"] = *pid_;
    if (!callgraph_.empty())
        meta["callgraph"] = callgraph_;
    if (continuous_run_)
        meta["continuous"] = true;
    session_opened_ = std::chrono::steady_clock::now();
    auto created = live_session::open(app_, peer_, hello_->hostname.value_or(hello_->agent), meta);
    if (!created) {
        log(peer_, "cannot create a session on disk: " + created.error().message() + "; closing");
        close();
        return false;
    }
    session_ = std::move(*created);
    session_id_ = session_->id();
    for (const auto& [type, record] : last_metrics_)
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
        if (state_ == agent_state::idle)
            set_state(agent_state::profiling);
        const std::size_t n = f.payload.size();
        undigested_bytes_ += n;
        ++undigested_chunks_;
        session_->chunk(f.flag == frame_flag::zstd, std::move(f.payload),
                        [self = shared_from_this(), n] {
                            self->undigested_bytes_ -= n;
                            --self->undigested_chunks_;
                            self->digested_.cancel();
                            if (self->session_ && self->session_->wants_kernel_symbols())
                                self->give_kernel_symbols();
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
        auto record = protocol::serialize(*parsed);
        // The binaries of each process (a whole-system run reports the busiest few), the last
        // record of any other type; at most max_kept_metrics records.
        std::string key(protocol::metrics_type(*parsed));
        if (const auto* b = std::get_if<protocol::binaries_metrics>(&*parsed))
            key += ":" + std::to_string(b->pid);
        if (!last_metrics_.count(key) && last_metrics_.size() >= max_kept_metrics)
            if (const auto old = last_metrics_.lower_bound("binaries:");
                old != last_metrics_.end() && old->first.starts_with("binaries:"))
                last_metrics_.erase(old);
        last_metrics_[key] = record;
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
            if (state_ == agent_state::idle)
                callgraph_.clear(); // a run the agent began itself: its mode as it says
            if (n->callgraph)
                callgraph_ = known_callgraph(*n->callgraph);
            log(peer_, "agent is " + n->state + (n->reason ? ": " + *n->reason : ""));
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
    }
}

std::chrono::milliseconds agent_link::deadline_for(std::string_view cmd) noexcept {
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
    asio::steady_timer timer(ex_, timeout ? *timeout : deadline_for(cmd));
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
    if (!answer.ok)
        return;
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
        continuous_run_ = asked.continuous;
    }
    if (now)
        set_state(*now); // a started run is a session from now on, before its first data
}

void agent_link::set_state(agent_state now) {
    if (now == state_)
        return;
    const bool running = state_ == agent_state::profiling || state_ == agent_state::paused;
    state_ = now;
    if (running && now == agent_state::idle) {
        end_session(); // everything of the run arrived before the answer or notice that says so
        continuous_run_ = false;
        continuous_wake_.cancel(); // --continuous starts it again
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
    app_.targets.erase(id_);
    if (hello_) // a connection that never said hello was never listed
        app_.changed(change::targets, id_);
    end_session();
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

std::vector<std::shared_ptr<agent_link>> introduced_agents(const app_context& app) {
    std::vector<std::shared_ptr<agent_link>> out;
    for (const auto& [id, weak] : app.targets)
        if (auto link = weak.lock(); link && link->introduced())
            out.push_back(std::move(link));
    return out;
}

asio::awaitable<void> accept_agents(app_context& app, tcp::acceptor& acceptor) {
    // 20 connections from an address at once, then 2 a second; where agents enroll, up to 256
    // more at once, then 20 a second, on probation.
    admission gate(20, 2), probation_gate(256, 20);
    budgeted_acceptor accepting(acceptor, app.connections, connection_budget::kind::agent, "agent");
    // Past its address's limit, a connection is closed at once, unless this collector enrolls
    // agents: then it may come in on probation (within a second, larger limit) if an unproven
    // slot is free, and must prove itself with a valid enrollment token (a lab behind one NAT
    // reconnecting after a restart is admitted at once). Only a connection within its
    // address's first limit may take the oldest stranger's slot.
    bool probation = false;
    const auto screen =
        [&](const tcp::socket& socket) -> std::optional<connection_budget::when_full> {
        boost::system::error_code aec;
        const auto address = socket.remote_endpoint(aec).address().to_string();
        const auto v = gate.check(address_key(address), std::chrono::steady_clock::now());
        probation = v != admission::verdict::admit;
        if (!probation)
            return connection_budget::when_full::evict_oldest;
        if (v == admission::verdict::refuse_first)
            log(address, app.enrollment.empty()
                             ? "too many connections from this address; refusing them for a while"
                             : "too many connections from this address; for a while only agents "
                               "with a valid enrollment token are admitted from it");
        if (app.enrollment.empty())
            return std::nullopt;
        const auto p = probation_gate.check(address_key(address), std::chrono::steady_clock::now());
        if (p == admission::verdict::refuse_first)
            log(address, "too many connections from this address even for enrolled agents; "
                         "refusing them for a while");
        if (p != admission::verdict::admit)
            return std::nullopt;
        return connection_budget::when_full::refuse;
    };
    for (;;) {
        auto accepted = co_await accepting.next(screen);
        if (!accepted)
            co_return;
        auto& [socket, slot] = *accepted;
        const std::string id = "t" + std::to_string(app.next_target++);
        auto link = std::make_shared<agent_link>(
            std::make_unique<protocol::link_stream>(std::move(socket)), app, id, app.cfg.token);
        link->hold(std::move(slot));
        if (probation)
            link->on_probation();
        app.targets[id] = link;
        asio::co_spawn(acceptor.get_executor(), link->run(), [](std::exception_ptr e) {
            if (e)
                log("listener", "agent connection failed: " + protocol::describe(e));
        });
    }
}

asio::awaitable<std::pair<std::string, std::string>> dial_agent(app_context& app, std::string host,
                                                                std::string port,
                                                                std::optional<std::string> token,
                                                                std::optional<std::string> pin) {
    if (app.stops.stopping())
        co_return std::make_pair(std::string(), std::string("the collector is stopping"));
    auto ex = co_await asio::this_coro::executor;
    tcp::resolver resolver(ex);
    auto resolving = app.stops.on_stop([&resolver] { resolver.cancel(); });
    auto [rec, endpoints] = co_await resolver.async_resolve(host, port, use_nothrow);
    resolving = {};
    if (rec)
        co_return std::make_pair(std::string(), "cannot resolve " + host + ": " + rec.message());
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
        co_return std::make_pair(std::string(), std::string("the collector is stopping"));
    if (r.index() == 1)
        co_return std::make_pair(std::string(), "timed out connecting to " + host + ":" + port);
    if (auto ec = std::get<0>(std::get<0>(r)))
        co_return std::make_pair(std::string(),
                                 "cannot connect to " + host + ":" + port + ": " + ec.message());
    auto stream = std::make_unique<protocol::link_stream>(std::move(socket));
    if (pin) {
        // The agent's key must be the one its owner read off the device: a man in the middle
        // presents another and is refused before the pairing code is sent.
        const protocol::peer_check check{pin, std::nullopt, host};
        auto ctx = protocol::client_context(check);
        auto closing = app.stops.on_stop([&stream] { stream->close(); });
        const auto context = std::get<std::shared_ptr<asio::ssl::context>>(std::move(ctx));
        const auto limit = std::chrono::seconds(10);
        const auto why = co_await stream->connect_tls(context, check, limit);
        if (!why.empty()) {
            stream->close();
            co_return std::make_pair(std::string(), host + ":" + port + ": " + why);
        }
    }
    const std::string id = "t" + std::to_string(app.next_target++);
    auto link = std::make_shared<agent_link>(std::move(stream), app, id,
                                             token ? token : app.cfg.token, true);
    link->set_dial_address(host, port);
    app.targets[id] = link;
    asio::co_spawn(ex, link->run(), [](std::exception_ptr e) {
        if (e)
            log("wizard", "agent connection failed: " + protocol::describe(e));
    });
    // (20 s: a --listen agent serves one unpaired connection at a time, for up to 10 s each.)
    if (co_await link->ready(std::chrono::seconds(20)))
        co_return std::make_pair(id, std::string());
    link->close();
    co_return std::make_pair(std::string(), std::string("the agent did not accept the connection "
                                                        "(wrong pairing code?)"));
}

} // namespace collector
