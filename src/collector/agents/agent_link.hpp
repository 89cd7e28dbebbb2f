// One agent connection on the collector's side: its transport, its hello, the commands asked
// of it and their answers, what it is doing, and the live session of its run. The workflows
// around it have their own files: who is admitted (admission.hpp), dialling (dial.hpp),
// continuous profiling and a user's start (continuous.hpp), updates (agent_update.hpp), the
// kernel symbols' turn (kernel_turns.hpp), the target's JSON (target_view.hpp).
//
//   socket ─▶ reader ─┬─ hello (first frame, within 10 s) ─▶ enrolled? state idle
//                     ├─ data (flag 0/1) ─▶ live_session::chunk (opens the session first)
//                     ├─ a run's chunk (flag 5) ─▶ once, in order ─▶ the run's session (runs.hpp)
//                     ├─ metrics (flag 4) ─▶ kept, and live_session::metrics
//                     └─ responses / state notices (flag 3) ─▶ waiting commands, state
//   command() ─▶ queue ─▶ writer ─▶ socket
//
// The reader stops reading while the session still digests more than its bounds (TCP
// backpressure reaches the agent; nothing is dropped). A protocol error or oversized frame
// closes this connection only, with a logged reason.
#pragma once

#include "collector/agents/command_link.hpp"
#include "collector/agents/kept_metrics.hpp"
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
#include <utility>
#include <vector>

namespace protocol {
class link_stream;
}

