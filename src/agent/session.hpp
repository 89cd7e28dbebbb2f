// One collector connection.
//
//            ┌─────────── reader ◀── TCP ◀── collector: commands (flag 2)
//   socket ──┤                 │
//            └─────────── writer ──▶ TCP ──▶ collector: hello, responses, state (3),
//                 ▲        ▲                            data (0/1), metrics (4)
//   metrics timer ┘        └── collection (perf record | perf script, perf stat) chunks
//
// The reader handles one command at a time; everything the agent sends goes through one
// byte-capped queue drained by the writer. Closing (EOF, error, lockout, shutdown) stops the
// collection with SIGINT so no perf outlives the connection.
#pragma once

#include "agent/collection.hpp"
#include "agent/metrics.hpp"
#include "agent/options.hpp"
#include "agent/run.hpp"
#include "agent/update.hpp"
#include "protocol/messages.hpp"

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/steady_timer.hpp>

#include <deque>
#include <functional>
#include <memory>

namespace boost::asio::ssl {
class context;
}
namespace protocol {
class link_stream;
}

namespace agent {

// Failed pairing attempts across every connection of this agent: after each, the next attempt
// (on any connection) is answered only after a wait that doubles, from 0.1 s up to 30 s; a
// success resets it. Lives as long as the agent.
struct pairing_guard {
    int failures = 0; // in a row, forgotten after 5 minutes without one
    std::chrono::steady_clock::time_point next_attempt{}, last_failure{};
};

class session : public std::enable_shared_from_this<session> {
public:
    // `token`: the pairing code that must be presented, or nullopt to start authenticated.
    // `stream`: connected (TLS up already when this agent dialled with a pin or a CA);
    // `accept_tls`: a --listen --tls agent's context, the handshake run() starts with.
    // `run`: the agent's, which this link sends and which may outlive it (run.hpp).
    session(std::unique_ptr<protocol::link_stream> stream, const config& cfg,
            std::shared_ptr<run_state> run, std::optional<std::string> token,
            std::shared_ptr<pairing_guard> guard = std::make_shared<pairing_guard>(),
            std::shared_ptr<probe_memory> probed = std::make_shared<probe_memory>(),
            std::shared_ptr<asio::ssl::context> accept_tls = nullptr);
    ~session();

    // Called once the collector has authenticated (the listener closes an older session).
    std::function<void(session&)> on_authenticated;
    // Called once, when the session authenticates or closes: the listener then lets the next
    // connection in (one unauthenticated connection at a time).
    std::function<void()> on_settled;
    // Called once a new build has replaced the agent's executable and the answer saying so is
    // queued: the agent then stops and starts the new build.
    std::function<void()> on_update_installed;

    asio::awaitable<void> run();
    // Stops profiling (flushing the last chunk), drains the queue briefly, closes.
    asio::awaitable<void> shutdown();
    void close();

    bool was_authenticated() const noexcept { return ever_authenticated_; }
    bool settled() const noexcept { return authenticated_ || closed_; }
    const std::string& peer() const noexcept { return peer_; }

private:
    asio::awaitable<void> reader();
    asio::awaitable<void> writer();
    asio::awaitable<void> metrics_loop();
    asio::awaitable<void> auth_deadline();

    asio::awaitable<protocol::command_response> handle(const protocol::command_request& req);
    // One per command, as handle() dispatches them.
    asio::awaitable<protocol::command_response> cmd_ping(const protocol::command_request& req);
    asio::awaitable<protocol::command_response> cmd_kallsyms(const protocol::command_request& req);
    asio::awaitable<protocol::command_response> cmd_status(const protocol::command_request& req);
    asio::awaitable<protocol::command_response>
    cmd_list_processes(const protocol::command_request& req);
    asio::awaitable<protocol::command_response>
    cmd_verify_pid(const protocol::command_request& req);
    asio::awaitable<protocol::command_response>
    cmd_verify_perf(const protocol::command_request& req);
    asio::awaitable<protocol::command_response> cmd_reprobe(const protocol::command_request& req);
    asio::awaitable<protocol::command_response> cmd_start(const protocol::command_request& req);
    asio::awaitable<protocol::command_response> cmd_stop(const protocol::command_request& req);
    asio::awaitable<protocol::command_response> cmd_pause(const protocol::command_request& req);
    asio::awaitable<protocol::command_response> cmd_resume(const protocol::command_request& req);
    asio::awaitable<protocol::command_response> cmd_configure(const protocol::command_request& req);
    asio::awaitable<protocol::command_response>
    cmd_configure_metrics(const protocol::command_request& req);
    asio::awaitable<protocol::command_response> cmd_update(const protocol::command_request& req);
    asio::awaitable<protocol::command_response>
    cmd_update_data(const protocol::command_request& req);
    asio::awaitable<protocol::command_response>
    cmd_update_apply(const protocol::command_request& req);
    asio::awaitable<protocol::command_response> cmd_sequence(const protocol::command_request& req);
    asio::awaitable<protocol::command_response> cmd_ack(const protocol::command_request& req);
    asio::awaitable<protocol::command_response> cmd_capture(const protocol::command_request& req);

