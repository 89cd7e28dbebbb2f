// The HTTP API through handle_request: no socket, a real session store on disk.
#include "collector/http/access.hpp"
#include "collector/http/routes.hpp"
#include "collector/http/upload.hpp"
#include "protocol/compression.hpp"
#include "support/fixtures.hpp"
#include "support/pprof_reader.hpp"

#include <catch2/catch.hpp>

#include <map>
#include <numeric>
#include <set>
#include <sstream>

#include <fstream>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/use_future.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>

#include <filesystem>

using namespace collector;
namespace fs = std::filesystem;
namespace json = boost::json;

namespace {

struct fixture_app {
    fs::path dir;
    asio::io_context io;
    std::unique_ptr<app_context> app;
    std::string session_id;

    fixture_app() {
        std::string t = (fs::temp_directory_path() / "perfwire-api-XXXXXX").string();
        dir = ::mkdtemp(t.data());
        config c;
        c.sessions_dir = (dir / "sessions").string();
        app = std::make_unique<app_context>(io, c);
        // A saved session made of a real capture, as an agent would have sent it.
        auto w = app->store.create("demo-host", {{"agent", "perfwire"}, {"hostname", "demo-host"}});
        REQUIRE(w.has_value());
        const std::string text = test_support::fixture("collector/fixtures/callchain_fields.txt");
        REQUIRE_FALSE(w->write_chunk(
            true,
            protocol::compress(text + "\n### PERF_STAT ###\n" +
                               test_support::fixture("agent/fixtures/perf_stat_no_pmu.txt"))));
        session_id = w->id();
    }
    ~fixture_app() {
        app->pool.join();
        fs::remove_all(dir);
    }

    http_response call(http::verb method, std::string target, std::string body = {},
                       std::string host = "127.0.0.1:8080", std::string origin = {}) {
        http_request req{method, target, 11};
        req.set(http::field::host, host);
        if (!origin.empty())
            req.set(http::field::origin, origin);
        req.body() = std::move(body);
        req.prepare_payload();
        auto done = asio::co_spawn(io, handle_request(*app, std::move(req)), asio::use_future);
        io.restart();
        io.run();
        return done.get();
    }
    json::value get_json(const std::string& target, http::status want = http::status::ok) {
        const auto res = call(http::verb::get, target);
        INFO(target << " -> " << res.body());
        CHECK(res.result() == want);
        json::parse_options deep;
        deep.max_depth = 4096; // flame graphs nest as deep as the stacks
        return json::parse(res.body(), {}, deep);
    }
    // A session imported from `text`; its id.
    std::string import(const std::string& text) {
        const auto res = call(http::verb::post, "/api/sessions/import", text);
        INFO(res.body());
        REQUIRE(res.result() == http::status::ok);
        return std::string(json::parse(res.body()).at("session_id").as_string());
    }
};

// One sample as perf script prints it: thread `tid` at `time`, `frames` leaf first, each
// "symbol (module)" or a symbol of /bin/app.
std::string script_sample(std::vector<std::string> frames, std::uint64_t period = 1, int tid = 1,
                          const std::string& time = "1.0") {
    std::string s = "app 1/" + std::to_string(tid) + " " + time + ": " + std::to_string(period) +
                    " cpu-clock:\n";
    for (const auto& fr : frames)
        s += "\t1 " + fr + (fr.find(" (") == std::string::npos ? " (/bin/app)\n" : "\n");
    return s + "\n";
}

} // namespace

TEST_CASE("API: sessions, views and exports of a saved session", "[collector][api]") {
    fixture_app f;
    const auto base = "/api/sessions/" + f.session_id;

    CHECK(f.get_json("/api/status").at("sessions").to_number<int>() == 1);
    const auto list = f.get_json("/api/sessions").as_array();
    REQUIRE(list.size() == 1);
    CHECK(list[0].at("id").as_string() == f.session_id);
    CHECK(list[0].at("live").as_bool() == false);

    const auto fns = f.get_json(base + "/functions").as_object();
    CHECK(fns.at("event").as_string() == "cpu-clock");
    CHECK(fns.at("weight").as_string() == "period");
    const auto& rows = fns.at("functions").as_array();
    REQUIRE_FALSE(rows.empty());
    bool matrix = false;
    double self_sum = 0;
    for (const auto& r : rows) {
        matrix |= r.at("name").as_string() == "(anonymous namespace)::matrix_multiply";
        self_sum += r.at("self_pct").as_double();
        CHECK(r.at("module").as_string().size() > 0);
    }
    CHECK(matrix);
    CHECK(self_sum == Approx(100.0));
    // Sorted by self, descending.
    CHECK(rows[0].at("self").to_number<std::uint64_t>() >=
          rows[rows.size() - 1].at("self").to_number<std::uint64_t>());

    // A page of the table: sorted by any column, narrowed by a case-blind match, cut.
    CHECK(fns.at("count").to_number<std::size_t>() == rows.size());
    CHECK(fns.at("matched").to_number<std::size_t>() == rows.size());
    const auto by_name = f.get_json(base + "/functions?sort=name&order=asc&offset=1&limit=3");
    const auto& page = by_name.at("functions").as_array();
    REQUIRE(page.size() == std::min<std::size_t>(3, rows.size() - 1));
    CHECK(by_name.at("offset").to_number<int>() == 1);
    CHECK(by_name.at("count").to_number<std::size_t>() == rows.size());
    std::vector<std::string> names;
    for (const auto& r : rows)
        names.emplace_back(r.at("name").as_string());
    std::sort(names.begin(), names.end());
    for (std::size_t i = 0; i < page.size(); ++i)
        CHECK(page[i].at("name").as_string() == names[i + 1]);
    const auto matrix_rows = f.get_json(base + "/functions?match=MATRIX_mul&limit=10");
    REQUIRE(matrix_rows.at("matched").to_number<int>() >= 1);
    for (const auto& r : matrix_rows.at("functions").as_array())
        CHECK((std::string(r.at("name").as_string()).find("matrix_mul") != std::string::npos ||
               std::string(r.at("module").as_string()).find("matrix_mul") != std::string::npos));
    const auto by_total = f.get_json(base + "/functions?sort=total_pct&order=desc&limit=1000000");
    const auto& totals = by_total.at("functions").as_array();
    for (std::size_t i = 1; i < totals.size(); ++i)
        CHECK(totals[i - 1].at("total_pct").as_double() >= totals[i].at("total_pct").as_double());
    CHECK(f.get_json(base + "/functions?match=no-such-function-anywhere")
              .at("functions")
              .as_array()
              .empty());

    const auto by_samples = f.get_json(base + "/functions?weight=samples&event=cpu-clock");
    CHECK(by_samples.at("total").to_number<std::uint64_t>() ==
          by_samples.at("samples").to_number<std::uint64_t>());

    const auto flame = f.get_json(base + "/flamegraph").as_object();
    const auto& root = flame.at("root").as_object();
    CHECK(root.at("value").to_number<std::uint64_t>() ==
          flame.at("total").to_number<std::uint64_t>());
    std::uint64_t children = 0;
    for (const auto& c : root.at("children").as_array())
        children += c.at("value").to_number<std::uint64_t>();
    CHECK(children == root.at("value").to_number<std::uint64_t>());
    const auto shallow = f.get_json(base + "/flamegraph?max_depth=1").at("root");
    for (const auto& c : shallow.at("children").as_array())
        CHECK(c.at("children").as_array().empty());
    CHECK(flame.at("small_frames_hidden").to_number<std::uint64_t>() == 0);

    // Frames under 2 % of the total left out, and said: what each kept frame misses below it
    // adds up to the weight reported hidden.
    const auto pruned = f.get_json(base + "/flamegraph?min_pct=2").as_object();
    const auto total = pruned.at("total").to_number<std::uint64_t>();
    std::uint64_t kept = 0, missing = 0;
    std::vector<const json::object*> todo{&pruned.at("root").as_object()};
    while (!todo.empty()) {
        const auto* n = todo.back();
        todo.pop_back();
        ++kept;
        std::uint64_t below = 0;
        for (const auto& c : n->at("children").as_array()) {
            CHECK(c.at("value").to_number<std::uint64_t>() * 50 >= total);
            below += c.at("value").to_number<std::uint64_t>();
            todo.push_back(&c.as_object());
        }
        missing += n->at("value").to_number<std::uint64_t>() -
                   n->at("self").to_number<std::uint64_t>() - below;
    }
    CHECK(pruned.at("small_frames_hidden").to_number<std::uint64_t>() > 0);
    CHECK(pruned.at("small_weight_hidden").to_number<std::uint64_t>() == missing);
    CHECK(kept > 1);

    const auto threads = f.get_json(base + "/threads").as_array();
    CHECK(threads.size() == 4);
    CHECK(threads[0].at("top_functions").as_array().size() > 0);
    const auto tid = threads[0].at("tid").as_int64();
    const auto one = f.get_json(base + "/functions?tid=" + std::to_string(tid)).as_object();
    CHECK(one.at("total").to_number<std::uint64_t>() ==
          threads[0].at("weight").to_number<std::uint64_t>());

    const auto meta = f.get_json(base).as_object();
    CHECK(meta.at("samples").to_number<std::uint64_t>() > 0);
    CHECK(meta.at("perf_stat").at("counters").as_array().size() >= 5);
    CHECK(meta.at("event_types").as_array().at(0).as_string() == "cpu-clock");

    const auto collapsed = f.call(http::verb::get, base + "/export?format=collapsed");
    CHECK(collapsed.result() == http::status::ok);
    CHECK_THAT(collapsed.body(), Catch::Contains("(anonymous namespace)::matrix_worker;"
                                                 "(anonymous namespace)::matrix_multiply "));
    CHECK(f.get_json(base + "/export?format=json").as_object().contains("flamegraph"));
    // Rooted at each thread ("comm-tid"), the same weight in all.
    auto weigh = [](const std::string& text, std::set<std::string>* roots) {
        std::uint64_t sum = 0;
        std::istringstream in(text);
        for (std::string l; std::getline(in, l);) {
            sum += std::stoull(l.substr(l.rfind(' ') + 1));
            if (roots)
                roots->insert(l.substr(0, l.find(';')));
        }
        return sum;
    };
    const auto rooted = f.call(http::verb::get, base + "/export?format=collapsed&threads=1");
    std::set<std::string> roots;
    CHECK(weigh(rooted.body(), &roots) == weigh(collapsed.body(), nullptr));
    CHECK(roots.size() == threads.size());
    CHECK(roots.count("demo-hash-" +
                      std::to_string(std::find_if(threads.begin(), threads.end(),
                                                  [](const auto& t) {
                                                      return t.at("comm").as_string() ==
                                                             "demo-hash";
                                                  })
                                         ->at("tid")
                                         .to_number<int>())));

    // speedscope: stacks outermost first, weights summing to the total, clock units in ns.
    const auto ss = f.get_json(base + "/export?format=speedscope");
    const auto ss_file = f.call(http::verb::get, base + "/export?format=speedscope");
    CHECK(ss_file[http::field::content_type] == "application/json");
    CHECK(ss_file[http::field::cache_control] == "no-store");
    CHECK(ss_file[http::field::content_disposition] ==
          "attachment; filename=\"perfwire-demo_on_demo-host-" + f.session_id +
              ".speedscope.json\"");
    // One profile per thread, busiest first, whose weights add up to the view's total.
    const auto& profiles = ss.at("profiles").as_array();
    CHECK(profiles.size() == threads.size());
    const auto& frames = ss.at("shared").at("frames").as_array();
    std::uint64_t weight_sum = 0, previous = ~std::uint64_t{0};
    bool worker_above_multiply = false;
    for (const auto& pv : profiles) {
        const auto& prof = pv.as_object();
        CHECK(prof.at("type").as_string() == "sampled");
        CHECK(prof.at("unit").as_string() == "nanoseconds");
        std::uint64_t lane = 0;
        for (const auto& w : prof.at("weights").as_array())
            lane += w.to_number<std::uint64_t>();
        CHECK(prof.at("endValue").to_number<std::uint64_t>() == lane);
        CHECK(lane <= previous);
        previous = lane;
        weight_sum += lane;
        CHECK(prof.at("samples").as_array().size() == prof.at("weights").as_array().size());
        for (const auto& sample : prof.at("samples").as_array()) {
            const auto& st = sample.as_array();
            const auto leaf = frames.at(st.at(st.size() - 1).to_number<std::size_t>()).at("name");
            if (leaf.as_string() == "(anonymous namespace)::matrix_multiply" && st.size() >= 2)
                worker_above_multiply |= frames.at(st.at(st.size() - 2).to_number<std::size_t>())
                                             .at("name")
                                             .as_string() == "(anonymous namespace)::matrix_worker";
        }
    }
    CHECK(weight_sum == fns.at("total").to_number<std::uint64_t>());
    CHECK(worker_above_multiply);
}

