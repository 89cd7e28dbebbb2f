#include "protocol/error.hpp"
#include "protocol/frame.hpp"
#include "protocol/messages.hpp"

#include <catch2/catch.hpp>

#include <stdexcept>

#include <boost/json/serialize.hpp>

using namespace protocol;

TEST_CASE("hello round-trips and never carries a secret", "[protocol][messages]") {
    hello h;
    h.agent_version = "0.1.0";
    h.auth = "token";
    h.hostname = "board-7";
    h.platform = platform_info{"armv7", "aarch64", "6.1.0", "perf version 6.1", 2};
    const std::string text = serialize(h);
    CHECK(text.rfind(R"({"type":"hello",)", 0) == 0);
    auto back = parse_hello(text);
    REQUIRE(back.has_value());
    CHECK(back->agent == "perfwire");
    CHECK(back->hostname == "board-7");
    REQUIRE(back->platform);
    CHECK(back->platform->perf_event_paranoid == 2);
    CHECK(back->platform->kernel == "6.1.0");
    CHECK(back->platform->arch == "armv7");
    CHECK(back->platform->machine == "aarch64");
}

TEST_CASE("hello from another agent with unknown fields is accepted", "[protocol][messages]") {
    auto h = parse_hello(R"({"type":"hello","version":1,"agent":"perflens","agent_version":"2.3",
        "features":["x"],"platform":{"arch":"aarch64","gpu":null,"perf_event_paranoid":-1}})");
    REQUIRE(h.has_value());
    CHECK(h->agent == "perflens");
    CHECK(h->platform->arch == "aarch64");
    CHECK(h->platform->perf_event_paranoid == -1);
    CHECK_FALSE(h->hostname.has_value());
}

TEST_CASE("bad hellos are error values naming the problem", "[protocol][messages]") {
    auto check = [](std::string_view text, errc code, std::string_view detail) {
        auto r = parse_hello(text);
        REQUIRE(r.has_error());
        CHECK(r.error().code == code);
        CHECK_THAT(r.error().message(), Catch::Contains(std::string(detail)));
    };
    check("not json", errc::invalid_json, "");
    check("[1,2]", errc::invalid_json, "object");
    check(R"({"type":"goodbye","version":1,"agent":"x"})", errc::invalid_message, "type");
    check(R"({"type":"hello","agent":"x"})", errc::invalid_message, "'version' is missing");
    check(R"({"type":"hello","version":"1","agent":"x"})", errc::invalid_message, "version");
    check(R"({"type":"hello","version":1.5,"agent":"x"})", errc::invalid_message, "version");
    check(R"({"type":"hello","version":1,"agent":7})", errc::invalid_message, "agent");
    check(R"({"type":"hello","version":1,"agent":"x","platform":{"perf_event_paranoid":"2"}})",
          errc::invalid_message, "platform.perf_event_paranoid");
    const std::string big =
        R"({"type":"hello","version":1,"agent":"x","pad":")" + std::string(max_hello, 'a') + "\"}";
    check(big, errc::message_too_large, "bytes");
    // Each string is shown with its target in every browser: bounded one by one.
    const std::string long_name(max_hello_field + 1, 'h');
    check(R"({"type":"hello","version":1,"agent":"x","hostname":")" + long_name + "\"}",
          errc::invalid_message, "'hostname' is longer than 256 bytes");
    check(R"({"type":"hello","version":1,"agent":"x","platform":{"kernel":")" + long_name + "\"}}",
          errc::invalid_message, "'platform.kernel' is longer");
    check(R"({"type":"hello","version":1,"agent":")" + long_name + "\"}", errc::invalid_message,
          "'agent' is longer");
    const std::string at_limit(max_hello_field, 'h');
    CHECK(parse_hello(R"({"type":"hello","version":1,"agent":"x","hostname":")" + at_limit +
                      R"(","enrollment":")" + std::string(max_hello_field, 'e') + "\"}")
              .has_value());
}

TEST_CASE("deeply nested JSON is refused without a crash", "[protocol][messages]") {
    const std::string deep = std::string(100000, '[') + std::string(100000, ']');
    CHECK(parse_command_request(deep).error().code == errc::invalid_json);
}

