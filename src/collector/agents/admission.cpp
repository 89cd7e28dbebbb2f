#include "collector/agents/admission.hpp"

#include "collector/accepting.hpp"
#include "collector/agents/agent_link.hpp"
#include "collector/agents/registry.hpp"
#include "collector/log.hpp"
#include "protocol/error.hpp"
#include "protocol/link_stream.hpp"
#include "protocol/pairing.hpp"

#include <boost/asio/co_spawn.hpp>

#include <algorithm>

namespace collector::agents {

double token_buckets::level(const bucket& b, clock::time_point now) const {
    return std::min(burst_,
                    b.tokens + per_second_ * std::chrono::duration<double>(now - b.at).count());
}

token_buckets::verdict token_buckets::check(std::string_view address, clock::time_point now) {
    if (buckets_.size() >= max_addresses)
        std::erase_if(buckets_, [&](const auto& kv) { return level(kv.second, now) >= burst_; });
    if (buckets_.size() >= max_addresses)
        buckets_.clear(); // a spread-out flood: start over rather than grow
    auto [it, fresh] = buckets_.try_emplace(std::string(address), bucket{burst_, now, false});
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

admission_verdict admission::screen(std::string_view address, clock::time_point now) {
    admission_verdict out;
    const auto v = gate_.check(address, now);
    if (v == token_buckets::verdict::admit) {
        out.when_full = connection_budget::when_full::evict_oldest;
        return out;
    }
    out.probation = true;
    if (v == token_buckets::verdict::refuse_first)
        out.log_lines.push_back(enrolls_
                                    ? "too many connections from this address; for a while only "
                                      "agents with a valid enrollment token are admitted from it"
                                    : "too many connections from this address; refusing them for a "
                                      "while");
    if (!enrolls_)
        return out;
    const auto p = probation_.check(address, now);
    if (p == token_buckets::verdict::refuse_first)
        out.log_lines.push_back("too many connections from this address even for enrolled "
                                "agents; refusing them for a while");
    if (p == token_buckets::verdict::admit)
        out.when_full = connection_budget::when_full::refuse;
    return out;
}

std::optional<std::string>
enrolled_as(const std::vector<std::pair<std::string, std::string>>& tokens,
            const std::optional<std::string>& presented) {
    std::optional<std::string> label;
    if (!presented)
        return label;
    for (const auto& [token, token_label] : tokens) // (every one: constant time)
        if (protocol::constant_time_equal(token, *presented))
            label = token_label;
    return label;
}

asio::awaitable<void> accept_agents(app_context& app, asio::ip::tcp::acceptor& acceptor) {
    admission gate(!app.enrollment.empty());
    budgeted_acceptor accepting(acceptor, app.connections, connection_budget::kind::agent, "agent");
    // Past its address's limit, a connection is closed at once, unless this collector enrolls
    // agents: then it may come in on probation if an unproven slot is free, and must prove
    // itself with a valid enrollment token (a lab behind one NAT reconnecting after a restart
    // is admitted at once).
    bool probation = false;
    const auto screen =
        [&](const asio::ip::tcp::socket& socket) -> std::optional<connection_budget::when_full> {
        boost::system::error_code aec;
        const auto address = socket.remote_endpoint(aec).address().to_string();
        auto v = gate.screen(address_key(address), clock::now());
        for (const auto& line : v.log_lines)
            log(address, line);
        probation = v.probation;
        return v.when_full;
    };
    for (;;) {
        auto accepted = co_await accepting.next(screen);
        if (!accepted)
            co_return;
        auto& [socket, slot] = *accepted;
        const std::string id = app.agents.next_id();
        auto link = std::make_shared<agent_link>(
            std::make_unique<protocol::link_stream>(std::move(socket)), app, id, app.cfg.token);
        link->hold(std::move(slot));
        if (probation)
            link->on_probation();
        app.agents.add(id, link);
        asio::co_spawn(acceptor.get_executor(), link->run(), [](std::exception_ptr e) {
            if (e)
                log("listener", "agent connection failed: " + protocol::describe(e));
        });
    }
}

} // namespace collector::agents