TEST_CASE("API: bad requests get clear errors", "[collector][api]") {
    fixture_app f;
    const auto base = "/api/sessions/" + f.session_id;
    auto code = [&](const json::value& v) {
        return std::string(v.at("error").at("code").as_string());
    };
    // Each a clear 400 naming the parameter's fault, never a page of something else.
    for (const std::string& query :
         std::vector<std::string>{"weight=bytes", "tid=abc", "sort=__proto__", "order=sideways",
                                  "offset=-1", "limit=2e9", "match=" + std::string(300, 'a')}) {
        INFO(query);
        CHECK(code(f.get_json(base + "/functions?" + query, http::status::bad_request)) ==
              "bad_parameter");
    }
    const auto bad_event = f.get_json(base + "/functions?event=cycles", http::status::bad_request);
    CHECK(bad_event.at("error").at("candidates").as_array().size() == 1);
    CHECK(code(f.get_json("/api/sessions/..%2F..%2Fetc/functions", http::status::not_found)) ==
          "no_session");
    CHECK(code(f.get_json("/api/sessions/nope", http::status::not_found)) == "no_session");
    CHECK(code(f.get_json("/api/nothing", http::status::not_found)) == "not_found");
    CHECK(code(f.get_json(base + "/export?format=pdf", http::status::bad_request)) == "bad_format");
    const auto no_target =
        f.call(http::verb::post, "/api/targets/t9/command", R"({"cmd":"status"})");
    CHECK(no_target.result() == http::status::not_found);
    CHECK(code(json::parse(no_target.body())) == "no_target");
    // A path the API has, with a method it does not take there.
    CHECK(code(f.get_json("/api/targets/t9/command", http::status::method_not_allowed)) ==
          "method_not_allowed");
    CHECK(f.call(http::verb::put, "/api/status").result() == http::status::method_not_allowed);
    CHECK(f.call(http::verb::post, base + "/functions").result() ==
          http::status::method_not_allowed);
    // A literal path is its own resource: never taken for an id by the route after it.
    CHECK(code(f.get_json("/api/sessions/import", http::status::method_not_allowed)) ==
          "method_not_allowed");
    CHECK(f.call(http::verb::delete_, "/api/targets/connect").result() ==
          http::status::method_not_allowed);
    CHECK(code(f.get_json(base + "/nothing", http::status::not_found)) == "not_found");
    CHECK(code(f.get_json("/api/sessions/" + f.session_id + "/functions/extra",
                          http::status::not_found)) == "not_found");
}

TEST_CASE("API: Host and Origin checks defeat rebinding and cross-site requests",
          "[collector][api]") {
    fixture_app f;
    const auto base = "/api/sessions/" + f.session_id;
    CHECK(f.call(http::verb::get, "/api/status", {}, "evil.example:8080").result() ==
          http::status::forbidden);
    CHECK(f.call(http::verb::get, "/api/status", {}, "localhost:8080").result() ==
          http::status::ok);
    CHECK(f.call(http::verb::get, "/api/status", {}, "[::1]:8080").result() == http::status::ok);
    // The port is digits only and the name compares without case: no user-info tricks.
    for (const char* host :
         {"localhost:8080@evil.example", "127.0.0.1:80:81", "localhost:", "localhost:8080x",
          "[::1]x", "[::1", "localhost.evil.example", "127.0.0.1:1234567"})
        CHECK(f.call(http::verb::get, "/api/status", {}, host).result() == http::status::forbidden);
    CHECK(f.call(http::verb::get, "/api/status", {}, "LocalHost:8080").result() ==
          http::status::ok);
    CHECK(f.call(http::verb::get, "/api/status", {}, "localhost").result() == http::status::ok);
    // A page elsewhere cannot delete; the collector's own page and curl (no Origin) can.
    CHECK(f.call(http::verb::delete_, base, {}, "127.0.0.1:8080", "http://evil.example").result() ==
          http::status::forbidden);
    CHECK(f.call(http::verb::post, "/api/targets/connect", "{}", "127.0.0.1:8080",
                 "http://evil.example")
              .result() == http::status::forbidden);
    CHECK(
        f.call(http::verb::delete_, base, {}, "127.0.0.1:8080", "http://127.0.0.1:8080").result() ==
        http::status::no_content);
    CHECK(f.call(http::verb::get, base).result() == http::status::not_found);
    CHECK(f.call(http::verb::delete_, base).result() == http::status::not_found);
}

TEST_CASE("API: the session list pages and filters, newest first", "[collector][api]") {
    fixture_app f;
    for (int i = 0; i < 5; ++i) {
        auto w = f.app->store.create("board-" + std::to_string(i),
                                     {{"agent", "perfwire"},
                                      {"hostname", i % 2 ? "Board-Odd" : "board-even"},
                                      {"started_at", 1000.0 + i}});
        REQUIRE(w.has_value());
    }
    auto page = [&](const std::string& query) {
        const auto res = f.call(http::verb::get, "/api/sessions" + query);
        INFO(query << " -> " << res.body());
        REQUIRE(res.result() == http::status::ok);
        return std::make_pair(json::parse(res.body()).as_array(),
                              std::stoul(std::string(res.at("X-Total-Count"))));
    };
    const auto [all, total] = page("");
    CHECK(all.size() == 6); // the fixture's own session too
    CHECK(total == 6);
    const auto [first, n1] = page("?limit=2");
    REQUIRE(first.size() == 2);
    CHECK(n1 == 6);
    CHECK(first[0].at("hostname").as_string() == "board-even"); // started last (1004)
    CHECK(first[1].at("hostname").as_string() == "Board-Odd");  // 1003
    const auto [next, n2] = page("?limit=2&offset=2");
    REQUIRE(next.size() == 2);
    CHECK(next[0].at("started_at").to_number<double>() == 1002.0);
    const auto [odd, n3] = page("?q=board-ODD");
    CHECK(n3 == 2);
    CHECK(odd.size() == 2);
    CHECK(page("?q=board&offset=100").first.empty());
    CHECK(f.call(http::verb::get, "/api/sessions?limit=-1").result() == http::status::bad_request);
    CHECK(f.call(http::verb::get, "/api/sessions?offset=x").result() == http::status::bad_request);
}

TEST_CASE("API: with an access token, every API request presents it", "[collector][api]") {
    fixture_app f;
    const std::string token = "0123456789abcdef0123456789abcdef";
    f.app->api_token = token;
    f.app->api_token_file = "/srv/perfwire/sessions/.http-token";
    auto with = [&](http::verb method, const std::string& target, const std::string& header,
                    const std::string& value) {
        http_request req{method, target, 11};
        req.set(http::field::host, "127.0.0.1:8080");
        if (!header.empty())
            req.set(header, value);
        return check_access(*f.app, req);
    };
    const auto base = "/api/sessions/" + f.session_id;
    // Refused without it, whatever the method or path under /api/.
    for (const auto& [method, target] :
         std::vector<std::pair<http::verb, std::string>>{{http::verb::get, "/api/status"},
                                                         {http::verb::get, "/api/stream"},
                                                         {http::verb::get, base + "/functions"},
                                                         {http::verb::put, "/api/config"},
                                                         {http::verb::post, "/api/targets/connect"},
                                                         {http::verb::post, "/api/sessions/import"},
                                                         {http::verb::delete_, base},
                                                         {http::verb::post, "/"}}) {
        INFO(method << " " << target);
        const auto refused = with(method, target, {}, {});
        REQUIRE(refused);
        CHECK(refused->result() == http::status::unauthorized);
        CHECK(refused->at(http::field::www_authenticate) == "Bearer realm=\"perfwire\"");
        // It says where the token is kept, and never the token.
        CHECK_THAT(refused->body(), Catch::Contains("/srv/perfwire/sessions/.http-token"));
        CHECK_THAT(refused->body(), !Catch::Contains(token));
    }
    CHECK(with(http::verb::get, "/api/status", "Authorization", "Bearer wrong-token-0123456789"));
    CHECK(with(http::verb::get, "/api/status", "Authorization", "Basic " + token));
    const auto name = token_cookie(token);
    CHECK(name.starts_with("perfwire_token_"));
    CHECK(name != token_cookie(token + "x")); // two collectors, two cookies
    CHECK(with(http::verb::get, "/api/status", "Cookie", name + "=" + token + "x"));
    CHECK(with(http::verb::get, "/api/status", "Cookie", "perfwire_token=" + token));
    CHECK(with(http::verb::get, "/api/status", "Cookie", "other_token=" + token));
    CHECK_FALSE(with(http::verb::get, "/api/status", "Authorization", "Bearer " + token));
    CHECK_FALSE(
        with(http::verb::get, "/api/stream", "Cookie", "a=1; " + name + "=" + token + "; b=2"));
    // The UI's static files are the one thing served without it.
    CHECK_FALSE(with(http::verb::get, "/", {}, {}));
    CHECK_FALSE(with(http::verb::head, "/app.js", {}, {}));
    // The route handler applies the same check.
    CHECK(f.call(http::verb::get, "/api/status").result() == http::status::unauthorized);
}

