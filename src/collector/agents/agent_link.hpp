// One agent connection on the collector's side.
//
//   socket ─▶ reader ─┬─ hello (first frame, within 10 s) ─▶ live session created
//                     ├─ data (flag 0/1) ─▶ session strand: write to disk, then parse
//                     ├─ metrics (flag 4) ─▶ session strand: append to metrics.jsonl
//                     └─ responses / state notices (flag 3) ─▶ waiting commands, target state
//   commands (auth, relayed from HTTP) ─▶ queue ─▶ writer ─▶ socket
//
// A protocol error or oversized frame closes this connection only, with a logged reason.
#pragma once

#include "collector/agent_binaries.hpp"
#include "collector/context.hpp"
#include "protocol/frame.hpp"
#include "protocol/messages.hpp"

#include <boost/asio/awaitable.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>

#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace protocol {
class link_stream;
}

namespace collector {

class live_session;

class agent_link : public std::enable_shared_from_this<agent_link> {
public:
    // `dialled`: the collector's owner chose this agent (the wizard), so it needs no
    // enrollment. A session is one run: it opens when the (enrolled) agent says it is
    // profiling — the answer to a `start`, or the notice of an agent started with --pid — or
    // with its first data, and ends when the agent goes idle (stopped, or the target exited)
    // or leaves.
    // `stream`: an accepted connection (TLS or plain is decided by run(), as the agent opens),
    // or, dialled, one whose TLS (if any) is already up.
    agent_link(std::unique_ptr<protocol::link_stream> stream, app_context& app,
               std::string target_id, std::optional<std::string> token, bool dialled = false);
    ~agent_link();

    // Serves the connection until it closes; the live session then becomes a saved one.
    asio::awaitable<void> run();
    // The accepted connection's slot in the connection budget, given back when run() ends.
    // Until its hello proves it, a newer connection may take its place (it is then closed).
    void hold(connection_budget::slot s);
    // Admitted past its address's limit because this collector enrolls agents: it must present
    // a valid enrollment token, and is closed without a word in the log if it does not (the
    // gate said once that the address is being refused).
    void on_probation() { probation_ = true; }
    // A line about this connection in the log, unless it is on probation and has not said a
    // valid hello: a flood past its address's limit logs nothing.
    void say(const std::string& line) const;
    void close();

    // Sends a command and waits for its response; an error string on timeout or close. An
    // answer that comes after the deadline still updates the target's state.
    // `continuous`: a start of continuous profiling (--continuous), whose runs are cut into
    // sessions of --continuous-session seconds and give way to a user's start.
    asio::awaitable<protocol::command_response>
    command(std::string cmd, boost::json::object args,
            std::optional<std::chrono::milliseconds> timeout = std::nullopt,
            bool continuous = false);
    // How long a command may take: those that may probe perf (the first start, reprobe,
    // verify_perf) take tens of seconds on slow devices and odd perf builds, a stop or pause
    // as long as the agent may take to end a run; the rest 15 s.
    static std::chrono::milliseconds deadline_for(std::string_view cmd) noexcept;
    // How long a user's start may take when it first stops a continuous run: both in turn.
    static std::chrono::milliseconds takeover_deadline() noexcept {
        return deadline_for(protocol::cmd::stop) + deadline_for(protocol::cmd::start);
    }

    // Pushes build `b` (its bytes, whose SHA-256 the caller computed off the I/O thread) to
    // the agent: the offer, the pieces, then the apply. The agent's answer to the apply (it
    // then restarts into the new build), or the first refusal (the old agent keeps running).
    // Signed with the collector's --agent-update-key when it has one (an agent pinned over TLS
    // takes it unsigned too). Meanwhile the target's description says how far it got.
    asio::awaitable<protocol::command_response> push_update(agent_binary b, std::string bytes,
                                                            std::string sha256);
    // The build this collector has for the agent's architecture when it is later than the
    // agent's version.
    const agent_binary* offered_update() const;
    // Why an update cannot be pushed to this agent, as the user should read it ("" when it
    // can, or when its agent did not say how it takes them).
    std::string update_blocked() const;

    // For a dialled agent: where it listens, and the code it was given (to dial it again).
    void set_dial_address(std::string host, std::string port) {
        dial_host_ = std::move(host);
        dial_port_ = std::move(port);
    }
    const std::string& dial_host() const noexcept { return dial_host_; }
    const std::string& dial_port() const noexcept { return dial_port_; }
    const std::optional<std::string>& token() const noexcept { return token_; }
    // The agent's key this collector pinned when it dialled over TLS (nothing: plain).
    std::optional<std::string> dial_pin() const;
    bool closed() const noexcept { return closed_; }
    // Profiling because of --continuous (a user's start stops that run first).
    bool in_continuous_run() const noexcept { return continuous_run_; }

