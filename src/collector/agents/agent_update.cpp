#include "collector/agents/agent_update.hpp"

#include "collector/agents/agent_link.hpp"
#include "collector/agents/dial.hpp"
#include "collector/log.hpp"
#include "protocol/digest.hpp"
#include "protocol/tls.hpp"
#include "protocol/update.hpp"
#include "protocol/use_nothrow.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <fstream>
#include <sstream>

namespace collector::agents {
namespace json = boost::json;
using protocol::command_response;

namespace {

// Bytes of an agent build per update_data command (base64 in JSON: ~512 KiB a frame).
constexpr std::size_t update_piece = std::size_t{384} << 10;

// On the pool: an agent build and its SHA-256 (tens of MB are hashed off the I/O thread).
asio::awaitable<std::optional<std::pair<std::string, std::string>>>
read_and_hash(std::string path) {
    std::ifstream in(path, std::ios::binary);
    if (!in)
        co_return std::nullopt;
    std::ostringstream ss;
    ss << in.rdbuf();
    auto bytes = std::move(ss).str();
    auto sum = protocol::sha256_hex(bytes);
    co_return std::make_pair(std::move(bytes), std::move(sum));
}

// The offer, the pieces, the apply: the agent's answer to the apply (it then restarts into
// the new build), or the first refusal. The target says meanwhile how far it got.
asio::awaitable<command_response> push(app_context& app, std::shared_ptr<agent_link> link,
                                       const agent_binary& b, std::string bytes, std::string sum) {
    protocol::update_offer signed_offer{b.version, b.arch, sum, {}, bytes.size()};
    json::object offer;
    offer["version"] = b.version;
    offer["arch"] = b.arch;
    offer["size"] = static_cast<std::int64_t>(bytes.size());
    offer["sha256"] = sum;
    // Signed whenever this collector has a key: a pinned agent takes it either way.
    offer["signature"] =
        app.update_key
            ? protocol::tls::sign(*app.update_key, protocol::update_signed_text(signed_offer))
            : std::string();
    log(link->peer(), "offering agent " + b.version + " (" + b.arch + ", " +
                          std::to_string(bytes.size()) + " bytes)");
    update_progress progress{b.version, bytes.size(), 0, false};
    link->set_updating(progress);
    auto answer = co_await link->command(std::string(protocol::cmd::update), std::move(offer));
    std::size_t piece = update_piece;
    if (const auto* p = answer.fields.if_contains("piece");
        p && p->is_int64() && p->as_int64() >= 4096)
        piece = std::min(piece, static_cast<std::size_t>(p->as_int64()));
    for (std::size_t at = 0; answer.ok && at < bytes.size(); at += piece) {
        json::object data;
        data["offset"] = static_cast<std::int64_t>(at);
        data["data"] = protocol::base64_encode(std::string_view(bytes).substr(at, piece));
        answer = co_await link->command(std::string(protocol::cmd::update_data), std::move(data));
        progress.sent = std::min<std::uint64_t>(at + piece, bytes.size());
        if (answer.ok)
            link->set_updating(progress);
    }
    if (answer.ok) {
        progress.applying = true;
        link->set_updating(progress);
        answer = co_await link->command(std::string(protocol::cmd::update_apply), json::object());
    }
    link->set_updating(std::nullopt);
    log(link->peer(), answer.ok ? "agent updated to " + b.version + "; it restarts"
                                : "agent update refused: " + answer.error);
    co_return answer;
}

// A dialled agent listens again once restarted: this link ends (within 10 s), then it is
// dialled, once a second for up to 30 s.
asio::awaitable<result<std::string>> redial(app_context& app, std::shared_ptr<agent_link> link) {
    dial_request to{link->dial_host(), link->dial_port(), link->token(), link->dial_pin()};
    (void)co_await link->wait_closed(std::chrono::seconds(10));
    asio::steady_timer pause(co_await asio::this_coro::executor);
    const auto stopping = app.stops.on_stop([&pause] { pause.cancel(); });
    result<std::string> again = failure("connect_failed", "the collector is stopping", 502);
    for (int attempt = 0; attempt < 30 && !app.stops.stopping(); ++attempt) {
        again = co_await dial(app, to);
        if (again || app.stops.stopping())
            break;
        pause.expires_after(std::chrono::seconds(1));
        co_await pause.async_wait(protocol::use_nothrow);
    }
    co_return again;
}

} // namespace

const agent_binary* offered_update(const agent_link& link, const app_context& app) {
    const auto& hello = link.hello();
    if (!hello)
        return nullptr;
    std::string arch = hello->update_arch.value_or("");
    if (arch.empty() && hello->platform && hello->platform->arch)
        arch = *hello->platform->arch;
    for (const auto& b : app.agent_binaries)
        if (!arch.empty() && b.arch == arch && !b.sha256.empty() &&
            protocol::later_version(b.version, hello->agent_version.value_or("")))
            return &b;
    return nullptr;
}

std::string update_blocked(const agent_link& link, const app_context& app) {
    const auto& hello = link.hello();
    const std::string policy = hello ? hello->updates.value_or("") : "";
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
    if (policy == protocol::updates::signed_only && !app.update_key)
        return "the agent takes only signed updates, and this collector signs them only with "
               "--agent-update-key";
    if (policy != protocol::updates::signed_only && policy != protocol::updates::pinned)
        return "the agent did not say how it takes updates";
    return {};
}

asio::awaitable<result<json::object>> update_agent(app_context& app,
                                                   std::shared_ptr<agent_link> link) {
    const auto* offer = offered_update(*link, app);
    if (!offer)
        co_return failure("no_update",
                          "this collector has no later agent build for this target's "
                          "architecture (builds come from the agents folder, each with its "
                          ".sha256 and .version)",
                          409);
    if (const auto why = update_blocked(*link, app); !why.empty())
        co_return failure("update_refused", "cannot update " + link->id() + ": " + why, 409);
    const agent_binary b = *offer;
    auto build =
        co_await asio::co_spawn(app.pool, read_and_hash(b.path.string()), asio::use_awaitable);
    if (!build)
        co_return failure("io", "cannot read " + b.file, 500);
    json::object out;
    out["ok"] = false;
    out["from"] = link->hello()->agent_version.value_or("");
    out["version"] = b.version;
    if (link->updating()) {
        out["error"] = "an update to " + link->updating()->version + " is already under way";
        co_return out;
    }
    if (build->second != b.sha256) {
        out["error"] = b.file + " does not match its .sha256 (" + build->second + "): not sent";
        co_return out;
    }
    const auto answer = co_await push(app, link, b, std::move(build->first), build->second);
    if (!answer.ok) {
        out["error"] = answer.error;
        co_return out;
    }
    out["ok"] = true;
    out["id"] = link->id();
    if (!link->dial_host().empty()) {
        if (auto again = co_await redial(app, link))
            out["id"] = *again;
        else
            out["error"] = "updated, but dialling the agent again failed: " + again.error().message;
    }
    co_return out;
}

} // namespace collector::agents