namespace collector {

class live_session;

// How far an update's push got, shown on the target.
struct update_progress {
    std::string version;
    std::uint64_t size = 0, sent = 0;
    bool applying = false; // every byte sent: the agent checks and installs the build
};

class agent_link final : public agents::command_link,
                         public std::enable_shared_from_this<agent_link> {
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
    ~agent_link() override;

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
    void say(const std::string& line) const override;
    void close();
    // Another link of the same device carries this link's run now (the device came back while
    // this connection, half-open, was not yet known dead): its session is parked in the run
    // book for the newcomer, and this link closes.
    void release_run();

    // agents::command_link: commands and their answers, the agent's state.
    asio::awaitable<protocol::command_response>
    command(std::string cmd, boost::json::object args,
            std::optional<std::chrono::milliseconds> timeout = std::nullopt,
            bool continuous = false) override;
    protocol::agent_state state() const noexcept override { return state_; }
    bool closed() const noexcept override { return closed_; }
    bool in_continuous_run() const noexcept override { return continuous_run_; }
    asio::awaitable<void> went_idle(std::chrono::milliseconds timeout) override;
    asio::awaitable<bool> ready(std::chrono::steady_clock::duration timeout) override;
    // Waits until the link closes or `timeout` passes: whether it closed. (One waiter at a
    // time: the update's redial.)
    asio::awaitable<bool> wait_closed(std::chrono::steady_clock::duration timeout);

    // An update being pushed (agents/agent_update.hpp), shown on the target; nullopt when done.
    void set_updating(std::optional<update_progress> u);
    const std::optional<update_progress>& updating() const noexcept { return updating_; }

    // What asks for the next run (a CI job): its session's metadata `origin`. Forgotten when
    // the start is refused or the session opens. Returns the one it replaces.
    boost::json::object note_origin(boost::json::object origin) {
        return std::exchange(origin_, std::move(origin));
    }

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

    const std::string& id() const noexcept { return id_; }
    const std::string& session_id() const noexcept { return session_id_; }
    // The run before, ended: "start again" continues from it.
    const std::string& last_session_id() const noexcept { return last_session_id_; }
    // An agent once it has said hello; before that, just a connection.
    bool introduced() const noexcept { return hello_.has_value() && !closed_; }
    const std::optional<protocol::hello>& hello() const noexcept { return hello_; }
    const std::string& peer() const noexcept { return peer_; }
    // A run back after its link was down sends what the collector lacks first: how far that
    // is (chunks and bytes left of those the agent held when the link came back); nullopt
    // when it has caught up, or nothing was behind.
    struct catching_up {
        std::uint64_t chunks_left = 0, chunks = 0;
        std::uint64_t bytes = 0; // held by the agent when the link came back
    };
    std::optional<catching_up> catch_up() const;
    // Why the agent is in its state, as it last said ("probing perf", "no such process: 42";
    // printable, at most 200 bytes; "" when it said nothing).
    const std::string& state_reason() const noexcept { return state_reason_; }
    // A flight recorder's window as its agent last said (its metrics), while it runs.
    const std::optional<protocol::flight_metrics>& flight() const noexcept { return flight_; }
    double connected_at() const noexcept { return connected_at_; }
    std::optional<int> pid() const noexcept { return pid_; }
    // The link: encrypted or not, and the key pinned — by the collector when it dialled (the
    // agent's), else the one the agent says it checked the collector's against ("": none).
    struct security {
        bool encrypted = false;
        std::string tls; // the TLS version
        std::string pinned;
    };
    security link_security() const;

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

    // Runs that outlive their links (runs.hpp; docs/protocol.md "Runs").
    void on_sequenced(protocol::frame&& f);
    void ask_sequence(); // once introduced (and paired): which chunks of its run we have
    void take_run(const std::string& run); // this link's session holds that run from now
    bool park_session(); // the link went mid-run: its session waits for the run to come back
    // Tells the agent how far `run` is stored, one acknowledgement in flight at a time.
    void ack_run(const std::string& run);
    std::string ack_next_; // a run to acknowledge once the one in flight is answered
    std::string run_key() const;
    std::string device_key_; // who may resume a run: enrolled label and host name
    std::string run_id_;     // the run this link's session holds ("": none, or not resumable)
    std::chrono::seconds offline_max_{6 * 3600}; // the agent's, as it said
    bool acking_ = false;
    std::string acked_run_;
    std::uint64_t acked_ = 0;
    // Catching up: the run's last chunk the agent had made when the link came back, and the
    // last this collector had then.
    std::string catch_up_run_;
    std::uint64_t catch_up_to_ = 0, catch_up_from_ = 0, catch_up_bytes_ = 0;

    asio::awaitable<bool> open_link(); // an accepted connection: TLS or plain, as policy allows
    std::unique_ptr<protocol::link_stream> stream_;
    asio::any_io_executor ex_;
    app_context& app_;
    std::string id_;
    std::optional<std::string> token_;
    bool dialled_ = false;
    bool probation_ = false;
    std::string dial_host_, dial_port_;
    std::optional<update_progress> updating_; // a push under way
    std::string peer_;
    std::optional<protocol::hello> hello_;
    std::unique_ptr<live_session> session_;
    std::string session_id_;
    std::string last_session_id_;      // the run before, ended: "start again" continues from it
    boost::json::object session_meta_; // from the hello, written when the session opens
    boost::json::object origin_;       // what asked for the next run (note_origin)
    protocol::agent_state state_ = protocol::agent_state::connecting;
    std::optional<int> pid_;
    std::string callgraph_;    // of the run, as the start's answer said ("": not said)
    std::string state_reason_; // why it is in its state, as its last state notice said
    std::optional<protocol::flight_metrics> flight_; // (cleared when the run ends)
    std::optional<int> frequency_;        // the run's sampling rate, as the agent last said
    boost::json::object pending_capture_; // a flight recorder's capture, for the session it opens
    // Captures whose chunks the agent still had to send when the link came back (sequence's
    // answer): what fired each, for the session it opens, and its last chunk once over.
    struct capture_note {
        boost::json::object capture;
        std::optional<std::uint64_t> last_seq;
    };
    std::map<std::string, capture_note> capture_notes_;
    std::optional<protocol::agent_state>
        sequence_state_; // what the agent said it does, at that answer
    void take_capture_notes(const boost::json::value* notes);
    bool continuous_run_ = false; // the run is --continuous's
    std::chrono::steady_clock::time_point session_opened_;
    asio::steady_timer idle_wake_;   // cancelled when the agent goes idle or the link closes
    asio::steady_timer closed_wake_; // cancelled when the link closes
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
    agents::kept_metrics kept_metrics_; // every new session starts with them

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

} // namespace collector
