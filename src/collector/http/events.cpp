#include "collector/http/events.hpp"

#include "collector/agents/agent_link.hpp"
#include "collector/context.hpp"

#include <boost/asio/steady_timer.hpp>
#include <boost/json/serialize.hpp>

#include <set>

namespace collector::events {
namespace json = boost::json;

namespace {

json::array target_list(const app_context& app) {
    json::array list;
    for (const auto& link : introduced_agents(app))
        list.push_back(link->describe());
    return list;
}

} // namespace

std::vector<std::string> first_picture(app_context& app) {
    return {sse_hub::format("status", json::serialize(json::object{
                                          {"version", PERFWIRE_VERSION},
                                          {"agent_listener", app.agent_listen_address}})),
            sse_hub::format("targets", json::serialize(target_list(app)))};
}

void publish(app_context& app, change what, const std::string& session_id) {
    if (!app.sse.clients())
        return;
    switch (what) {
    case change::targets:
        app.sse.broadcast("targets", json::serialize(target_list(app)));
        break;
    case change::data:
        if (auto e = app.sessions.known(session_id))
            app.sse.broadcast("data_version",
                              json::serialize(json::object{
                                  {"session_id", session_id},
                                  {"version", e->version.load()},
                                  {"chunks", e->chunks.load()},
                                  {"samples", e->samples.load()},
                                  {"lost_samples", e->lost_samples.load()},
                                  {"threads", e->threads.load()},
                                  {"duration_sec", static_cast<double>(e->span_ns.load()) / 1e9}}));
        break;
    case change::sessions:
        app.sse.broadcast("sessions", json::serialize(json::object{{"session_id", session_id}}));
        break;
    }
}

void metrics(app_context& app, std::string_view session_id, std::string_view record) {
    if (!app.sse.clients())
        return;
    std::string data = json::serialize(json::string(session_id));
    data.insert(0, R"({"session_id":)");
    data += R"(,"metrics":)";
    data += record;
    data += '}';
    app.sse.broadcast("metrics", data);
}

void import_progress(app_context& app, const json::object& progress) {
    if (app.sse.clients())
        app.sse.broadcast("import", json::serialize(progress));
}

struct data_notices::impl {
    explicit impl(app_context& a)
        : app(a)
        , tick(a.io) {}

    void flush() {
        last = std::chrono::steady_clock::now();
        for (const auto& id : std::exchange(dirty, {}))
            publish(app, change::data, id);
    }

    app_context& app;
    asio::steady_timer tick;
    bool armed = false;
    bool stopped = false;
    std::chrono::steady_clock::time_point last{};
    std::set<std::string> dirty;
};

data_notices::data_notices(app_context& app)
    : impl_(std::make_unique<impl>(app)) {}

data_notices::~data_notices() = default;

void data_notices::changed(const std::string& session_id) {
    auto& p = *impl_;
    if (p.stopped)
        return;
    p.dirty.insert(session_id);
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

void data_notices::stop() {
    impl_->stopped = true;
    impl_->dirty.clear();
    impl_->tick.cancel();
}

} // namespace collector::events
