// What the collector's parts share: configuration, the session store and registry, the
// thread pool that parses, and the connected agents. Lives on the I/O thread.
#pragma once

#include "collector/agent_binaries.hpp"
#include "collector/agents/registry.hpp"
#include "collector/browsers.hpp"
#include "collector/connections.hpp"
#include "collector/http/access.hpp"
#include "collector/options.hpp"
#include "collector/sessions.hpp"
#include "collector/stopping.hpp"
#include "collector/symbols/debuginfod.hpp"

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>

#include <chrono>
#include <map>
#include <memory>
#include <string>

namespace boost::asio::ssl {
class context;
}
namespace protocol::tls {
struct signing_key;
}

namespace collector {

class fleet_store;
class fleet_backlog;

struct app_context {
    app_context(asio::io_context& io_context, config c);
    ~app_context();

    asio::io_context& io;
    config cfg;
    asio::thread_pool pool{2};
    session_store store;
    session_registry sessions;
    std::chrono::steady_clock::time_point started = std::chrono::steady_clock::now();
    std::string agent_listen_address; // "host:port" once bound
    connection_budget connections;    // every connection accepted holds a slot
    symbolizer symbols{cfg.symbols};
    // Where live sessions' symbol tables are read before their chunks are parsed: a large
    // binary's takes seconds (minutes under a sanitizer), and the pool's two threads parse
    // every session's chunks meanwhile (live_session.cpp).
    asio::thread_pool symbol_loads{1};
    // The fleet store (--clickhouse): every sample live sessions take, also written there.
    std::unique_ptr<fleet_store> fleet;
    // What the fleet store may lack, written there from the session folders (after `fleet`:
    // stopped before it).
    std::unique_ptr<fleet_backlog> backlog;
    std::unique_ptr<asio::thread_pool> fleet_queries; // where the Fleet view's queries wait
    std::string collector_name; // the collector's name in it (--collector-name, the host name)
    std::unique_ptr<debuginfod_fetcher> debuginfod; // set by run() when DEBUGINFOD_URLS is
    std::vector<agent_binary> agent_binaries;       // found at start, never changed
    config_limits limits;                           // what PUT /api/config may set; fixed at start
    // Tokens agents dialling in present, each with its label (--agent-token TOKEN:LABEL; may
    // be empty); none: none asked.
    std::vector<std::pair<std::string, std::string>> enrollment;
    std::string enrollment_file; // where the owner finds one (named in /api/status)
    std::string api_token;       // what every API request presents; empty: --http-auth none
    sign_in_codes sign_in;       // the one-time sign-in link's code
    std::string ui_url;          // where the UI is served ("http://127.0.0.1:8080/")
    std::string api_token_file;  // where it is kept, named in a 401 (or "the collector's config")
    // TLS on the agent port (--tls): the context agents' handshakes meet, the pin they give
    // (--tls-pin), and whether plain agents are refused. Null: plain TCP only.
    std::shared_ptr<asio::ssl::context> agent_tls;
    std::string tls_pin;
    bool agent_tls_required = false;
    std::shared_ptr<asio::ssl::context> http_tls; // --http-tls
    // --agent-update-key: the key offers are signed with (its public half in /api/status).
    std::shared_ptr<const protocol::tls::signing_key> update_key;

    // The agents connected now, by target id (agents/registry.hpp).
    agents::registry agents;

    // What ends when the collector stops (stopping.hpp); stops.stopping() once it does.
    stop_registry stops;
    // What the browsers are told (browsers.hpp; the HTTP side's event stream, made with the
    // context: http/events.hpp).
    std::unique_ptr<browser_feed> browsers;

    // On the I/O thread, whenever something the UI shows changed: tells the browsers
    // (coalesced). `id`: the target's for change::targets, else the session's.
    void changed(change what, const std::string& id) { browsers->changed(what, id); }

    // Hands `job` to the pool (`ex`: a session's strand, or the pool itself) and keeps the I/O
    // loop from running out of work until the job has run. A job may post back to the I/O
    // thread; a shutdown drains the loop, so nothing it posts is ever left behind.
    template <class Executor, class Job>
    void on_pool(const Executor& ex, Job job) {
        asio::post(ex,
                   [work = asio::make_work_guard(io), job = std::move(job)]() mutable { job(); });
    }
};

} // namespace collector