TEST_CASE("the live stream over a WebSocket opens only from the collector's own page, with the "
          "token",
          "[collector][api]") {
    fixture_app f;
    const std::string token = "the-token-0123456789abcdef";
    f.app->api_token = token;
    auto upgrade = [&](const std::string& origin, const std::string& cookie,
                       const std::string& protocols = "websocket") {
        http_request req{http::verb::get, "/api/ws", 11};
        req.set(http::field::host, "127.0.0.1:8080");
        req.set(http::field::upgrade, protocols);
        req.set(http::field::connection, "Upgrade");
        req.set(http::field::sec_websocket_version, "13");
        req.set(http::field::sec_websocket_key, "dGhlIHNhbXBsZSBub25jZQ==");
        if (!origin.empty())
            req.set(http::field::origin, origin);
        if (!cookie.empty())
            req.set(http::field::cookie, cookie);
        return check_access(*f.app, req);
    };
    const std::string cookie = token_cookie(token) + "=" + token;
    // A page elsewhere sends the handshake with the user's cookie: refused on its Origin.
    const auto hijack = upgrade("http://evil.example", cookie);
    REQUIRE(hijack);
    CHECK(hijack->result() == http::status::forbidden);
    CHECK_THAT(hijack->body(), Catch::Contains("bad_origin"));
    CHECK(upgrade("http://127.0.0.1:8081", cookie)); // another port is another origin
    // The handshake names other protocols beside it, in any case: still a WebSocket, still
    // checked (the server takes any list that holds "websocket").
    for (const auto* protocols : {"websocket, foo", "foo, WebSocket", "h2c,websocket"}) {
        INFO(protocols);
        const auto listed = upgrade("http://evil.example", cookie, protocols);
        REQUIRE(listed);
        CHECK(listed->result() == http::status::forbidden);
    }
    // Without the token: 401, as for every API request.
    const auto anonymous = upgrade("http://127.0.0.1:8080", "");
    REQUIRE(anonymous);
    CHECK(anonymous->result() == http::status::unauthorized);
    // The collector's own page, signed in.
    CHECK_FALSE(upgrade("http://127.0.0.1:8080", cookie));
    CHECK_FALSE(upgrade("", cookie)); // a script (no Origin) with the token
}

TEST_CASE("access token: kept in a private file, presented by header or cookie",
          "[collector][api]") {
    test_support::temp_dir dir;
    const auto file = dir.path / ".http-token";
    const auto made = load_or_create_token(file);
    REQUIRE(made);
    CHECK(made->size() == 32);
    CHECK(valid_token(*made));
    CHECK((fs::status(file).permissions() & fs::perms::all) ==
          (fs::perms::owner_read | fs::perms::owner_write));
    CHECK(load_or_create_token(file).value() == *made); // the same token after a restart

    fs::permissions(file, fs::perms::group_read | fs::perms::others_read, fs::perm_options::add);
    const auto shared = load_or_create_token(file);
    REQUIRE_FALSE(shared);
    CHECK_THAT(shared.error().message, Catch::Contains("readable by others"));
    fs::remove(file);
    fs::create_symlink("/etc/hostname", file);
    CHECK_FALSE(load_or_create_token(file));
    fs::remove(file);
    {
        std::ofstream out(file);
        out << "short\n";
    }
    fs::permissions(file, fs::perms::owner_read | fs::perms::owner_write,
                    fs::perm_options::replace);
    CHECK_FALSE(load_or_create_token(file));
    CHECK_FALSE(load_or_create_token(dir.path / "no/such/dir/.http-token"));

    CHECK(query_parameter("/?code=abc", "code") == "abc");
    CHECK(query_parameter("/index.html?x=1&code=abc&y=2#z", "code") == "abc");
    CHECK_FALSE(query_parameter("/?codes=abc", "code"));
    CHECK_FALSE(query_parameter("/?token=abc", "code"));
    CHECK_FALSE(query_parameter("/", "code"));
    // A sign-in code signs in once; the next one is another.
    sign_in_codes codes;
    const auto first = codes.current();
    CHECK(first.size() >= 16);
    CHECK_FALSE(codes.redeem("nope"));
    CHECK(codes.current() == first);
    CHECK(codes.redeem(first));
    CHECK_FALSE(codes.redeem(first));
    CHECK(codes.current() != first);
    CHECK(sign_in_cookie("abc") == token_cookie("abc") + "=abc; Path=/; HttpOnly; SameSite=Strict");
    CHECK_FALSE(valid_token("0123456789abcde"));                      // 15: too short
    CHECK_FALSE(valid_token("0123456789abcdef;Domain=evil.example")); // no cookie attributes
    CHECK_FALSE(valid_token("0123456789abcdef 0123"));
    CHECK(valid_token("correct-horse.battery_staple~42"));
}

TEST_CASE("API: perf stat's counters are told for the last interval and for the whole session",
          "[collector][api]") {
    fixture_app f;
    // A second chunk with its own report: the totals add both intervals.
    const std::string report = test_support::fixture("agent/fixtures/perf_stat_no_pmu.txt");
    auto w = f.app->store.create("demo-host", {{"agent", "perfwire"}, {"hostname", "demo-host"}});
    REQUIRE(w.has_value());
    for (int i = 0; i < 2; ++i)
        REQUIRE_FALSE(w->write_chunk(
            true, protocol::compress(script_sample({"f", "main"}, 1, 1, std::to_string(1 + i)) +
                                     "\n### PERF_STAT ###\n" + report)));
    const auto meta = f.get_json("/api/sessions/" + w->id());
    const auto& st = meta.at("perf_stat");
    CHECK(st.at("intervals").to_number<int>() == 2);
    CHECK(st.at("total_seconds").to_number<double>() == Approx(2 * 0.301641570));
    std::map<std::string, double> totals, last;
    for (const auto& t : st.at("totals").as_array())
        totals[std::string(t.at("event").as_string())] = t.at("value").to_number<double>();
    for (const auto& c : st.at("counters").as_array())
        if (c.at("value").is_number())
            last[std::string(c.at("event").as_string())] = c.at("value").to_number<double>();
    CHECK(last.at("task-clock") == Approx(605.87));
    CHECK(totals.at("task-clock") == Approx(2 * 605.87));
    CHECK(totals.at("context-switches") == Approx(2 * 1138));
    CHECK(totals.count("cycles") == 0); // never counted: no total
    // perf's own rate note of the last interval is kept.
    for (const auto& c : st.at("counters").as_array())
        if (c.at("event").as_string() == "task-clock")
            CHECK_THAT(std::string(c.at("note").as_string()), Catch::Contains("CPUs utilized"));
}

TEST_CASE("API: importing perf script text makes a queryable session", "[collector][api]") {
    fixture_app f;
    const auto res = f.call(http::verb::post, "/api/sessions/import",
                            test_support::fixture("collector/fixtures/system_wide_cpu.txt"));
    INFO(res.body());
    REQUIRE(res.result() == http::status::ok);
    const std::string id(json::parse(res.body()).at("session_id").as_string());
    const auto fns = f.get_json("/api/sessions/" + id + "/functions?weight=samples");
    CHECK(fns.at("total").to_number<std::uint64_t>() > 0);
    CHECK(f.get_json("/api/sessions/" + id).at("source").as_string() == "upload");
    // The file's name from the browser names the session: its last path element, without
    // control characters; found by a search for it, as the others are by process, pid and event.
    const auto named =
        f.call(http::verb::post, "/api/sessions/import?name=..%2Fhome%2Fme%2Fslow%01run.perf.txt",
               test_support::fixture("collector/fixtures/system_wide_cpu.txt"));
    REQUIRE(named.result() == http::status::ok);
    const std::string named_id(json::parse(named.body()).at("session_id").as_string());
    CHECK(f.get_json("/api/sessions/" + named_id).at("source").as_string() == "slowrun.perf.txt");
    CHECK(upload_source(std::string(300, 'x')).size() == 200);
    CHECK(upload_source("..") == "upload");
    CHECK(upload_source("") == "upload");
    auto found = [&](const std::string& q) {
        std::set<std::string> ids;
        const auto list = f.get_json("/api/sessions?q=" + q);
        for (const auto& s : list.as_array())
            ids.insert(std::string(s.at("id").as_string()));
        return ids;
    };
    CHECK(found("SLOWRUN") == std::set<std::string>{named_id});
    CHECK(found("cpu-clock").count(named_id) == 1);
    CHECK(found("nothing-like-it").empty());

    const auto garbage = f.call(http::verb::post, "/api/sessions/import", "not perf output\n");
    CHECK(garbage.result() == http::status::bad_request);
    CHECK_THAT(garbage.body(), Catch::Contains("no perf script samples"));
    CHECK(f.call(http::verb::post, "/api/sessions/import").result() == http::status::bad_request);
    CHECK(f.get_json("/api/sessions").as_array().size() == 3); // nothing made for the failures

    // Two imports at once is the most: a third waits its turn.
    {
        auto one = upload::start(*f.app, 100, "/api/sessions/import"),
             two = upload::start(*f.app, 100, "/api/sessions/import");
        REQUIRE(one);
        REQUIRE(two);
        const auto busy = f.call(http::verb::post, "/api/sessions/import", "a 1/1 1.0: cycles:\n");
        CHECK(busy.result() == http::status::service_unavailable);
        CHECK(busy[http::field::retry_after] == "5");
        CHECK_THAT(busy.body(), Catch::Contains("\"code\":\"busy\""));
        one->abandon();
        two->abandon();
    }
    f.io.restart();
    f.io.poll();
    CHECK(f.call(http::verb::post, "/api/sessions/import", "a 1/1 1.0: cycles:\n").result() ==
          http::status::ok);
}