TEST_CASE("command requests validate id, cmd and args", "[protocol][messages]") {
    command_request req{"7", "start", {}};
    req.args["pid"] = 42;
    auto back = parse_command_request(serialize(req));
    REQUIRE(back.has_value());
    CHECK(back->id == "7");
    CHECK(back->cmd == "start");
    CHECK(back->args.at("pid").as_int64() == 42);

    CHECK(parse_command_request(R"({"id":"1","cmd":"ping"})")->args.empty());
    CHECK(parse_command_request(R"({"id":"1","cmd":"ping","args":null})").has_value());
    CHECK(parse_command_request(R"({"id":1,"cmd":"ping"})").has_error());
    CHECK(parse_command_request(R"({"id":"1","cmd":""})").has_error());
    CHECK(parse_command_request(R"({"id":"1"})").has_error());
    CHECK(parse_command_request(R"({"id":"1","cmd":"x","args":[1]})").has_error());
}

TEST_CASE("command responses keep their extra fields", "[protocol][messages]") {
    boost::json::object fields;
    fields["state"] = "idle";
    fields["pid"] = nullptr;
    const auto ok = serialize(command_response::success("9", fields));
    CHECK(ok == R"({"id":"9","ok":true,"state":"idle","pid":null})");
    auto back = parse_command_response(ok);
    REQUIRE(back.has_value());
    CHECK(back->ok);
    CHECK(back->fields.at("state").as_string() == "idle");
    CHECK_FALSE(back->fields.contains("id"));

    const auto bad = serialize(command_response::failure("10", "not profiling"));
    CHECK(bad == R"({"id":"10","ok":false,"error":"not profiling"})");
    auto err = parse_command_response(bad);
    REQUIRE(err.has_value());
    CHECK_FALSE(err->ok);
    CHECK(err->error == "not profiling");

    auto perf = parse_command_response(R"({"id":"4","ok":true,"functional":true,"error":null})");
    REQUIRE(perf.has_value());
    CHECK(perf->ok);
    CHECK(perf->fields.at("error").is_null()); // a field of the success, kept as sent
    CHECK(parse_command_response(R"({"id":"1","ok":false,"error":7})").has_error());
    // Found by the fuzzer: extra fields keep their order through a round trip.
    const std::string mixed = R"({"if":"1","id":"2","ok":true,"state":"idle"})";
    const auto once = serialize(*parse_command_response(mixed));
    CHECK(once == R"({"id":"2","ok":true,"if":"1","state":"idle"})");
    CHECK(serialize(*parse_command_response(once)) == once);
    CHECK(parse_command_response(R"({"id":"1","ok":"yes"})").has_error());
    CHECK(parse_command_response(R"({"ok":true})").has_error());
    CHECK(parse_command_response(R"({"id":"1","ok":false})")->error == "unspecified error");
}

TEST_CASE("a flag-3 payload is told apart as hello or response", "[protocol][messages]") {
    auto h = parse_agent_reply(R"({"type":"hello","version":1,"agent":"perfwire"})");
    REQUIRE(h.has_value());
    CHECK(std::holds_alternative<hello>(*h));
    auto r = parse_agent_reply(R"({"id":"3","ok":true,"processes":[]})");
    REQUIRE(r.has_value());
    CHECK(std::holds_alternative<command_response>(*r));
    CHECK(parse_agent_reply(R"({"type":"hello","agent":"x"})").has_error());

    state_notice exited;
    exited.state = "idle";
    exited.reason = "target process exited";
    exited.pid = 42;
    const std::string notice = serialize(exited);
    CHECK(notice == R"({"type":"state","state":"idle","reason":"target process exited","pid":42})");
    auto n = parse_agent_reply(notice);
    REQUIRE(n.has_value());
    REQUIRE(std::holds_alternative<state_notice>(*n));
    CHECK(std::get<state_notice>(*n).pid == 42);
    state_notice started;
    started.state = "profiling";
    started.reason = "started from the command line";
    started.pid = 7;
    started.lost_samples = 0;
    started.callgraph = "dwarf";
    const auto running = parse_agent_reply(serialize(started));
    REQUIRE(running.has_value());
    CHECK(std::get<state_notice>(*running).callgraph == "dwarf");
    // A flight recorder's capture: what fired, when, and the window before it.
    state_notice capture = started;
    capture.capture = "SIGUSR1";
    capture.capture_at = 1795762356.5;
    capture.capture_window = 19.7;
    const auto captured = parse_agent_reply(serialize(capture));
    REQUIRE(captured.has_value());
    CHECK(std::get<state_notice>(*captured).capture == "SIGUSR1");
    CHECK(std::get<state_notice>(*captured).capture_at == 1795762356.5);
    CHECK(std::get<state_notice>(*captured).capture_window == 19.7);
    CHECK(agent_state_from("armed") == agent_state::armed);
    CHECK(parse_agent_reply(R"({"type":"state"})").has_error());
}

