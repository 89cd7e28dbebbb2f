#include "collector/http/events.hpp"

#include "collector/agents/agent_link.hpp"
#include "collector/agents/target_view.hpp"
#include "collector/context.hpp"
#include "collector/http/sse.hpp"
#include "collector/http/status.hpp"

#include <boost/asio/steady_timer.hpp>
#include <boost/json/serialize.hpp>

#include <set>

namespace collector::events {
namespace json = boost::json;

namespace {

json::array target_list(const app_context& app) {
    json::array list;
    for (const auto& link : app.agents.introduced())
        list.push_back(agents::target_json(*link, app));
    return list;
}

std::string data_version(const session_entry& e) {
    return json::serialize(
        json::object{{"session_id", e.id},
                     {"version", e.version.load()},
                     {"chunks", e.chunks.load()},
                     {"samples", e.samples.load()},
                     {"lost_samples", e.lost_samples.load()},
                     {"threads", e.threads.load()},
                     {"duration_sec", static_cast<double>(e.span_ns.load()) / 1e9}});
}

} // namespace

std::vector<std::string> first_picture(app_context& app) {
    std::vector<std::string> out{sse_hub::format("status", json::serialize(status_json(app))),
                                 sse_hub::format("targets", json::serialize(target_list(app)))};
    // The counts of every live session, as a later change would say them.
    for (const auto& e : app.sessions.entries())
        if (e->live)
            out.push_back(sse_hub::format("data_version", data_version(*e)));
    return out;
}

struct feed::impl {
    explicit impl(app_context& a)
        : app(a)
        , tick(a.io) {}

    void flush() {
        last = std::chrono::steady_clock::now();
        auto t = std::exchange(targets, {});
        auto d = std::exchange(data, {});
        auto s = std::exchange(sessions, {});
        if (!hub.clients())
            return;
        if (!t.empty()) {
            json::array changed, gone;
            for (const auto& id : t) {
                auto link = app.agents.find(id);
                if (link && link->introduced())
                    changed.push_back(agents::target_json(*link, app));
                else
                    gone.push_back(json::string(id));
            }
            hub.broadcast("targets_changed",
                          json::serialize(json::object{{"targets", std::move(changed)},
                                                       {"gone", std::move(gone)}}));
        }
        for (const auto& id : d)
            if (auto e = app.sessions.known(id))
                hub.broadcast("data_version", data_version(*e));
        if (!s.empty()) {
            json::array ids;
            for (const auto& id : s)
                ids.push_back(json::string(id));
            hub.broadcast("sessions",
                          json::serialize(json::object{{"session_ids", std::move(ids)}}));
        }
    }

    // The status as it is now, when it changed (its uptime aside) and was last told at least
    // status_interval ago: the browsers show it without asking (one source of it).
    void tell_status() {
        const auto now = std::chrono::steady_clock::now();
        if (now - status_told < status_interval)
            return;
        auto st = status_json(app);
        auto text = json::serialize(st);
        st.erase("uptime_sec");
        auto key = json::serialize(st);
        if (key == status_key)
            return;
        status_key = std::move(key);
        status_told = now;
        hub.broadcast("status", text);
    }
    static constexpr std::chrono::seconds status_interval{5};

    app_context& app;
    sse_hub hub;
    asio::steady_timer tick;
    bool armed = false;
    bool stopped = false;
    std::chrono::steady_clock::time_point last{};
    std::set<std::string> targets, data, sessions;
    std::string status_key;
    std::chrono::steady_clock::time_point status_told{};
};

feed::feed(app_context& app)
    : impl_(std::make_unique<impl>(app)) {}

feed::~feed() = default;

sse_hub& feed::hub() noexcept {
    return impl_->hub;
}

sse_hub& hub(app_context& app) {
    // The context makes its feed this one (context.cpp).
    return static_cast<feed&>(*app.browsers).hub();
}

void feed::changed(change what, const std::string& id) {
    auto& p = *impl_;
    if (p.stopped)
        return;
    if (what == change::status) { // its own pace (tell_status), outside the changes' coalescing
        if (p.hub.clients())
            p.tell_status();
        return;
    }
    (what == change::targets ? p.targets : what == change::data ? p.data : p.sessions).insert(id);
    if (p.armed)
        return; // told at the tick
    const auto due = p.last + interval;
    if (std::chrono::steady_clock::now() >= due) {
        p.flush();
        return;
    }
    p.armed = true;
    p.tick.expires_at(due);
    p.tick.async_wait([&p](boost::system::error_code ec) {
        p.armed = false;
        if (!ec && !p.stopped)
            p.flush();
    });
}

void feed::metrics(std::string_view session_id, std::string_view record) {
    if (!impl_->hub.clients())
        return;
    std::string data = json::serialize(json::string(session_id));
    data.insert(0, R"({"session_id":)");
    data += R"(,"metrics":)";
    data += record;
    data += '}';
    impl_->hub.broadcast("metrics", data);
}

void feed::import_progress(const json::object& progress) {
    if (impl_->hub.clients())
        impl_->hub.broadcast("import", json::serialize(progress));
}

void feed::stop() {
    impl_->stopped = true;
    impl_->targets.clear();
    impl_->data.clear();
    impl_->sessions.clear();
    impl_->tick.cancel();
}

} // namespace collector::events