TEST_CASE("API: the sandwich of a function names its callers and callees", "[collector][api]") {
    fixture_app f;
    // Stacks leaf first, as perf script prints them; B is reached from A and from X, recurses
    // once, and calls C.
    const auto id = f.import(
        script_sample({"C", "B", "A", "main"}, 10) + script_sample({"B", "A", "main"}, 20) +
        script_sample({"B", "B", "X", "main"}, 30) + script_sample({"D", "main"}, 40));
    const auto b = f.get_json("/api/sessions/" + id + "/sandwich?function=B");
    CHECK(b.at("total").to_number<int>() == 100);
    CHECK(b.at("function").at("self").to_number<int>() == 50);
    CHECK(b.at("function").at("total").to_number<int>() == 60); // the recursion counts once
    CHECK(b.at("function").at("module").as_string() == "/bin/app");
    auto rows = [](const json::value& list) {
        std::vector<std::pair<std::string, int>> out;
        for (const auto& r : list.as_array())
            out.emplace_back(r.at("name").as_string(), r.at("total").to_number<int>());
        return out;
    };
    using rows_t = std::vector<std::pair<std::string, int>>;
    CHECK(rows(b.at("callers")) == rows_t{{"A", 30}, {"X", 30}});
    CHECK(rows(b.at("callees")) == rows_t{{"C", 10}});
    CHECK(b.at("callees").as_array()[0].at("self").to_number<int>() == 10);
    // Bottom-up: the sampled frames first, heaviest first, each expanding to its callers.
    const auto inv = f.get_json("/api/sessions/" + id + "/flamegraph?inverted=1");
    CHECK(inv.at("inverted").as_bool());
    const auto& leaves = inv.at("root").at("children");
    auto nodes = [](const json::value& list) {
        rows_t out;
        for (const auto& r : list.as_array())
            out.emplace_back(r.at("name").as_string(), r.at("value").to_number<int>());
        return out;
    };
    CHECK(nodes(leaves) == rows_t{{"B", 50}, {"D", 40}, {"C", 10}});
    CHECK(nodes(leaves.as_array()[0].at("children")) == rows_t{{"B", 30}, {"A", 20}});
    CHECK(nodes(leaves.as_array()[1].at("children")) == rows_t{{"main", 40}});
    CHECK(leaves.as_array()[1].at("children").as_array()[0].at("self").to_number<int>() == 40);
    // Focus on B: only stacks through B, cut above its outermost call; the header keeps the
    // view's total, and every node counts its samples whatever the weight.
    const auto focus = f.get_json("/api/sessions/" + id + "/flamegraph?focus=B");
    CHECK(focus.at("total").to_number<int>() == 100);
    CHECK(focus.at("focus").as_string() == "B");
    CHECK(focus.at("root").at("value").to_number<int>() == 60);
    CHECK(focus.at("root").at("samples").to_number<int>() == 3);
    const auto& focused = focus.at("root").at("children");
    REQUIRE(nodes(focused) == rows_t{{"B", 60}});
    CHECK(focused.as_array()[0].at("self").to_number<int>() == 20);
    CHECK(nodes(focused.as_array()[0].at("children")) == rows_t{{"B", 30}, {"C", 10}});
    CHECK(f.call(http::verb::get, "/api/sessions/" + id + "/flamegraph?focus=Z").result() ==
          http::status::not_found);
    // Hide A and X: what they call moves up to their callers; nothing else changes.
    const auto hide = f.get_json("/api/sessions/" + id + "/flamegraph?hide=A;X");
    CHECK(hide.at("root").at("value").to_number<int>() == 100);
    const auto& main_node = hide.at("root").at("children").as_array().at(0);
    CHECK(main_node.at("name").as_string() == "main");
    CHECK(nodes(main_node.at("children")) == rows_t{{"B", 60}, {"D", 40}});
    CHECK(hide.at("hide").as_array().size() == 2);
    CHECK(json::serialize(hide.at("root")).find("\"A\"") == std::string::npos);
    // Filters apply as elsewhere; an unknown function is a 404 that says so.
    const auto by_samples =
        f.get_json("/api/sessions/" + id + "/sandwich?function=B&weight=samples");
    CHECK(by_samples.at("function").at("total").to_number<int>() == 3);
    const auto missing = f.call(http::verb::get, "/api/sessions/" + id + "/sandwich?function=Z");
    CHECK(missing.result() == http::status::not_found);
    CHECK_THAT(missing.body(), Catch::Contains("no_function"));
    CHECK(f.call(http::verb::get, "/api/sessions/" + id + "/sandwich").result() ==
          http::status::bad_request);
}

TEST_CASE("API: addresses inside a function, and inside a module where perf named nothing",
          "[collector][api]") {
    fixture_app f;
    auto sample = [](const std::string& leaf, int period) {
        return "app 1/1 1.0: " + std::to_string(period) + " cpu-clock:\n\t" + leaf +
               "\n\t1 main (/bin/app)\n\n";
    };
    const auto id = f.import(sample("15bc9 [unknown] (/usr/lib/liblzma.so.5)", 10) +
                             sample("15c00 [unknown] (/usr/lib/liblzma.so.5)", 30) +
                             sample("15bc9 [unknown] (/usr/lib/liblzma.so.5)", 15) +
                             sample("ffffffffc0001234 [unknown] ([kernel.kallsyms])", 5) +
                             sample("4005d6 hot+0x1c (/bin/app)", 40));
    const auto lz =
        f.get_json("/api/sessions/" + id +
                   "/addresses?function=%5Bunknown%5D&module=%2Fusr%2Flib%2Fliblzma.so.5");
    CHECK(lz.at("total").to_number<int>() == 100);
    CHECK(lz.at("self").to_number<int>() == 55);
    CHECK(lz.at("unplaced").to_number<int>() == 0);
    std::vector<std::pair<std::string, int>> rows;
    for (const auto& r : lz.at("addresses").as_array())
        rows.emplace_back(r.at("label").as_string(), r.at("self").to_number<int>());
    // Heaviest first, named as perf report names them.
    CHECK(rows == decltype(rows){{"liblzma.so.5+0x15c00", 30}, {"liblzma.so.5+0x15bc9", 25}});
    // Every [unknown]: the kernel's has no address perf could give in a module.
    const auto all = f.get_json("/api/sessions/" + id + "/addresses?function=%5Bunknown%5D");
    CHECK(all.at("self").to_number<int>() == 60);
    CHECK(all.at("unplaced").to_number<int>() == 5);
    // A named function: offsets into it.
    const auto hot = f.get_json("/api/sessions/" + id + "/addresses?function=hot");
    CHECK(hot.at("addresses").as_array().at(0).at("label").as_string() == "hot+0x1c");
    CHECK(f.call(http::verb::get, "/api/sessions/" + id + "/addresses?function=nothing").result() ==
          http::status::not_found);
    // pprof: the nameless leaf's location carries its address in the module.
    const auto pp = test_support::read_pprof(
        f.call(http::verb::get, "/api/sessions/" + id + "/export?format=pprof").body());
    std::set<std::uint64_t> nameless;
    for (const auto& [loc_id, l] : pp.locations)
        if (l.lines.at(0).function == "[unknown]" && l.address)
            nameless.insert(l.address);
    CHECK(nameless == std::set<std::uint64_t>{0x15bc9, 0x15c00});
}

TEST_CASE("API: a profile says how far it can be trusted, and what would fix it",
          "[collector][api]") {
    fixture_app f;
    // 60 complete, 30 complete but with a nameless leaf, 10 stopped inside liby.
    const auto id =
        f.import(script_sample({"f", "main", "__libc_start_main (/lib/libc.so.6)", "_start"}, 60) +
                 script_sample({"[unknown] (/lib/libx.so)", "g", "clone3 (/lib/libc.so.6)"}, 30) +
                 script_sample({"h", "[unknown] (/lib/liby.so)"}, 10));
    const auto q = f.get_json("/api/sessions/" + id + "/quality");
    std::map<std::string, json::object> checks;
    for (const auto& c : q.at("checks").as_array())
        checks[std::string(c.at("id").as_string())] = c.as_object();
    REQUIRE(checks.count("samples"));
    CHECK(checks["samples"].at("status").as_string() == "bad"); // 3 samples
    CHECK(checks["unknown"].at("pct").as_double() == Approx(30));
    CHECK(checks["unknown"].at("status").as_string() == "bad");
    CHECK(checks["unknown"].at("detail").as_array()[0].at("name").as_string() == "/lib/libx.so");
    CHECK_THAT(std::string(checks["unknown"].at("fix").as_string()), Catch::Contains("--binary"));
    CHECK(checks["truncated"].at("pct").as_double() == Approx(10));
    CHECK(checks["truncated"].at("status").as_string() == "warn");
    CHECK(checks["truncated"].at("detail").as_array()[0].at("name").as_string() == "/lib/liby.so");
    CHECK_THAT(std::string(checks["truncated"].at("fix").as_string()),
               Catch::Contains("--call-graph dwarf"));
    CHECK(checks["lost"].at("status").as_string() == "ok");
    // The real capture of the fixture session: enough samples for its shares to mean little
    // more than a point, and every check answered.
    const auto real = f.get_json("/api/sessions/" + f.session_id + "/quality");
    CHECK(real.at("checks").as_array().size() >= 4);
}

TEST_CASE("API: stacks that stop only below the program's frames are no reason for DWARF — "
          "those cut inside it are",
          "[collector][api]") {
    fixture_app f;
    // 50 stop at a nameless frame of the C library under main, 20 at main itself, 20 at a
    // garbage address beneath the C++ runtime: every frame of the program is there. 10 stop
    // inside the program (in work, whose caller is lost).
    const std::string libc = "[unknown] (/usr/lib/x86_64-linux-gnu/libc.so.6)";
    const auto benign =
        f.import(script_sample({"f", "main", libc}, 50) + script_sample({"g", "main"}, 20) +
                 script_sample({"h", "_M_run", "[unknown] (/usr/lib/libstdc++.so.6.0.30)",
                                "[unknown] ([unknown])"},
                               20) +
                 script_sample({"leaf", "work"}, 10));
    const auto q = f.get_json("/api/sessions/" + benign + "/quality");
    json::object cut;
    for (const auto& c : q.at("checks").as_array())
        if (c.at("id").as_string() == "truncated")
            cut = c.as_object();
    REQUIRE(cut.contains("pct"));
    CHECK(cut.at("pct").as_double() == Approx(10));
    CHECK(cut.at("status").as_string() == "warn");
    CHECK_THAT(std::string(cut.at("value").as_string()), Catch::Contains("90.0 % stop only below"));
    REQUIRE(cut.at("detail").as_array().size() == 1);
    CHECK(cut.at("detail").as_array()[0].at("name").as_string() == "work");
    // Only below: nothing to fix, no DWARF offered.
    const auto whole =
        f.import(script_sample({"f", "main", libc}, 70) + script_sample({"g", "main"}, 30));
    const auto q2 = f.get_json("/api/sessions/" + whole + "/quality");
    for (const auto& c : q2.at("checks").as_array())
        if (c.at("id").as_string() == "truncated") {
            CHECK(c.at("status").as_string() == "ok");
            CHECK(c.at("pct").as_double() == Approx(0));
            CHECK(c.at("fix").as_string().empty());
            CHECK_THAT(std::string(c.at("value").as_string()),
                       Catch::Contains("100.0 % stop only below"));
        }
}

