#include "collector/http/events.hpp"

#include "collector/agents/agent_link.hpp"
#include "collector/context.hpp"

#include <boost/json/serialize.hpp>

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
        if (auto e = app.sessions.find(session_id))
            app.sse.broadcast("data_version", json::serialize(json::object{
                                                  {"session_id", session_id},
                                                  {"version", e->version.load()},
                                                  {"chunks", e->chunks.load()},
                                                  {"samples", e->samples.load()},
                                                  {"lost_samples", e->lost_samples.load()}}));
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

} // namespace collector::events
