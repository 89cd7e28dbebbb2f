// Test helper: the real collector started on loopback with free ports, a fresh sessions folder
// and any extra arguments; its HTTP port is registered so http_call presents the API token.
#pragma once

#include "collector/http/access.hpp"
#include "protocol/frame.hpp"
#include "support/framing_peer.hpp"
#include "support/http_client.hpp"
#include "support/poll_json.hpp"
#include "support/programs.hpp"
#include "support/spawn.hpp"

#include <catch2/catch.hpp>

#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>

#include <chrono>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <unistd.h>

namespace test_support {

struct collector_proc {
    std::unique_ptr<spawned> proc;
    std::uint16_t agent_port = 0, http_port = 0;

    // `env`: "NAME=value" entries for the collector's environment.
    explicit collector_proc(const std::filesystem::path& sessions,
                            const std::vector<std::string>& extra = {},
                            const std::vector<std::string>& env = {}) {
        std::vector<std::string> args{"--sessions-dir", sessions.string(), "--agent-port", "0",
                                      "--agent-bind",   "127.0.0.1",       "--http-port",  "0"};
        args.insert(args.end(), extra.begin(), extra.end());
        proc = std::make_unique<spawned>(collector_bin(), args, "/dev/null", env);
        const auto agents = proc->wait_for_stderr("agents on 127.0.0.1:", std::chrono::seconds(5));
        const auto http =
            proc->wait_for_stderr("API on http://127.0.0.1:", std::chrono::seconds(5));
        REQUIRE(agents);
        REQUIRE(http);
        agent_port = static_cast<std::uint16_t>(std::stoi(*agents));
        http_port = api_port(*http);
    }

    boost::json::value get(const std::string& target) {
        const auto r = http_call(http_port, "GET", target);
        INFO(target << " -> " << r.status << " " << r.body);
        REQUIRE(r.status == 200);
        boost::json::parse_options deep;
        deep.max_depth = 4096;
        return boost::json::parse(r.body, {}, deep);
    }
};

// A peer on the collector's agent port that has said hello as a perfwire agent on
// `hostname`: a stand-in agent whose every frame the test writes (engaged; reset() hangs up).
inline std::optional<framing_peer> hello_agent(const collector_proc& c,
                                               const std::string& hostname) {
    auto peer = framing_peer::connect(c.agent_port);
    REQUIRE(peer);
    peer->send(protocol::frame_flag::response,
               R"({"type":"hello","version":1,"agent":"perfwire","hostname":")" + hostname +
                   R"("})");
    return peer;
}

// An agent that says hello with `token` as its enrollment token.
inline std::optional<framing_peer>
enrolled_agent(const collector_proc& c, const std::string& hostname, const std::string& token) {
    auto peer = framing_peer::connect(c.agent_port);
    REQUIRE(peer);
    peer->send(protocol::frame_flag::response,
               R"({"type":"hello","version":1,"agent":"perfwire","hostname":")" + hostname +
                   R"(","enrollment":")" + token + R"("})");
    return peer;
}

// A browser on GET /api/stream (signed in with the collector's token), read raw: its socket.
inline int open_event_stream(const collector_proc& c) {
    const int fd = connect_loopback(c.http_port);
    REQUIRE(fd >= 0);
    const std::string token = api_token(c.http_port);
    const std::string get =
        "GET /api/stream HTTP/1.1\r\nHost: 127.0.0.1\r\nCookie: " + collector::token_cookie(token) +
        "=" + token + "\r\n\r\n";
    REQUIRE(::write(fd, get.data(), get.size()) == static_cast<ssize_t>(get.size()));
    return fd;
}

// Polls until `pred(json)` holds for GET target, up to `timeout`.
template <class Pred>
boost::json::value wait_for(collector_proc& c, const std::string& target,
                            std::chrono::seconds timeout, Pred pred) {
    return poll_json(c.http_port, target, timeout, pred);
}

// The one target the collector lists, once it is in `state` ("" for any) and, when `reason` is
// given, its state_reason says it. The test fails if that does not come within `timeout`.
inline boost::json::object one_target(collector_proc& c, std::string_view state,
                                      std::chrono::seconds timeout, std::string_view reason = {}) {
    const auto ready = [&](const boost::json::value& v) {
        if (!v.is_array() || v.as_array().size() != 1)
            return false;
        const auto& t = v.as_array()[0].as_object();
        const auto* st = t.if_contains("state");
        if (!state.empty() && !(st && st->is_string() && st->as_string() == state))
            return false;
        const auto* r = t.if_contains("state_reason");
        return reason.empty() || (r && r->is_string() &&
                                  std::string_view(r->as_string()).find(reason) != reason.npos);
    };
    const auto list = wait_for(c, "/api/targets", timeout, ready);
    INFO("targets: " << boost::json::serialize(list) << "; waited for one " << state << " "
                     << reason);
    REQUIRE(ready(list));
    return list.as_array()[0].as_object();
}

// The session folders under `sessions` (dot files such as the tokens are not sessions).
inline std::size_t session_folders(const std::filesystem::path& sessions) {
    std::size_t n = 0;
    for (const auto& e : std::filesystem::directory_iterator(sessions))
        n += e.is_directory() && e.path().filename().string()[0] != '.';
    return n;
}

} // namespace test_support