TEST_CASE("API: a function's callers as a tree (the sandwich's lower half), and recursion "
          "collapsed",
          "[collector][api]") {
    fixture_app f;
    // Leaf first. fn is called from a (3), b (2), and, recursively, from c (1).
    const auto id =
        f.import(script_sample({"leaf", "fn", "a", "main"}, 3) +
                 script_sample({"fn", "b", "main"}, 2) + script_sample({"x", "fn", "fn", "c"}, 1));
    const auto base = "/api/sessions/" + id + "/flamegraph?weight=period";
    auto kids = [](const json::value& n) {
        std::map<std::string, std::uint64_t> out;
        for (const auto& c : n.at("children").as_array())
            out[std::string(c.at("name").as_string())] = c.at("value").to_number<std::uint64_t>();
        return out;
    };
    const auto callers = f.get_json(base + "&focus=fn&callers=1");
    CHECK(callers.at("callers").as_bool());
    const auto& root = callers.at("root");
    REQUIRE(root.at("children").as_array().size() == 1);
    const auto& fn = root.at("children").at(0);
    CHECK(fn.at("name").as_string() == "fn");
    CHECK(fn.at("value").to_number<int>() == 6);
    CHECK(kids(fn) == std::map<std::string, std::uint64_t>{{"a", 3}, {"b", 2}, {"c", 1}});
    CHECK(kids(fn.at("children").at(0)) == std::map<std::string, std::uint64_t>{{"main", 3}});
    // The callees' half: the focus at the root, what it calls below.
    const auto callees = f.get_json(base + "&focus=fn");
    CHECK(kids(callees.at("root").at("children").at(0)) ==
          std::map<std::string, std::uint64_t>{{"fn", 1}, {"leaf", 3}});
    // fn calling fn is one frame when recursion is collapsed.
    const auto flat = f.get_json(base + "&recursion=collapse");
    CHECK(flat.at("collapse_recursion").as_bool());
    const auto c = flat.at("root").at("children").as_array();
    std::string path;
    for (const auto& top : c)
        if (top.at("name").as_string() == "c") {
            const auto& under = top.at("children").at(0);
            path = std::string(under.at("name").as_string()) + ">" +
                   std::string(under.at("children").at(0).at("name").as_string());
        }
    CHECK(path == "fn>x");
}

TEST_CASE("API: transforms reshape the function table, the flame graph and the timeline alike",
          "[collector][api]") {
    fixture_app f;
    // Leaf first. main calls into libc (memcpy inside qsort inside libc's own helper), and a
    // helper that recurses.
    const std::string libc = "/usr/lib/libc.so.6";
    auto in_libc = [&](const char* fn) { return std::string(fn) + "+0x0 (" + libc + ")"; };
    const auto id = f.import(
        script_sample({in_libc("memcpy"), in_libc("msort"), in_libc("qsort"), "sort", "main"}, 4, 1,
                      "1.0") +
        script_sample({"cmp", in_libc("msort"), in_libc("qsort"), "sort", "main"}, 2, 1, "1.1") +
        script_sample({"work", "helper", "helper", "main"}, 3, 1, "1.2") +
        script_sample({"main"}, 1, 1, "1.3"));
    const auto base = "/api/sessions/" + id;
    auto rows = [&](const std::string& q) {
        std::map<std::string, std::pair<int, int>> out; // name -> self, total
        const auto d = f.get_json(base + "/functions?weight=period" + q);
        CHECK(d.at("total").to_number<int>() == 10); // the view's total, whatever the shape
        for (const auto& r : d.at("functions").as_array())
            out[std::string(r.at("name").as_string())] = {r.at("self").to_number<int>(),
                                                          r.at("total").to_number<int>()};
        return out;
    };
    // Collapsing libc: one frame for the run of libc calls, the callback below it its own.
    const auto collapsed = rows("&collapse=" + libc);
    CHECK(collapsed.count("memcpy") == 0);
    CHECK(collapsed.count("qsort") == 0);
    CHECK(collapsed.at("[libc.so.6]") == std::pair{4, 6});
    CHECK(collapsed.at("cmp") == std::pair{2, 2});
    CHECK(collapsed.at("main") == std::pair{1, 10});
    // Merging (hiding) helper: its callee's weight stays, its own self would go to main.
    const auto merged = rows("&hide=helper;msort");
    CHECK(merged.count("helper") == 0);
    CHECK(merged.count("msort") == 0);
    CHECK(merged.at("work") == std::pair{3, 3});
    CHECK(merged.at("qsort") == std::pair{0, 6});
    // A focus keeps only the stacks through it, from it down.
    const auto focused = rows("&focus=sort");
    CHECK(focused.count("main") == 0);
    CHECK(focused.count("work") == 0);
    CHECK(focused.at("sort") == std::pair{0, 6});
    CHECK(focused.at("memcpy") == std::pair{4, 4});
    // Unshaped, the same table as ever.
    CHECK(rows("").at("qsort") == std::pair{0, 6});
    // A focus on a function the shape took away is a clear 404, as for the flame graph.
    CHECK(f.get_json(base + "/functions?focus=qsort&collapse=" + libc, http::status::not_found)
              .at("error")
              .at("code")
              .as_string() == "no_function");

    // The flame graph agrees with the table: main > sort > [libc.so.6] > {cmp}.
    const auto flame = f.get_json(base + "/flamegraph?weight=period&collapse=" + libc);
    CHECK(flame.at("collapse").at(0).as_string() == libc);
    const auto& m = flame.at("root").at("children").at(0);
    REQUIRE(m.at("name").as_string() == "main");
    const json::value* lib = nullptr;
    for (const auto& c : m.at("children").as_array())
        if (c.at("name").as_string() == "sort")
            lib = &c.at("children").at(0);
    REQUIRE(lib);
    CHECK(lib->at("name").as_string() == "[libc.so.6]");
    CHECK(lib->at("module").as_string() == libc);
    CHECK(lib->at("value").to_number<int>() == 6);
    CHECK(lib->at("self").to_number<int>() == 4);
    REQUIRE(lib->at("children").as_array().size() == 1);
    CHECK(lib->at("children").at(0).at("name").as_string() == "cmp");
    // Focus on the collapsed module's frame, by its shown name.
    const auto on_lib =
        f.get_json(base + "/flamegraph?weight=period&collapse=" + libc + "&focus=%5Blibc.so.6%5D");
    CHECK(on_lib.at("root").at("value").to_number<int>() == 6);

    // The timeline's flame chart: its frames are the reshaped ones.
    const auto tl = f.get_json(base +
                               "/timeline?weight=period&tid=1&width=40&recursion=collapse&"
                               "collapse=" +
                               libc);
    CHECK(tl.at("collapse_recursion").as_bool());
    std::multiset<std::string> names;
    for (const auto& fr : tl.at("chart").at("frames").as_array())
        names.insert(std::string(fr.at("name").as_string()));
    CHECK(names.count("[libc.so.6]") == 1);
    CHECK(names.count("memcpy") == 0);
    int helper_boxes = 0;
    const auto& frames = tl.at("chart").at("frames").as_array();
    for (const auto& b : tl.at("chart").at("boxes").as_array())
        if (frames.at(b.at(3).to_number<std::size_t>()).at("name").as_string() == "helper")
            ++helper_boxes;
    CHECK(helper_boxes == 1); // helper calling helper is one box, at one depth
    std::string many;
    for (int i = 0; i < 65; ++i)
        many += "m" + std::to_string(i) + ";";
    CHECK(f.get_json(base + "/functions?collapse=" + many, http::status::bad_request)
              .at("error")
              .at("code")
              .as_string() == "bad_parameter");
    // Empty names between ';' are not names.
    CHECK(f.get_json(base + "/functions?collapse=" + std::string(80, ';') + libc)
              .at("collapse")
              .as_array()
              .size() == 1);
}

TEST_CASE("API: a function's machine code, each instruction with the samples that fell on it",
          "[collector][api]") {
    fixture_app f;
    // An import (the owner's recording, so the module's own path here is read): samples in
    // this test program's main, 3 at its first instruction and 1 a byte in.
    const auto self = std::filesystem::read_symlink("/proc/self/exe").string();
    const auto id = f.import(script_sample({"main+0x0 (" + self + ")"}, 3) +
                             script_sample({"main+0x1 (" + self + ")"}, 1));
    const auto d = f.get_json("/api/sessions/" + id + "/disassembly?function=main");
    INFO(json::serialize(d).substr(0, 600));
    CHECK(d.at("error").as_string().empty());
    CHECK(d.at("file").as_string() == self);
    const auto& code = d.at("instructions").as_array();
    REQUIRE(code.size() > 3);
    CHECK(code[0].at("offset").to_number<int>() == 0);
    CHECK(code[0].at("self").to_number<int>() == 3);
    CHECK_FALSE(code[0].at("text").as_string().empty());
    // The byte in is an instruction of its own, or inside the first: counted either way.
    std::uint64_t placed = 0;
    for (const auto& ins : code)
        placed += ins.at("self").to_number<std::uint64_t>();
    CHECK(placed + d.at("unmatched").to_number<std::uint64_t>() == 4);
    CHECK(
        f.call(http::verb::get, "/api/sessions/" + id + "/disassembly?function=nothing").result() ==
        http::status::not_found);
    CHECK(f.call(http::verb::get, "/api/sessions/" + id + "/disassembly").result() ==
          http::status::bad_request);
}

TEST_CASE("API: the timeline has a lane per thread and a flame chart in time order",
          "[collector][api]") {
    fixture_app f;
    // Leaf first: thread 1 runs main>A>B twice, then main>C; thread 2 once, in between.
    const auto id = f.import(script_sample({"B", "A", "main"}, 1, 1, "1.000000") +
                             script_sample({"D", "main"}, 1, 2, "1.500000") +
                             script_sample({"B", "A", "main"}, 1, 1, "2.000000") +
                             script_sample({"C", "main"}, 1, 1, "3.000000"));
    const auto t = f.get_json("/api/sessions/" + id + "/timeline?weight=samples&width=10&tid=1");
    CHECK(t.at("buckets").to_number<int>() == 10);
    CHECK(t.at("end_s").to_number<double>() == Approx(2.0));
    const auto& lanes = t.at("threads").as_array();
    REQUIRE(lanes.size() == 2);
    CHECK(lanes[0].at("tid").to_number<int>() == 1); // busiest first
    auto activity = [](const json::value& lane) {
        std::vector<int> v;
        for (const auto& x : lane.at("activity").as_array())
            v.push_back(x.to_number<int>());
        return v;
    };
    CHECK(activity(lanes[0]) == std::vector<int>{1, 0, 0, 0, 0, 1, 0, 0, 0, 1});
    CHECK(activity(lanes[1]) == std::vector<int>{0, 0, 1, 0, 0, 0, 0, 0, 0, 0});
    // The chart: main spans the whole run, A and B the first two samples, C the last.
    const auto& chart = t.at("chart").as_object();
    std::map<std::string, std::vector<int>> boxes;
    for (const auto& b : chart.at("boxes").as_array()) {
        const auto& a = b.as_array();
        const std::string name(
            chart.at("frames").as_array()[a[3].to_number<std::size_t>()].at("name").as_string());
        boxes[name] = {a[0].to_number<int>(), a[1].to_number<int>(), a[2].to_number<int>()};
    }
    CHECK(boxes["main"] == std::vector<int>{0, 0, 9});
    CHECK(boxes["A"] == std::vector<int>{1, 0, 5});
    CHECK(boxes["B"] == std::vector<int>{2, 0, 5});
    CHECK(boxes["C"] == std::vector<int>{1, 9, 9});
    CHECK(boxes.count("D") == 0); // another thread's
}