    const std::string& id() const noexcept { return id_; }
    const std::string& session_id() const noexcept { return session_id_; }
    // An agent once it has said hello; before that, just a connection.
    bool introduced() const noexcept { return hello_.has_value() && !closed_; }
    // Waits (at most `timeout`) until the agent has said hello and, when a pairing code is
    // sent, accepted it: true then; false when it closed, refused or took too long.
    asio::awaitable<bool> ready(std::chrono::steady_clock::duration timeout);
    boost::json::object describe() const;

private:
    asio::awaitable<void> reader();
    asio::awaitable<void> writer();
    void on_frame(protocol::frame&& f);
    void on_hello(protocol::frame&& f);
    bool open_session(); // false (and closed) when it cannot be stored
    void end_session();  // the run is over: its session is completed (or removed, if empty)
    void finish_session();
    void set_state(protocol::agent_state now);
    void send(const std::string& payload);
    void give_kernel_symbols(); // asks the agent once; each run's session gets the answer

    asio::awaitable<bool> open_link(); // an accepted connection: TLS or plain, as policy allows
    // --continuous: starts the agent whenever it is idle (a user's run ended, or it just
    // connected), until the link closes.
    asio::awaitable<void> keep_profiling();
    std::unique_ptr<protocol::link_stream> stream_;
    asio::any_io_executor ex_;
    app_context& app_;
    std::string id_;
    std::optional<std::string> token_;
    bool dialled_ = false;
    bool probation_ = false;
    std::string dial_host_, dial_port_;
    struct update_progress {
        std::string version;
        std::uint64_t size = 0, sent = 0;
        bool applying = false; // every byte sent: the agent checks and installs the build
    };
    std::optional<update_progress> updating_; // a push under way
    asio::awaitable<protocol::command_response> push_pieces(boost::json::object offer,
                                                            const std::string& bytes);
    std::string peer_;
    std::optional<protocol::hello> hello_;
    std::unique_ptr<live_session> session_;
    std::string session_id_;
    std::string last_session_id_;      // the run before, ended: "start again" continues from it
    boost::json::object session_meta_; // from the hello, written when the session opens
    protocol::agent_state state_ = protocol::agent_state::connecting;
    std::optional<int> pid_;
    std::string callgraph_;       // of the run, as the start's answer said ("": not said)
    bool continuous_run_ = false; // the run is --continuous's
    std::chrono::steady_clock::time_point session_opened_;
    asio::steady_timer continuous_wake_; // cancelled when the agent goes idle or the link closes
    double connected_at_ = 0;
    bool closed_ = false;
    bool metrics_refusal_logged_ = false; // one log line per connection, not per frame
    struct {
        bool asked = false, answered = false;
        // The agent's kallsyms (one table shared by every session of that kernel, symbols.hpp),
        // or why there are none.
        std::shared_ptr<const kernel_symbols> table;
        std::string why;
        std::string given_to; // the session that has them
    } kernel_;
    // The last metrics record of each type on this connection, and of binaries one a process
    // (at most max_kept_metrics, each ≤ 256 KiB): every new session starts with them (agents
    // send the binaries' build-ids only when they change, so a second run on the same process,
    // or the next session of a continuous run, would otherwise have none).
    std::map<std::string, std::string> last_metrics_;
    static constexpr std::size_t max_kept_metrics = 16;

    std::deque<std::string> out_;
    asio::steady_timer wake_writer_;
    asio::steady_timer settled_; // cancelled when the agent is ready or the link closes
    bool pending_ready() const {
        return state_ == protocol::agent_state::connecting ||
               state_ == protocol::agent_state::authenticating;
    }
    // Bytes of data frames received but not yet stored and parsed: over the limit the reader
    // stops reading this socket (TCP backpressure reaches the agent; nothing is dropped). The
    // limit is higher while a command waits for its answer (reading_paused()).
    std::size_t undigested_bytes_ = 0;
    std::size_t undigested_chunks_ = 0;
    asio::steady_timer digested_;
    bool reading_paused() const noexcept;

    struct pending {
        std::optional<protocol::command_response> result;
        asio::steady_timer* timer;
        std::string cmd;              // what was asked, for the state its answer implies
        std::optional<int> asked_pid; // a start's pid
        bool continuous = false;      // a start of --continuous
    };
    // The state an answer implies, applied as the answer is read: in the order the frames
    // came, so a notice that follows it (the run ended at once) is applied after it.
    void on_answer(const pending& asked, const protocol::command_response& answer);
    connection_budget::slot slot_; // accepted connections: their place in the budget
    std::map<std::string, pending> pending_;
    // Commands whose deadline passed, oldest first (a few): their answers still count.
    std::deque<std::pair<std::string, pending>> late_;
    std::uint64_t next_command_ = 1;
};

// The connected agents that said hello, in the order of their ids (as strings: "t10" < "t9").
std::vector<std::shared_ptr<agent_link>> introduced_agents(const app_context& app);

// Accepts agents until the acceptor closes.
asio::awaitable<void> accept_agents(app_context& app, asio::ip::tcp::acceptor& acceptor);

// Dials a listening agent and serves it like an inbound one (the Live Debug wizard); with a
// `pin` over TLS, refusing any agent whose certificate is not that one. Returns
// the target id once the connection is up and authenticated, or an error message.
asio::awaitable<std::pair<std::string, std::string>>
dial_agent(app_context& app, std::string host, std::string port, std::optional<std::string> token,
           std::optional<std::string> pin = std::nullopt);

} // namespace collector
