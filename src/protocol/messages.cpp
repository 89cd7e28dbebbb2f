#include "protocol/messages.hpp"

#include "protocol/frame.hpp"

#include <boost/describe/members.hpp>
#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <boost/json/value.hpp>
#include <boost/json/value_to.hpp>
#include <boost/mp11/algorithm.hpp>

#include <algorithm>
#include <type_traits>

namespace protocol {
namespace {

namespace json = boost::json;

template <class T>
struct is_optional : std::false_type {};
template <class T>
struct is_optional<std::optional<T>> : std::true_type {};

template <class T>
struct is_vector : std::false_type {};
template <class T>
struct is_vector<std::vector<T>> : std::true_type {};

template <class T>
struct is_string_map : std::false_type {};
template <class T>
struct is_string_map<std::map<std::string, T>> : std::true_type {};

template <class T>
using public_members = boost::describe::describe_members<T, boost::describe::mod_public>;

parse_error invalid(std::string detail) {
    return {make_error_code(errc::invalid_message), std::move(detail)};
}

bool fail(parse_error& err, const std::string& path, std::string_view what) {
    err = invalid("field '" + path + "' " + std::string(what));
    return false;
}

std::string join(const std::string& path, std::string_view key) {
    return path.empty() ? std::string(key) : path + "." + std::string(key);
}

// Reads `v` into `out`, recursing through described structs, optionals, vectors and string
// maps. On failure fills `err` with the dotted path of the field and returns false.
template <class T>
bool read_value(const json::value& v, T& out, const std::string& path, parse_error& err) {
    if constexpr (boost::describe::has_describe_members<T>::value) {
        const json::object* obj = v.if_object();
        if (!obj)
            return fail(err, path, "must be an object");
        bool ok = true;
        boost::mp11::mp_for_each<public_members<T>>([&](auto member) {
            if (!ok)
                return;
            auto& slot = out.*member.pointer;
            using M = std::remove_cvref_t<decltype(slot)>;
            const std::string sub = join(path, member.name);
            const auto it = obj->find(member.name);
            if (it == obj->end() || (is_optional<M>::value && it->value().is_null())) {
                if constexpr (is_optional<M>::value)
                    slot.reset();
                else
                    ok = fail(err, sub, "is missing");
                return;
            }
            ok = read_value(it->value(), slot, sub, err);
        });
        return ok;
    } else if constexpr (is_optional<T>::value) {
        typename T::value_type inner{};
        if (!read_value(v, inner, path, err))
            return false;
        out = std::move(inner);
        return true;
    } else if constexpr (is_vector<T>::value) {
        const json::array* arr = v.if_array();
        if (!arr)
            return fail(err, path, "must be an array");
        out.clear();
        out.resize(arr->size());
        for (std::size_t i = 0; i < arr->size(); ++i)
            if (!read_value((*arr)[i], out[i], path + "[" + std::to_string(i) + "]", err))
                return false;
        return true;
    } else if constexpr (is_string_map<T>::value) {
        const json::object* obj = v.if_object();
        if (!obj)
            return fail(err, path, "must be an object");
        out.clear();
        for (const auto& kv : *obj)
            if (!read_value(kv.value(), out[std::string(kv.key())], join(path, kv.key()), err))
                return false;
        return true;
    } else if constexpr (std::is_same_v<T, std::string>) {
        const json::string* s = v.if_string();
        if (!s)
            return fail(err, path, "must be a string");
        out.assign(s->data(), s->size());
        return true;
    } else if constexpr (std::is_same_v<T, bool>) {
        const bool* b = v.if_bool();
        if (!b)
            return fail(err, path, "must be a boolean");
        out = *b;
        return true;
    } else {
        static_assert(std::is_arithmetic_v<T>);
        auto number = json::try_value_to<T>(v);
        if (!number)
            return fail(err, path, "must be a number in range");
        out = *number;
        return true;
    }
}

template <class T>
json::value write_value(const T& in) {
    if constexpr (boost::describe::has_describe_members<T>::value) {
        json::object obj;
        boost::mp11::mp_for_each<public_members<T>>([&](auto member) {
            const auto& slot = in.*member.pointer;
            using M = std::remove_cvref_t<decltype(slot)>;
            if constexpr (is_optional<M>::value) {
                if (slot)
                    obj.emplace(member.name, write_value(*slot));
            } else {
                obj.emplace(member.name, write_value(slot));
            }
        });
        return obj;
    } else if constexpr (is_vector<T>::value) {
        json::array arr;
        arr.reserve(in.size());
        for (const auto& e : in)
            arr.push_back(write_value(e));
        return arr;
    } else if constexpr (is_string_map<T>::value) {
        json::object obj;
        for (const auto& [k, e] : in)
            obj.emplace(k, write_value(e));
        return obj;
    } else if constexpr (std::is_same_v<T, std::string>) {
        return json::string(in);
    } else {
        return json::value(in);
    }
}

parse_result<json::object> parse_object(std::string_view payload) {
    boost::system::error_code ec;
    json::value v = json::parse(json::string_view(payload.data(), payload.size()), ec);
    if (ec)
        return parse_error{make_error_code(errc::invalid_json), ec.message()};
    if (!v.is_object())
        return parse_error{make_error_code(errc::invalid_json), "expected a JSON object"};
    return std::move(v.as_object());
}

// Serializes a described struct with a "type" discriminator in front.
template <class T>
std::string serialize_typed(std::string_view type, const T& body) {
    json::object obj;
    obj.emplace("type", type);
    json::value fields = write_value(body);
    for (auto& kv : fields.as_object())
        obj.emplace(kv.key(), std::move(kv.value()));
    return json::serialize(obj);
}

template <class T>
parse_result<T> read_struct(const json::object& obj) {
    T out{};
    parse_error err;
    if (!read_value(json::value(obj), out, "", err))
        return err;
    return out;
}

// The first string member of `v` (recursing into optional structs) longer than its limit.
template <class T>
std::optional<std::string> overlong_field(const T& v, const std::string& path) {
    std::optional<std::string> found;
    boost::mp11::mp_for_each<public_members<T>>([&](auto d) {
        if (found)
            return;
        const auto& m = v.*d.pointer;
        using M = std::remove_cvref_t<decltype(m)>;
        const std::string name = path + d.name;
        constexpr std::size_t limit = max_hello_field;
        if constexpr (std::is_same_v<M, std::string>) {
            if (m.size() > limit)
                found = name;
        } else if constexpr (is_optional<M>::value) {
            using V = typename M::value_type;
            if constexpr (std::is_same_v<V, std::string>) {
                if (m && m->size() > limit)
                    found = name;
            } else if constexpr (std::is_class_v<V> &&
                                 boost::describe::has_describe_members<V>::value) {
                if (m)
                    found = overlong_field(*m, name + ".");
            }
        }
    });
    return found;
}

parse_result<hello> hello_from(const json::object& obj) {
    const auto* type = obj.if_contains("type");
    if (!type || !type->is_string() || type->get_string() != "hello")
        return invalid("field 'type' must be \"hello\"");
    auto h = read_struct<hello>(obj);
    if (!h)
        return h;
    if (const auto name = overlong_field(*h, ""))
        return invalid("field '" + *name + "' is longer than " + std::to_string(max_hello_field) +
                       " bytes");
    if (h->run && !valid_run_id(h->run->id))
        return invalid("field 'run.id' must be 32 lowercase hex digits");
    return h;
}

parse_result<command_response> response_from(json::object obj) {
    command_response r;
    parse_error err;
    const auto id = obj.find("id");
    if (id == obj.end() || !id->value().is_string())
        return invalid("field 'id' must be a string");
    const auto ok = obj.find("ok");
    if (ok == obj.end() || !ok->value().is_bool())
        return invalid("field 'ok' must be a boolean");
    r.id = id->value().get_string();
    r.ok = ok->value().get_bool();
    // A successful response may carry "error": null as one of its fields (verify_perf does).
    const auto e = obj.find("error");
    const bool has_error = e != obj.end() && !e->value().is_null();
    if (has_error && !e->value().is_string())
        return invalid("field 'error' must be a string");
    if (!r.ok)
        r.error = has_error ? std::string(e->value().get_string()) : "unspecified error";
    // Copy rather than erase: object::erase moves the last member into the hole, which would
    // reorder the fields on every round trip.
    for (auto& kv : obj) {
        const auto key = kv.key();
        if (key == "id" || key == "ok" || (key == "error" && !r.ok))
            continue;
        r.fields.emplace(key, std::move(kv.value()));
    }
    return r;
}

} // namespace

std::string_view to_string(agent_state s) noexcept {
    switch (s) {
    case agent_state::connecting:
        return "connecting";
    case agent_state::authenticating:
        return "authenticating";
    case agent_state::idle:
        return "idle";
    case agent_state::profiling:
        return "profiling";
    case agent_state::paused:
        return "paused";
    case agent_state::armed:
        return "armed";
    }
    return "idle";
}

std::optional<agent_state> agent_state_from(std::string_view s) noexcept {
    for (auto st : {agent_state::connecting, agent_state::authenticating, agent_state::idle,
                    agent_state::profiling, agent_state::paused, agent_state::armed})
        if (to_string(st) == s)
            return st;
    return std::nullopt;
}

bool valid_run_id(std::string_view id) noexcept {
    return id.size() == 32 && std::all_of(id.begin(), id.end(), [](char c) {
               return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
           });
}

parse_result<hello> parse_hello(std::string_view payload) {
    if (payload.size() > max_hello)
        return parse_error{make_error_code(errc::message_too_large),
                           "hello of " + std::to_string(payload.size()) + " bytes"};
    auto obj = parse_object(payload);
    if (!obj)
        return obj.error();
    return hello_from(*obj);
}

std::string serialize(const hello& h) {
    return serialize_typed("hello", h);
}

parse_result<command_request> parse_command_request(std::string_view payload) {
    auto obj = parse_object(payload);
    if (!obj)
        return obj.error();
    command_request r;
    const auto* id = obj->if_contains("id");
    if (!id || !id->is_string())
        return invalid("field 'id' must be a string");
    const auto* cmd = obj->if_contains("cmd");
    if (!cmd || !cmd->is_string() || cmd->get_string().empty())
        return invalid("field 'cmd' must be a non-empty string");
    r.id = id->get_string();
    r.cmd = cmd->get_string();
    if (auto* args = obj->if_contains("args"); args && !args->is_null()) {
        if (!args->is_object())
            return invalid("field 'args' must be an object");
        r.args = std::move(args->as_object());
    }
    return r;
}

std::string serialize(const command_request& r) {
    json::object obj;
    obj.emplace("id", r.id);
    obj.emplace("cmd", r.cmd);
    obj.emplace("args", r.args);
    return json::serialize(obj);
}

command_response command_response::success(std::string id, json::object fields) {
    return {std::move(id), true, {}, std::move(fields)};
}

command_response command_response::failure(std::string id, std::string error) {
    return {std::move(id), false, std::move(error), {}};
}

parse_result<command_response> parse_command_response(std::string_view payload) {
    auto obj = parse_object(payload);
    if (!obj)
        return obj.error();
    return response_from(std::move(*obj));
}

std::string serialize(const command_response& r) {
    json::object obj;
    obj.emplace("id", r.id);
    obj.emplace("ok", r.ok);
    if (!r.ok)
        obj.emplace("error", r.error);
    for (const auto& kv : r.fields)
        obj.emplace(kv.key(), kv.value()); // emplace keeps id/ok/error if fields repeat them
    return json::serialize(obj);
}

std::string serialize(const state_notice& n) {
    return serialize_typed("state", n);
}

parse_result<agent_reply> parse_agent_reply(std::string_view payload) {
    auto obj = parse_object(payload);
    if (!obj)
        return obj.error();
    if (const auto* type = obj->if_contains("type"); type && type->is_string()) {
        if (type->get_string() == "hello") {
            if (payload.size() > max_hello)
                return parse_error{make_error_code(errc::message_too_large), "hello"};
            auto h = hello_from(*obj);
            if (!h)
                return h.error();
            return agent_reply(std::move(*h));
        }
        if (type->get_string() == "state") {
            auto n = read_struct<state_notice>(*obj);
            if (!n)
                return n.error();
            return agent_reply(std::move(*n));
        }
    }
    auto r = response_from(std::move(*obj));
    if (!r)
        return r.error();
    return agent_reply(std::move(*r));
}

std::string_view metrics_type(const health_metrics& m) noexcept {
    constexpr std::string_view names[] = {"system",  "process",  "network", "disk",
                                          "threads", "binaries", "flight"};
    return names[m.index()];
}

parse_result<health_metrics> parse_metrics(std::string_view payload) {
    auto obj = parse_object(payload);
    if (!obj)
        return obj.error();
    const auto* type = obj->if_contains("type");
    if (!type || !type->is_string())
        return invalid("field 'type' must be a string");
    const json::string& t = type->get_string();

    parse_result<health_metrics> out = parse_error{};
    auto read_as = [&](auto tag) {
        using T = decltype(tag);
        auto r = read_struct<T>(*obj);
        out = r ? parse_result<health_metrics>(health_metrics(std::move(*r)))
                : parse_result<health_metrics>(r.error());
    };
    if (t == "system")
        read_as(system_metrics{});
    else if (t == "process")
        read_as(process_metrics{});
    else if (t == "network")
        read_as(network_metrics{});
    else if (t == "disk")
        read_as(disk_metrics{});
    else if (t == "threads")
        read_as(threads_metrics{});
    else if (t == "binaries") {
        read_as(binaries_metrics{});
        // A build-id is what the ELF note holds: lowercase hex, or empty when a file has none.
        // Nothing else (a word the collector gives meaning to) may come from an agent.
        if (out)
            for (const auto& b : std::get<binaries_metrics>(*out).binaries)
                if (b.build_id.size() > 128 ||
                    b.build_id.find_first_not_of("0123456789abcdef") != std::string::npos)
                    return invalid("a build_id must be lowercase hex (at most 128 digits)");
    } else if (t == "flight") {
        read_as(flight_metrics{});
        // Only the triggers there are, each said in at most 1 KiB.
        if (out)
            for (const auto& [key, value] : std::get<flight_metrics>(*out).triggers)
                if (value.size() > 1024 || (key != "cpu" && key != "memory" && key != "load" &&
                                            key != "log" && key != "process" && key != "file"))
                    return invalid("a flight trigger must be cpu, memory, load, log, process or "
                                   "file, said in at most 1024 bytes");
    } else
        return parse_error{make_error_code(errc::unknown_message_type),
                           "metrics type '" + std::string(t) + "'"};
    return out;
}

std::string serialize(const health_metrics& m) {
    return std::visit([&](const auto& body) { return serialize_typed(metrics_type(m), body); }, m);
}

} // namespace protocol