TEST_CASE("API: a timeline lane names the commonest stack of each bucket, root first",
          "[collector][api]") {
    fixture_app f;
    // Thread 1: main>A>B once and main>C twice in the first tenth, main>A>B in the last.
    const auto id = f.import(script_sample({"B", "A", "main"}, 1, 1, "1.000000") +
                             script_sample({"C", "main"}, 1, 1, "1.020000") +
                             script_sample({"C", "main"}, 1, 1, "1.040000") +
                             script_sample({"B", "A", "main"}, 1, 1, "2.000000"));
    auto stacks_of = [](const json::value& t) {
        std::vector<std::string> out; // per bucket: "main>C (2)", or "-"
        const auto& lane = t.at("threads").as_array().at(0);
        const auto& top = lane.at("top_stack").as_array();
        for (std::size_t b = 0; b < top.size(); ++b) {
            const auto i = top[b].to_number<std::int64_t>();
            if (i < 0) {
                out.push_back("-");
                continue;
            }
            std::string s;
            for (const auto& fi : t.at("stacks").as_array()[static_cast<std::size_t>(i)].as_array())
                s += (s.empty() ? "" : ">") +
                     std::string(t.at("stack_frames")
                                     .as_array()[fi.to_number<std::size_t>()]
                                     .at("name")
                                     .as_string());
            out.push_back(s + " (" +
                          std::to_string(lane.at("top_weight").as_array()[b].to_number<int>()) +
                          ")");
        }
        return out;
    };
    const auto t = f.get_json("/api/sessions/" + id + "/timeline?weight=samples&width=10");
    std::vector<std::string> want(10, "-");
    want[0] = "main>C (2)";
    want[9] = "main>A>B (1)";
    CHECK(stacks_of(t) == want);
    CHECK(t.at("stacks").as_array().size() == 2); // each stack once
    // Shaped like the view: outside a focus there is no stack to show.
    const auto focused =
        f.get_json("/api/sessions/" + id + "/timeline?weight=samples&width=10&focus=A");
    want[0] = "-";
    want[9] = "A>B (1)";
    CHECK(stacks_of(focused) == want);
}

TEST_CASE("API: off-cpu is an event of its own in ns, wall adds it to the CPU clock, and the "
          "view opens on the CPU",
          "[collector][api][off-cpu]") {
    fixture_app f;
    // Thread 1 runs work for 3 ms of cpu-clock, then sleeps 20 ms in nap (2 waits of 10 ms).
    std::string text = script_sample({"work", "main"}, 1000000, 1, "1.000000") +
                       script_sample({"work", "main"}, 2000000, 1, "1.001000");
    for (const char* at : {"1.002000", "1.013000"}) {
        text += std::string("app 1/1 ") + at +
                ": 1 sched:sched_switch: prev_comm=app prev_pid=1 prev_prio=120 prev_state=S "
                "==> next_comm=swapper/0 next_pid=0 next_prio=120\n"
                "\t1 nap (/bin/app)\n\t1 main (/bin/app)\n\n";
        text += std::string("app 1 ") + (at == std::string("1.002000") ? "1.012000" : "1.023000") +
                ": PERF_RECORD_SWITCH IN\n";
    }
    const auto id = f.import(text);
    const auto meta = f.get_json("/api/sessions/" + id);
    std::set<std::string> events;
    for (const auto& e : meta.at("event_types").as_array())
        events.emplace(e.as_string());
    CHECK(events == std::set<std::string>{"cpu-clock", "off-cpu", "wall"});
    auto totals = [&](const std::string& query) {
        const auto t = f.get_json("/api/sessions/" + id + "/functions" + query);
        std::map<std::string, std::uint64_t> m;
        for (const auto& r : t.at("functions").as_array())
            m[std::string(r.at("name").as_string())] = r.at("total").to_number<std::uint64_t>();
        return std::pair{std::string(t.at("event").as_string()), m};
    };
    // More waits than samples, and still the CPU first.
    const auto [opened, cpu] = totals("");
    CHECK(opened == "cpu-clock");
    CHECK(cpu.at("main") == 3'000'000);
    const auto [off_name, off] = totals("?event=off-cpu");
    CHECK(off_name == "off-cpu");
    CHECK(off.at("nap") == 20'000'000);
    CHECK(off.at("[sleeping]") == 20'000'000);
    const auto [wall_name, wall] = totals("?event=wall");
    CHECK(wall_name == "wall");
    CHECK(wall.at("main") == 23'000'000);
    CHECK(wall.at("work") == 3'000'000);
    CHECK(wall.at("nap") == 20'000'000);
    // The same in a window and per thread (the rows, not the running counters).
    CHECK(totals("?event=wall&tid=1").second.at("main") == 23'000'000);
    CHECK(totals("?event=wall&start=0.0015").second.at("main") == 20'000'000);
    // The timeline weighs a wait over the time it lasted, and says when the thread waited.
    const auto t =
        f.get_json("/api/sessions/" + id + "/timeline?event=off-cpu&weight=period&width=23");
    CHECK(t.at("end_s").to_number<double>() == Approx(0.023)); // the last wait's end
    const auto& lane = t.at("threads").as_array().at(0);
    std::vector<std::uint64_t> activity;
    for (const auto& a : lane.at("activity").as_array())
        activity.push_back(a.to_number<std::uint64_t>());
    REQUIRE(activity.size() == 23);
    CHECK(std::accumulate(activity.begin(), activity.end(), std::uint64_t{0}) == 20'000'000);
    CHECK(activity[5] == Approx(1'000'000).margin(1000));
    CHECK(activity[1] == 0);
    CHECK(json::serialize(lane.at("waits")) == "[[2,22,0]]");
    CHECK(t.at("wait_kinds").as_array().at(0) == "sleeping");
    // A session without waits has no wall.
    const auto plain = f.import(script_sample({"work", "main"}, 5));
    CHECK(f.call(http::verb::get, "/api/sessions/" + plain + "/functions?event=wall").result() ==
          http::status::bad_request);
}

TEST_CASE("API: drop leaves out every stack through a function and its weight from the total "
          "(preemption kept or dropped)",
          "[collector][api][off-cpu]") {
    fixture_app f;
    // Thread 1: 10 ms asleep in nap; 3 ms on the CPU in work (the sample at its end); 5 ms
    // preempted in work (as the device folds waits).
    auto wait = [](const char* at, const char* ns, const char* kind, const char* in) {
        return std::string("app 1/1 ") + at + ": " + ns + " off-cpu:\n\t0 " + kind +
               " ([off-cpu])\n\t1 " + in + " (/bin/app)\n\t1 main (/bin/app)\n\n";
    };
    const auto id = f.import(wait("1.000000000", "10000000", "[sleeping]", "nap") +
                             script_sample({"work", "main"}, 3000000, 1, "1.013000000") +
                             wait("1.013000000", "5000000", "[preempted]", "work"));
    const auto base = "/api/sessions/" + id;
    auto totals = [&](const std::string& query) {
        const auto t = f.get_json(base + "/functions" + query);
        std::map<std::string, std::uint64_t> m;
        for (const auto& r : t.at("functions").as_array())
            m[std::string(r.at("name").as_string())] = r.at("total").to_number<std::uint64_t>();
        m["(view total)"] = t.at("total").to_number<std::uint64_t>();
        return m;
    };
    const auto wall = totals("?event=wall");
    CHECK(wall.at("(view total)") == 18'000'000);
    CHECK(wall.at("work") == 8'000'000);
    CHECK(wall.at("[preempted]") == 5'000'000);
    const auto kept = totals("?event=wall&drop=%5Bpreempted%5D");
    CHECK(kept.at("(view total)") == 13'000'000); // what remains is the view
    CHECK(kept.at("main") == 13'000'000);
    CHECK(kept.at("work") == 3'000'000);
    CHECK(kept.count("[preempted]") == 0);
    // By a caller's name, with other transforms, in every view of stacks.
    CHECK(totals("?event=wall&drop=nap").at("(view total)") == 8'000'000);
    CHECK(totals("?event=wall&drop=nap&hide=work").at("main") == 8'000'000);
    CHECK(totals("?event=wall&drop=nap;work").count("main") == 0);
    const auto flame = f.get_json(base + "/flamegraph?event=wall&drop=%5Bpreempted%5D");
    CHECK(flame.at("root").at("value").to_number<std::uint64_t>() == 13'000'000);
    CHECK(flame.at("drop").as_array().at(0).as_string() == "[preempted]");
    CHECK(json::serialize(flame.at("root")).find("preempted") == std::string::npos);
    const auto focus = f.get_json(base + "/flamegraph?event=wall&focus=work&drop=%5Bpreempted%5D");
    CHECK(focus.at("root").at("value").to_number<std::uint64_t>() == 3'000'000);
    const auto up = f.get_json(base + "/flamegraph?event=wall&inverted=1&drop=nap");
    CHECK(up.at("root").at("value").to_number<std::uint64_t>() == 8'000'000);
    const auto exported =
        f.call(http::verb::get, base + "/export?format=collapsed&event=wall&drop=%5Bpreempted%5D");
    CHECK(exported.body().find("preempted") == std::string::npos);
    CHECK_THAT(exported.body(), Catch::Contains("main;nap;[sleeping] 10000000"));
    // The flame chart leaves a dropped wait out; the lane of a wall view is when it ran, its
    // waits the spans beside it.
    const auto t = f.get_json(base + "/timeline?event=wall&width=18&tid=1&drop=%5Bpreempted%5D");
    CHECK(json::serialize(t.at("chart")).find("preempted") == std::string::npos);
    std::uint64_t ran = 0;
    for (const auto& a : t.at("threads").as_array().at(0).at("activity").as_array())
        ran += a.to_number<std::uint64_t>();
    CHECK(ran == 3'000'000); // over the 3 ms before the sample: buckets 10 to 12
    INFO(json::serialize(t.at("threads")));
    CHECK(t.at("end_s").to_number<double>() == Approx(0.018)); // the last wait's end
    CHECK(t.at("threads").as_array().at(0).at("activity").as_array().at(11) == 1'000'000);
    CHECK(t.at("threads").as_array().at(0).at("waits").as_array().size() == 2);
    std::string many = "?drop=";
    for (int i = 0; i < 65; ++i)
        many += "f" + std::to_string(i) + ";";
    CHECK(f.call(http::verb::get, base + "/functions" + many).result() ==
          http::status::bad_request);
}

