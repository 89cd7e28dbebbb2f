#include "collector/agents/target_view.hpp"

#include "collector/agents/agent_link.hpp"
#include "collector/agents/agent_update.hpp"

#include <boost/json/value_from.hpp>

#include <algorithm>

namespace collector::agents {
namespace json = boost::json;

namespace {

json::value or_null(const std::optional<std::string>& v) {
    return v ? json::value(*v) : json::value(nullptr);
}

json::value or_null(const std::string& v) {
    return v.empty() ? json::value(nullptr) : json::value(v);
}

} // namespace

json::object platform_json(const protocol::hello& hello) {
    json::object platform;
    if (!hello.platform)
        return platform;
    const auto& p = *hello.platform;
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
    return platform;
}

json::object target_json(const agent_link& link, const app_context& app) {
    const auto& hello = link.hello();
    json::object o;
    o["id"] = link.id();
    o["session_id"] = or_null(link.session_id());
    o["last_session_id"] = or_null(link.last_session_id());
    o["agent"] = hello ? json::value(hello->agent) : json::value(nullptr);
    o["agent_version"] = hello ? or_null(hello->agent_version) : json::value(nullptr);
    o["hostname"] = hello ? or_null(hello->hostname) : json::value(nullptr);
    o["peer"] = link.peer();
    o["platform"] = hello ? platform_json(*hello) : json::object();
    o["state"] = protocol::to_string(link.state());
    o["state_reason"] = or_null(link.state_reason());
    o["pid"] = link.pid() ? json::value(*link.pid()) : json::value(nullptr);
    o["continuous"] = link.in_continuous_run();
    // A flight recorder: what its window holds, what fires it, what fired last.
    if (const auto& fl = link.flight()) {
        json::object f;
        f["window_s"] = fl->window_s;
        f["held_s"] = fl->held_s;
        f["after_s"] = fl->after_s;
        f["held_bytes"] = fl->held_bytes;
        f["memory_bytes"] = fl->memory_bytes;
        f["cut_for_room"] = fl->cut_for_room;
        f["captures"] = fl->captures;
        f["capturing"] = fl->capturing;
        f["triggers"] = json::value_from(fl->triggers);
        f["last_fired"] = fl->last_fired ? json::value(*fl->last_fired) : json::value(nullptr);
        f["log_problem"] = fl->log_problem ? json::value(*fl->log_problem) : json::value(nullptr);
        o["flight"] = std::move(f);
    } else {
        o["flight"] = nullptr;
    }
    if (const auto c = link.catch_up()) {
        json::object progress;
        progress["chunks_left"] = c->chunks_left;
        progress["chunks"] = c->chunks;
        progress["bytes"] = c->bytes;
        o["catching_up"] = std::move(progress);
    } else {
        o["catching_up"] = nullptr;
    }
    o["connected_at"] = link.connected_at();
    const auto security = link.link_security();
    json::object l;
    l["encrypted"] = security.encrypted;
    l["tls"] = security.encrypted ? json::value(security.tls) : json::value(nullptr);
    l["pinned"] = or_null(security.pinned);
    o["link"] = std::move(l);
    const auto* offer = offered_update(link, app);
    o["update"] = offer ? json::value(offer->version) : json::value(nullptr);
    o["updates"] = hello ? or_null(hello->updates) : json::value(nullptr);
    o["update_blocked"] = offer ? or_null(update_blocked(link, app)) : json::value(nullptr);
    if (const auto& u = link.updating()) {
        json::object progress;
        progress["version"] = u->version;
        progress["size"] = u->size;
        progress["sent"] = u->sent;
        progress["applying"] = u->applying;
        o["updating"] = std::move(progress);
    } else {
        o["updating"] = nullptr;
    }
    return o;
}

result<json::object> origin_of(const json::value& v) {
    static constexpr std::string_view keys[] = {"job", "url", "commit", "branch", "pipeline", "by"};
    if (!v.is_object() || v.as_object().size() > std::size(keys))
        return failure("bad_origin", "origin must be an object of job, url, commit, branch, "
                                     "pipeline and by");
    json::object out;
    for (const auto& [key, value] : v.as_object()) {
        if (std::find(std::begin(keys), std::end(keys), std::string_view(key)) == std::end(keys))
            return failure("bad_origin", "origin takes job, url, commit, branch, pipeline and by");
        if (!value.is_string() || value.as_string().size() > 512 ||
            std::any_of(value.as_string().begin(), value.as_string().end(),
                        [](char c) { return static_cast<unsigned char>(c) < 0x20 || c == 0x7f; }))
            return failure("bad_origin", "origin's " + std::string(key) +
                                             " must be text of at most 512 bytes, one line");
        out[key] = value;
    }
    return out;
}

} // namespace collector::agents