    asio::awaitable<void> ensure_probed(std::optional<int> pid, bool again = false);
    asio::awaitable<void> run_probe(std::optional<int> pid); // probing_ set by the caller
    bool recall_probe(std::optional<int> pid); // what an earlier probe found, when it holds
    void use_capabilities(capabilities caps, std::optional<int> pid);
    boost::json::object capabilities_json() const;
    void probe_in_background();     // once authenticated: status has capabilities before a start
    void start_from_command_line(); // --server with --pid: auto_start beside the reader
    asio::awaitable<void> auto_start();
    void begin_collection();
    // --max-overhead: every 5 s the cost of profiling against the budget; a change of rate
    // restarts the collection and is said in a state notice.
    asio::awaitable<void> overhead_loop();
    void watch_overhead();
    int ladder_rungs() const; // how many rates perf record may hold at once for this run
    // Stops and waits until drained (without `drain`: until perf is killed, the rest dropped).
    asio::awaitable<void> end_collection(bool drain = true);
    // The run's data: this link sends it from now on, sequenced (the collector can resume)
    // or not; or, without an answer in time, as an older collector takes it.
    void attach_run();
    void detach_run(); // the link closed: the run goes on without it, or ends with it
    bool owns_run() const noexcept { return run_->owner == this; }
    bool data_flows() const noexcept { return authenticated_ && data_mode_ != data_mode::held; }
    asio::awaitable<void> legacy_deadline(); // no `sequence` in time: an older collector
    void set_authenticated();

    // `ordered`: sent only after the run's chunks made before it (a state notice, the answer
    // to a command that changes the run), so the collector reads them in the order they mean.
    void send(protocol::frame_flag flag, std::string_view payload, bool droppable = false,
              bool ordered = false);
    std::string_view update_policy() const; // protocol::updates: what it takes, or why not
    // The run's state as a notice says it (idle, profiling, paused, armed), with `reason`.
    protocol::state_notice state_now(std::string reason) const;
    void send_state(std::string reason);
    // A flight recorder's capture begins (`capture`: what fired) or ends ("").
    // The captures whose chunks this link is still to send (sequence's answer).
    boost::json::array capture_notes_ahead() const;
    void send_flight(const std::string& reason, const std::string& capture, double at,
                     double window_s);

    // This agent dialled over TLS and checked the collector's key against its --tls-pin.
    bool pinned_link() const noexcept;
    std::unique_ptr<protocol::link_stream> stream_;
    asio::any_io_executor ex_;
    std::shared_ptr<asio::ssl::context> accept_tls_;
    const config& cfg_;
    std::optional<std::string> token_;
    std::string peer_;
    bool authenticated_ = false;
    bool ever_authenticated_ = false;
    int auth_failures_ = 0;
    int unauthenticated_commands_ = 0;
    std::shared_ptr<pairing_guard> guard_;
    bool closed_ = false;
    void settle();

    struct outgoing {
        std::string bytes;
        bool reply;             // an answer or a notice (never dropped), not data or metrics
        std::uint64_t after{0}; // sent once the run's chunks up to this one are
    };
    std::deque<outgoing> queue_;
    std::size_t queued_bytes_ = 0;
    std::size_t reply_bytes_ = 0; // of those queued: answers and notices
    std::uint64_t dropped_chunks_ = 0;
    asio::steady_timer wake_writer_;
    asio::steady_timer drained_; // the reader waits here while the queue is over its limit
    asio::steady_timer wake_auth_;
    asio::steady_timer metrics_timer_;

    // Profiling: the run, and how far this link sent it.
    std::shared_ptr<run_state> run_;
    // How the run's chunks go on this link: as flag 1 (`legacy`: an older collector, or before
    // the collector asked for `sequence`), held (the hello named a run: until the collector
    // says which of its chunks it has), or numbered (`sequenced`, flag 5).
    enum class data_mode { held, sequenced, legacy };
    data_mode data_mode_ = data_mode::legacy;
    std::uint64_t sent_pos_ = 0;
    std::string legacy_run_; // the run of the last chunk sent as flag 1, and its number
    std::uint64_t legacy_seq_ = 0;
    asio::steady_timer legacy_wait_;
    std::optional<capabilities> caps_;
    std::optional<int> probed_pid_;
    std::shared_ptr<probe_memory> probed_; // the agent's, across connections
    bool probing_ = false;
    asio::steady_timer probe_done_; // cancelled when a probe ends
    protocol::platform_info platform_;

    // An update being received; whether its answer is the last before a restart.
    std::unique_ptr<update_receiver> update_;
    bool restart_after_answer_ = false;

    // Metrics.
    metrics_sampler sampler_;
    bool metrics_enabled_ = true, metrics_network_ = true, metrics_disk_ = false,
         metrics_threads_ = false;
    std::chrono::milliseconds metrics_interval_{2000};
};

} // namespace agent