TEST_CASE("API: agent executables are listed by architecture and served, nothing else",
          "[collector][api]") {
    test_support::temp_dir agents;
    std::ofstream(agents.path / "perfwire-agent-linux-aarch64", std::ios::binary) << "ELF-aarch64";
    std::ofstream(agents.path / "perfwire-agent-linux-aarch64.sha256")
        << std::string(64, 'a') << "  perfwire-agent-linux-aarch64\n";
    std::ofstream(agents.path / "notes.txt") << "not an agent";
    fixture_app f;
    f.app->agent_binaries = find_agent_binaries(agents.path);
    const auto list = f.get_json("/api/agent-binaries").at("binaries").as_array();
    REQUIRE(list.size() == 1);
    CHECK(list[0].at("arch").as_string() == "aarch64");
    CHECK(list[0].at("size").to_number<int>() == 11);
    CHECK(list[0].at("sha256").as_string() == std::string(64, 'a'));
    const auto bin = f.call(http::verb::get, "/api/agent-binaries/aarch64");
    CHECK(bin.result() == http::status::ok);
    CHECK(bin.body() == "ELF-aarch64");
    CHECK(bin[http::field::content_disposition] ==
          "attachment; filename=\"perfwire-agent-linux-aarch64\"");
    for (const char* other : {"/api/agent-binaries/armv7", "/api/agent-binaries/..%2fnotes.txt",
                              "/api/agent-binaries/aarch64.sha256"})
        CHECK(f.call(http::verb::get, other).result() == http::status::not_found);
}

TEST_CASE("API: baseline diffs and metrics history", "[collector][api]") {
    fixture_app f;
    const auto base = "/api/sessions/" + f.session_id;
    // Against itself every delta is zero.
    const auto same = f.get_json(base + "/functions?baseline=" + f.session_id);
    CHECK(same.at("baseline").as_string() == f.session_id);
    for (const auto& r : same.at("functions").as_array()) {
        CHECK(r.at("delta_self_pct").as_double() == Approx(0.0).margin(1e-9));
        CHECK(r.at("baseline_total_pct").as_double() == Approx(r.at("total_pct").as_double()));
    }
    const auto flame = f.get_json(base + "/flamegraph?baseline=" + f.session_id);
    for (const auto& c : flame.at("root").at("children").as_array())
        CHECK(c.at("delta_pct").as_double() == Approx(0.0).margin(1e-9));

    // Against a capture of another program: its functions are all new here.
    auto w = f.app->store.create("other", {{"agent", "perfwire"}, {"started_at", 1000.0}});
    REQUIRE(w.has_value());
    REQUIRE_FALSE(
        w->write_chunk(false, "other 9/9 1.0: 1 cpu-clock: \n\t1 elsewhere (/bin/other)\n\n"));
    REQUIRE_FALSE(w->append_metrics(R"({"type":"system","ts":1001.0})"));
    REQUIRE_FALSE(w->append_metrics(R"({"type":"process","ts":1002.0})"));
    REQUIRE_FALSE(w->append_metrics(R"({"type":"system","ts":1005.0})"));
    const auto diff = f.get_json(base + "/functions?baseline=" + w->id());
    const auto& top = diff.at("functions").as_array().at(0);
    CHECK(top.at("baseline_self_pct").as_double() == 0.0);
    CHECK(top.at("delta_self_pct").as_double() == Approx(top.at("self_pct").as_double()));
    CHECK(f.call(http::verb::get, base + "/functions?baseline=nope").result() ==
          http::status::not_found);

    const auto other = "/api/sessions/" + w->id();
    CHECK(f.get_json(other + "/metrics").as_array().size() == 3);
    CHECK(f.get_json(other + "/metrics?type=system").as_array().size() == 2);
    const auto late = f.get_json(other + "/metrics?type=system&start=3").as_array();
    REQUIRE(late.size() == 1);
    CHECK(late[0].at("ts").as_double() == 1005.0);
}

TEST_CASE("API: every column of a compared view against hand-computed profiles",
          "[collector][api]") {
    fixture_app f;
    // Leaf first. B recurses under X; the baseline has E, which this session lacks.
    const auto id = f.import(
        script_sample({"C", "B", "A", "main"}, 10) + script_sample({"B", "A", "main"}, 20) +
        script_sample({"B", "B", "X", "main"}, 30) + script_sample({"D", "main"}, 40));
    const auto base = f.import(script_sample({"B", "A", "main"}, 50) +
                               script_sample({"E", "main"}, 50, 1, "2.0"));
    const auto url = "/api/sessions/" + id;
    struct row {
        double self, total;
    };
    auto table = [](const json::value& answer) {
        std::map<std::string, json::object> out;
        for (const auto& r : answer.at("functions").as_array())
            out[std::string(r.at("name").as_string())] = r.as_object();
        return out;
    };
    // Plain: self and total of the view's weight, a recursive function counted once per stack.
    const auto plain = table(f.get_json(url + "/functions"));
    const std::map<std::string, row> want{{"main", {0, 100}}, {"A", {0, 30}},  {"X", {0, 30}},
                                          {"B", {50, 60}},    {"C", {10, 10}}, {"D", {40, 40}}};
    REQUIRE(plain.size() == want.size());
    for (const auto& [name, w] : want) {
        INFO(name);
        CHECK(plain.at(name).at("self_pct").as_double() == Approx(w.self));
        CHECK(plain.at(name).at("total_pct").as_double() == Approx(w.total));
    }

    // Compared: the union of both tables. E, the baseline's alone, is a row of its own.
    const auto diff = f.get_json(url + "/functions?sort=delta_self_pct&order=asc&baseline=" + base);
    CHECK(diff.at("count").to_number<int>() == 7);
    const auto& first = diff.at("functions").as_array().at(0);
    CHECK(first.at("name").as_string() == "E");
    CHECK(first.at("self").to_number<int>() == 0);
    CHECK(first.at("baseline_self_pct").as_double() == Approx(50));
    CHECK(first.at("delta_self_pct").as_double() == Approx(-50));
    CHECK(first.at("delta_total_pct").as_double() == Approx(-50));
    CHECK(first.at("noise_self_pct").as_double() > 0);
    const auto compared = table(diff);
    CHECK(compared.at("B").at("delta_self_pct").as_double() == Approx(0).margin(1e-9));
    CHECK(compared.at("B").at("delta_total_pct").as_double() == Approx(10));
    CHECK(compared.at("D").at("delta_self_pct").as_double() == Approx(40));
    CHECK(compared.at("A").at("delta_total_pct").as_double() == Approx(-20));
    // A search keeps the rows of both sides that match.
    const auto only_e = f.get_json(url + "/functions?match=e&baseline=" + base);
    CHECK(only_e.at("matched").to_number<int>() == 1);

    // The flame graph over the union: E, gone, is a node of value 0 with its share before.
    auto child = [](const json::value& node, std::string_view name) -> const json::value& {
        for (const auto& c : node.at("children").as_array())
            if (c.at("name").as_string() == name)
                return c;
        FAIL("no child " << name);
        return node;
    };
    const auto flame = f.get_json(url + "/flamegraph?baseline=" + base);
    const auto& main_node = child(flame.at("root"), "main");
    CHECK(main_node.at("delta_pct").as_double() == Approx(0).margin(1e-9));
    const auto& e = child(main_node, "E");
    CHECK(e.at("value").to_number<int>() == 0);
    CHECK(e.at("baseline_pct").as_double() == Approx(50));
    CHECK(e.at("delta_pct").as_double() == Approx(-50));
    const auto& a = child(main_node, "A");
    CHECK(a.at("baseline_pct").as_double() == Approx(50));
    CHECK(a.at("delta_pct").as_double() == Approx(-20));
    CHECK(child(a, "B").at("delta_pct").as_double() == Approx(-20));
    CHECK(child(child(a, "B"), "C").at("delta_pct").as_double() == Approx(10)); // new
    CHECK(child(child(main_node, "X"), "B").at("baseline_pct").as_double() == 0);

    // Bottom-up: each root is a sampled function with self = total = its self time, as the
    // function table has it; below, the share of it that came through each caller.
    const auto inv = f.get_json(url + "/flamegraph?inverted=1");
    for (const auto& leaf : inv.at("root").at("children").as_array()) {
        const std::string name(leaf.at("name").as_string());
        INFO(name);
        CHECK(leaf.at("self").to_number<int>() == leaf.at("value").to_number<int>());
        CHECK(leaf.at("value").to_number<double>() == Approx(want.at(name).self));
    }
    const auto& b_up = child(inv.at("root"), "B");
    CHECK(child(b_up, "A").at("value").to_number<int>() == 20);
    CHECK(child(b_up, "B").at("value").to_number<int>() == 30);
    // Compared bottom-up and focused (the call tree's and the sandwich's graphs) too.
    const auto inv_diff = f.get_json(url + "/flamegraph?inverted=1&baseline=" + base);
    CHECK(child(inv_diff.at("root"), "E").at("delta_pct").as_double() == Approx(-50));
    CHECK(child(inv_diff.at("root"), "D").at("delta_pct").as_double() == Approx(40));
    const auto focus = f.get_json(url + "/flamegraph?focus=B&baseline=" + base);
    const auto& b_top = child(focus.at("root"), "B");
    CHECK(b_top.at("baseline_pct").as_double() == Approx(50));
    CHECK(b_top.at("delta_pct").as_double() == Approx(10));
    const auto callers = f.get_json(url + "/flamegraph?focus=B&callers=1&baseline=" + base);
    CHECK(child(child(callers.at("root"), "B"), "A").at("delta_pct").as_double() == Approx(-20));
}