TEST_CASE("every metrics type round-trips", "[protocol][messages]") {
    system_metrics sys;
    sys.ts = 1700000000.5;
    sys.cpu = {12.5, {10, 15}, std::nullopt, 2};
    sys.mem.total_kb = 24000000;
    sys.mem.used_pct = 3.5;
    sys.load = {0.5, 0.25, 0.125};
    sys.temp_c = 48.0;
    sys.context_switches = 1ULL << 40;

    process_metrics proc;
    proc.pid = 4242;
    proc.comm = "demo";
    proc.state = "R";
    proc.oom_score = 667;

    network_metrics net;
    net.interfaces["eth0"].rx_bytes = 123456789;
    disk_metrics disk;
    disk.devices["vda"].write_ms = 77;
    threads_metrics thr;
    thr.pid = 4242;
    thr.threads = {{4242, "demo", "R", 100}, {4243, "worker 1", "S", 5}};

    for (const health_metrics& m : {health_metrics(sys), health_metrics(proc), health_metrics(net),
                                    health_metrics(disk), health_metrics(thr)}) {
        const std::string text = serialize(m);
        CHECK_THAT(text, Catch::StartsWith("{\"type\":\"" + std::string(metrics_type(m))));
        auto back = parse_metrics(text);
        REQUIRE(back.has_value());
        CHECK(back->index() == m.index());
        CHECK(serialize(*back) == text);
    }
    const auto s = std::get<system_metrics>(*parse_metrics(serialize(sys)));
    CHECK(s.cpu.per_core.size() == 2);
    CHECK_FALSE(s.cpu.freq_mhz);
    CHECK(s.temp_c == 48.0);
    CHECK(s.context_switches == 1ULL << 40);
    const auto t = std::get<threads_metrics>(*parse_metrics(serialize(thr)));
    CHECK(t.threads[1].comm == "worker 1");
}

TEST_CASE("bad metrics name the field", "[protocol][messages]") {
    auto r = parse_metrics(R"({"type":"threads","ts":1,"pid":2,"clk_tck":100,
        "threads":[{"tid":1,"comm":"a","state":"R","ticks":1},{"tid":2,"comm":"b","state":"S"}]})");
    REQUIRE(r.has_error());
    CHECK_THAT(r.error().message(), Catch::Contains("threads[1].ticks"));

    auto neg = parse_metrics(R"({"type":"disk","ts":1,"devices":{"sda":{"reads":-1,
        "read_bytes":0,"writes":0,"write_bytes":0,"read_ms":0,"write_ms":0}}})");
    REQUIRE(neg.has_error());
    CHECK_THAT(neg.error().message(), Catch::Contains("devices.sda.reads"));

    auto unknown = parse_metrics(R"({"type":"gpu","ts":1})");
    REQUIRE(unknown.has_error());
    CHECK(unknown.error().code == errc::unknown_message_type);
    CHECK(parse_metrics(R"({"ts":1})").error().code == errc::invalid_message);
}

TEST_CASE("a coroutine's exception is described for its log line", "[protocol]") {
    CHECK(protocol::describe(nullptr).empty());
    CHECK(protocol::describe(std::make_exception_ptr(std::runtime_error("disk full"))) ==
          "disk full");
    CHECK(protocol::describe(std::make_exception_ptr(42)) == "unknown exception");
}