TEST_CASE("API: last=N is a rolling window over the newest N seconds, and the meta counts a "
          "window's samples",
          "[collector][api]") {
    fixture_app f;
    const auto id = f.import(script_sample({"A", "main"}, 10, 1, "1.0") +
                             script_sample({"B", "main"}, 20, 1, "5.0") +
                             script_sample({"C", "main"}, 30, 2, "9.0"));
    const auto url = "/api/sessions/" + id;
    auto names = [&](const std::string& q) {
        std::set<std::string> out;
        const auto a = f.get_json(url + "/functions?" + q);
        for (const auto& r : a.at("functions").as_array())
            if (r.at("self").to_number<int>() > 0)
                out.insert(std::string(r.at("name").as_string()));
        return std::make_pair(out, a.at("total").to_number<int>());
    };
    using answer = std::pair<std::set<std::string>, int>;
    CHECK(names("last=4.5") == answer{{"B", "C"}, 50});
    CHECK(names("last=1") == answer{{"C"}, 30});
    CHECK(names("last=100") == answer{{"A", "B", "C"}, 60});
    CHECK(names("last=4.5&tid=1") == answer{{"B"}, 20});
    CHECK(f.get_json(url + "?last=4.5").at("view_samples").to_number<int>() == 2);
    CHECK(f.get_json(url + "?start=0&end=2").at("view_samples").to_number<int>() == 1);
    CHECK_FALSE(f.get_json(url).as_object().contains("view_samples"));
    CHECK(f.call(http::verb::get, url + "/functions?last=0").result() == http::status::bad_request);
    // A window or thread no clock or thread can have is refused, never cast past its range.
    for (const char* q : {"start=inf", "end=nan", "start=1e300", "end=-1e10", "start=1e10",
                          "tid=-1", "tid=1e12", "max_depth=1e300"})
        CHECK(f.call(http::verb::get, url + "/functions?" + q).result() ==
              http::status::bad_request);
    CHECK(f.call(http::verb::get, url + "/functions?start=1e9").result() == http::status::ok);
    CHECK(f.call(http::verb::get, url + "/functions?start=-0.6&end=1.3").result() ==
          http::status::ok); // (a window drawn from before the first sample)
}

TEST_CASE("API: an export is the view: its transforms and text filter, titled with the "
          "session's name",
          "[collector][api]") {
    fixture_app f;
    const auto res =
        f.call(http::verb::post, "/api/sessions/import?name=my%20app%20%3Cb%3E.txt",
               script_sample({"C", "B", "A", "main"}, 10) + script_sample({"B", "A", "main"}, 20) +
                   script_sample({"B", "B", "X", "main"}, 30) + script_sample({"D", "main"}, 40));
    REQUIRE(res.result() == http::status::ok);
    const std::string id(json::parse(res.body()).at("session_id").as_string());
    const auto url = "/api/sessions/" + id + "/export?format=collapsed";
    auto lines = [&](const std::string& q) {
        const auto r = f.call(http::verb::get, url + q);
        INFO(q << " -> " << r.body());
        CHECK(r.result() == http::status::ok);
        std::set<std::string> out;
        std::istringstream in(r.body());
        for (std::string l; std::getline(in, l);)
            out.insert(l);
        return out;
    };
    using stacks = std::set<std::string>;
    CHECK(lines("") == stacks{"main;A;B;C 10", "main;A;B 20", "main;X;B;B 30", "main;D 40"});
    // Focused on B with its recursion collapsed: only the stacks through B, from B down.
    CHECK(lines("&focus=B&recursion=collapse") == stacks{"B;C 10", "B 50"});
    CHECK(lines("&hide=A;X") == stacks{"main;B;C 10", "main;B 20", "main;B;B 30", "main;D 40"});
    CHECK(lines("&match=x") == stacks{"main;X;B;B 30"});
    CHECK(lines("&collapse=%2Fbin%2Fapp") == stacks{"[app] 100"});
    CHECK(f.call(http::verb::get, url + "&focus=nothing").result() == http::status::not_found);
    // Every format downloads, named after the session (what its name has of letters, digits,
    // '.', '-' and '_'), JSON too; the SVG and speedscope title it so.
    const auto json_export =
        f.call(http::verb::get, "/api/sessions/" + id + "/export?format=json&focus=B");
    CHECK(std::string(json_export[http::field::content_disposition]) ==
          "attachment; filename=\"my_app_b_.txt-" + id + ".json\"");
    CHECK(json::parse(json_export.body()).at("functions").at("total").to_number<int>() == 60);
    const auto svg = f.call(http::verb::get, "/api/sessions/" + id + "/export?format=svg");
    CHECK_THAT(svg.body(), Catch::Contains("my app &lt;b&gt;.txt"));
    const auto speedscope =
        f.call(http::verb::get, "/api/sessions/" + id + "/export?format=speedscope&hide=A");
    CHECK(json::parse(speedscope.body()).at("name").as_string() == "my app <b>.txt");
    CHECK(speedscope.body().find("\"A\"") == std::string::npos);
}

TEST_CASE("API: symbolizer config, file browser and source listing", "[collector][api]") {
    fixture_app f;
    // The browser and the config are confined to --browse-root (here the test's folder).
    f.app->limits.browse_root = f.dir.string();
    auto cfg = f.get_json("/api/config");
    CHECK(cfg.at("inline").as_bool());
    CHECK(cfg.at("binaries").as_array().empty());
    CHECK_FALSE(cfg.at("toolchains").as_array().empty()); // at least the native one

    // A page from elsewhere cannot change where binaries are read from.
    CHECK(f.call(http::verb::put, "/api/config", R"({"sysroot":"/x"})", "127.0.0.1:8080",
                 "http://evil.example")
              .result() == http::status::forbidden);
    CHECK(f.call(http::verb::put, "/api/config", R"({"sysroot":1})").result() ==
          http::status::bad_request);
    CHECK(f.call(http::verb::put, "/api/config", "not json").result() == http::status::bad_request);
    // No request names a program for the collector to run, or a folder outside the root.
    CHECK(
        f.call(http::verb::put, "/api/config", R"({"toolchain_prefix":"/tmp/x/evil-"})").result() ==
        http::status::bad_request);
    CHECK(f.call(http::verb::put, "/api/config", R"({"source_dirs":["/etc"]})").result() ==
          http::status::bad_request);
    const auto src_dir = f.dir.string() + "/src";
    const auto put =
        f.call(http::verb::put, "/api/config",
               R"({"source_dirs":[")" + src_dir + R"("],"path_map":[{"from":"/b","to":")" +
                   f.dir.string() + R"("}]})");
    REQUIRE(put.result() == http::status::ok);
    cfg = f.get_json("/api/config");
    CHECK(cfg.at("source_dirs").as_array().at(0).as_string() == src_dir);
    CHECK(cfg.at("path_map").as_array().size() == 1);
    CHECK(cfg.at("sysroot").as_string() == ""); // fields not sent stay as they were

    const auto listing = f.get_json("/api/browse");
    CHECK(listing.at("path").as_string() == std::filesystem::canonical(f.dir).string());
    CHECK(f.call(http::verb::get, "/api/browse?path=..%2F..").result() == http::status::forbidden);
    CHECK(f.call(http::verb::get, "/api/browse?path=%2Fetc").result() == http::status::forbidden);

    // The capture's binaries are not on this machine: the listing says so per binary.
    const auto src = f.get_json("/api/sessions/" + f.session_id + "/source");
    CHECK(src.at("event").as_string() == "cpu-clock");
    CHECK(src.at("binaries").as_array().size() > 0);
    CHECK(f.call(http::verb::get, "/api/sessions/" + f.session_id + "/source?file=%2Fetc%2Fpasswd")
              .result() == http::status::not_found);
}

TEST_CASE("API: pprof and svg exports of a real capture", "[collector][api]") {
    fixture_app f;
    const auto base = "/api/sessions/" + f.session_id;
    const auto fns = f.get_json(base + "/functions");
    const auto total_period = fns.at("total").to_number<std::uint64_t>();
    const auto total_samples =
        f.get_json(base + "/functions?weight=samples").at("total").to_number<std::uint64_t>();

    const auto res = f.call(http::verb::get, base + "/export?format=pprof");
    REQUIRE(res.result() == http::status::ok);
    CHECK(res[http::field::content_disposition].find(".pb.gz\"") != boost::string_view::npos);
    CHECK(res.body().rfind("\x1f\x8b", 0) == 0); // gzip, as pprof files are
    const auto pp = test_support::read_pprof(res.body());
    CHECK(pp.sample_types.size() == 2);
    REQUIRE_FALSE(pp.strings.empty());
    CHECK(pp.strings[0].empty()); // pprof's string table starts with ""
    std::uint64_t n = 0, period = 0;
    bool matrix_leaf = false;
    for (const auto& s : pp.samples) {
        REQUIRE(s.values.size() == 2);
        n += s.values[0];
        period += s.values[1];
        REQUIRE_FALSE(s.locations.empty());
        for (auto loc : s.locations)
            REQUIRE(pp.locations.count(loc));
        const auto& leaf = pp.locations.at(s.locations.front()).lines;
        REQUIRE_FALSE(leaf.empty());
        matrix_leaf |= leaf.back().function == "(anonymous namespace)::matrix_multiply";
    }
    CHECK(n == total_samples);
    CHECK(period == total_period);
    CHECK(pp.period == total_period / total_samples);
    CHECK(matrix_leaf); // locations run leaf first
    // Every mapping says the names come with the profile, so pprof does not look for binaries.
    REQUIRE_FALSE(pp.mappings.empty());
    for (const auto& [id, m] : pp.mappings)
        CHECK(m.has_functions);

    const auto svg = f.call(http::verb::get, base + "/export?format=svg");
    REQUIRE(svg.result() == http::status::ok);
    CHECK(svg[http::field::content_type] == "image/svg+xml");
    const auto& body = svg.body();
    CHECK(body.rfind("<?xml", 0) == 0);
    CHECK(body.size() > 1000);
    CHECK(body.substr(body.size() - 7) == "</svg>\n");
    CHECK_THAT(body, Catch::Contains("<title>all — ") && Catch::Contains("(100.00%)</title>"));
    CHECK_THAT(body, Catch::Contains("(anonymous namespace)::matrix_multiply ("));
    // Interactive: each frame carries its geometry and full name for the zoom script.
    CHECK_THAT(body, Catch::Contains("data-n=\"(anonymous namespace)::matrix_multiply\""));
    CHECK_THAT(body, Catch::Contains("<script type=\"text/ecmascript\"><![CDATA["));
    CHECK(body.find("]]>") == body.rfind("]]>")); // the script is the only CDATA section
    CHECK_THAT(std::string(svg["Content-Security-Policy"]),
               Catch::StartsWith("default-src 'none'"));
    std::size_t open = 0, close = 0;
    for (auto pos = body.find("<g class=\"f\""); pos != std::string::npos;
         pos = body.find("<g class=\"f\"", pos + 1))
        ++open;
    for (auto pos = body.find("</g>"); pos != std::string::npos; pos = body.find("</g>", pos + 1))
        ++close;
    CHECK(open == close);
    CHECK(open > 10);
    CHECK(f.call(http::verb::get, base + "/export?format=png").result() ==
          http::status::bad_request);
}
