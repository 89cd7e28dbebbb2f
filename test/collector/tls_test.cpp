// The agent link over TLS, end to end on loopback with the real daemons, both agents and real
// perf: an agent that pinned the collector's key profiles over an encrypted link; a peer with
// another key (a different collector, or someone in between presenting their own certificate)
// is refused in both directions; plain and TLS agents share one port unless TLS is required;
// a peer that opens a handshake and sends garbage, or stops halfway, harms nobody else.
#include "collector/symbols/subprocess.hpp"
#include "support/agents.hpp"
#include "support/collector_proc.hpp"
#include "support/fixtures.hpp"
#include "support/framing_peer.hpp"
#include "support/proc_status.hpp"

#include <boost/json/serialize.hpp>
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

using namespace std::chrono_literals;
namespace fs = std::filesystem;
namespace json = boost::json;
using test_support::agent_flavour;
using test_support::collector_proc;
using test_support::spawned;
using test_support::temp_dir;
using test_support::wait_for;

namespace {

// The key a collector or a --listen agent printed ("… key sha256:<64 hex> …").
std::string printed_pin(spawned& p, const std::string& before) {
    const auto text = p.wait_for_stderr(before, 10s);
    REQUIRE(text);
    REQUIRE(text->size() >= 71);
    return text->substr(0, 71);
}

// The listed target whose hostname the agent reported and whose link is as asked.
const json::value* target_with(const json::value& targets, bool encrypted) {
    for (const auto& t : targets.as_array())
        if (t.at("link").at("encrypted").as_bool() == encrypted &&
            t.at("state").as_string() != "connecting")
            return &t;
    return nullptr;
}

const std::string wrong_pin = "sha256:" + std::string(64, '0');

// A listed session's samples (0 while its listing has none yet).
std::uint64_t samples_in(const json::value& s) {
    const auto* n = s.as_object().if_contains("samples");
    return n && n->is_number() ? n->to_number<std::uint64_t>() : 0;
}

// Whether the collector closes a connection that sends `bytes` (within 5 s): whatever it
// answers first (a TLS alert) is read and dropped.
bool closed_after(std::uint16_t port, const std::string& bytes) {
    const int fd = test_support::connect_loopback(port);
    if (fd < 0 || ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL) !=
                      static_cast<ssize_t>(bytes.size())) {
        if (fd >= 0)
            ::close(fd);
        return false;
    }
    const auto deadline = std::chrono::steady_clock::now() + 5s;
    bool closed = false;
    while (!closed && std::chrono::steady_clock::now() < deadline) {
        pollfd p{fd, POLLIN, 0};
        if (::poll(&p, 1, 100) <= 0)
            continue;
        char buf[512];
        closed = ::recv(fd, buf, sizeof buf, 0) <= 0;
    }
    ::close(fd);
    return closed;
}

} // namespace

TEST_CASE("agents that pin the collector's key profile over TLS — another key is refused — plain "
          "agents share the port unless TLS is required",
          "[collector][integration][perf][tls]") {
    const auto flavour = test_support::each_agent();
    INFO(flavour);
    temp_dir dir;
    auto demo = test_support::start_demo(60);
    collector_proc coll(dir.path / "sessions", {"--tls"});
    const std::string pin = printed_pin(*coll.proc, "TLS with the key ");
    // The key is kept: made once, owner-only, the same after a restart.
    const auto key_file = dir.path / "sessions" / ".tls" / "key.pem";
    REQUIRE(fs::exists(key_file));
    CHECK((fs::status(key_file).permissions() & fs::perms::all) ==
          (fs::perms::owner_read | fs::perms::owner_write));

    const std::string to = "127.0.0.1:" + std::to_string(coll.agent_port);
    auto tls_agent = test_support::start_agent(
        flavour, {"--server", to, "--tls-pin", pin, "--pid", std::to_string(demo->pid())});
    // A plain agent on the same port at the same time (the loopback default takes both).
    auto plain_agent = test_support::start_agent(agent_flavour::cpp, {"--server", to});
    const auto both = wait_for(coll, "/api/targets", 30s, [](const json::value& v) {
        const auto* t = target_with(v, true);
        return t && target_with(v, false) && t->at("state").as_string() == "profiling";
    });
    INFO(json::serialize(both) << "\n"
                               << coll.proc->stderr_text() << "\n"
                               << tls_agent->stderr_text());
    const auto* encrypted = target_with(both, true);
    REQUIRE(encrypted);
    REQUIRE(target_with(both, false));
    CHECK_THAT(std::string(encrypted->at("link").at("tls").as_string()), Catch::StartsWith("TLS"));
    CHECK(encrypted->at("link").at("pinned").as_string() == pin);
    CHECK(target_with(both, false)->at("link").at("pinned").is_null());
    CHECK_THAT(tls_agent->stderr_text(), Catch::Contains("its key pinned"));

    // Profiles arrive whole over the encrypted link.
    const std::string session(encrypted->at("session_id").as_string());
    const auto fns =
        wait_for(coll, "/api/sessions/" + session + "/functions", 30s, [](const json::value& v) {
            for (const auto& f : v.at("functions").as_array())
                if (f.at("name").as_string().find("matrix_multiply") != json::string::npos)
                    return true;
            return false;
        });
    CHECK_THAT(json::serialize(fns), Catch::Contains("matrix_multiply"));

    // A peer that opens a TLS handshake and sends garbage, and one that stops halfway: each is
    // closed, the TLS agent profiles on.
    {
        CHECK(closed_after(coll.agent_port,
                           std::string("\x16\x03\x01\x00\x05hello", 10) + std::string(300, 'x')));
        CHECK(coll.proc->wait_for_stderr("TLS handshake failed", 5s));
        auto halfway = test_support::framing_peer::connect(coll.agent_port);
        REQUIRE(halfway);
        halfway->send_raw(std::string("\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03", 11));
        halfway.reset(); // gone mid-handshake
    }
    const auto after = wait_for(coll, "/api/targets", 10s, [](const json::value& v) {
        const auto* t = target_with(v, true);
        return t && t->at("state").as_string() == "profiling";
    });
    REQUIRE(target_with(after, true));

    // A collector with another key stands where this one was expected (a TLS-terminating proxy
    // presenting its own certificate looks the same to the agent): refused, nothing sent.
    collector_proc other(dir.path / "other", {"--tls", "--agent-tls", "required"});
    const std::string other_pin = printed_pin(*other.proc, "TLS with the key ");
    CHECK(other_pin != pin);
    auto fooled = test_support::start_agent(
        flavour, {"--server", "127.0.0.1:" + std::to_string(other.agent_port), "--tls-pin", pin});
    const auto refused = fooled->wait_for_stderr("not the pinned " + pin, 15s);
    INFO(fooled->stderr_text());
    CHECK(refused);
    CHECK_THAT(fooled->stderr_text(), Catch::Contains(other_pin));
    // Required TLS: a plain agent is refused, with the way to fix it in the log.
    auto plain_refused = test_support::start_agent(
        agent_flavour::cpp, {"--server", "127.0.0.1:" + std::to_string(other.agent_port)});
    CHECK(other.proc->wait_for_stderr("takes only TLS ones", 15s));
    CHECK(other.get("/api/targets").as_array().empty());
    CHECK(test_support::session_folders(dir.path / "other") == 0);

    // --tls-ca: the collector's self-signed certificate as the CA, but it names no such host
    // (no subjectAltName for 127.0.0.1): refused, the chain check is not the pin's.
    const auto ca = (dir.path / "other" / ".tls" / "cert.pem").string();
    auto unnamed = test_support::start_agent(
        flavour, {"--server", "127.0.0.1:" + std::to_string(other.agent_port), "--tls-ca", ca});
    CHECK(unnamed->wait_for_stderr("TLS handshake failed", 15s));
    CHECK(other.get("/api/targets").as_array().empty());

    // A mistyped pin is a usage error, never a link in the clear.
    spawned typo(test_support::agent_bin(), {"--server", to, "--tls-pin", "sha256:abc"});
    CHECK(typo.wait(10s) == 2);
}

TEST_CASE("the wizard dials a --listen --tls agent by its printed key — another key is refused",
          "[collector][integration][tls]") {
    const auto flavour = test_support::each_agent();
    INFO(flavour);
    temp_dir dir;
    const std::string code = "00112233445566778899aabbccddeeff";
    collector_proc coll(dir.path / "sessions");
    const auto key_file = (dir.path / "device-key.pem").string();
    if (flavour == agent_flavour::python) {
        // A device's Python cannot make a key: one made by the C++ agent is given to it.
        spawned maker(test_support::agent_bin(), {"--listen", "--bind", "127.0.0.1", "--port", "0",
                                                  "--tls", "--tls-key", key_file});
        REQUIRE(maker.wait_for_stderr("this device's key: ", 10s));
    }
    auto listening = [&](const std::string& key) {
        return test_support::start_agent(flavour, {"--listen", "--bind", "127.0.0.1", "--port", "0",
                                                   "--token", code, "--tls", "--tls-key", key});
    };
    auto agent = listening(key_file);
    const std::string pin = printed_pin(*agent, "this device's key: ");
    const auto port = agent->wait_for_stderr("listening on 127.0.0.1:", 10s);
    REQUIRE(port);
    auto dial = [&](const std::string& with_pin, const std::string& at) {
        return test_support::http_call(coll.http_port, "POST", "/api/targets/connect",
                                       R"({"host":"127.0.0.1","port":)" + at + R"(,"token":")" +
                                           code + R"(","pin":")" + with_pin + R"("})");
    };

    // Another key where the agent was expected: refused before the pairing code is sent.
    const auto wrong = dial(wrong_pin, *port);
    INFO(wrong.body << "\n" << agent->stderr_text());
    CHECK(wrong.status == 502);
    CHECK_THAT(wrong.body, Catch::Contains("not the pinned"));
    CHECK(test_support::http_call(coll.http_port, "POST", "/api/targets/connect",
                                  R"({"host":"127.0.0.1","port":1,"pin":"sha256:12"})")
              .status == 400);

    const auto dialled = dial(pin, *port);
    INFO(dialled.body << "\n" << agent->stderr_text());
    REQUIRE(dialled.status == 200);
    const auto t = boost::json::parse(dialled.body);
    CHECK(t.at("link").at("encrypted").as_bool());
    CHECK(t.at("link").at("pinned").as_string() == pin);
    CHECK(t.at("state").as_string() == "idle");
    // The agent's key is the one it keeps: its file is owner-only.
    CHECK((fs::status(key_file).permissions() & fs::perms::all) ==
          (fs::perms::owner_read | fs::perms::owner_write));
}

TEST_CASE("the UI and API over HTTPS (--http-tls) with the collector's key — the sign-in cookie "
          "is Secure",
          "[collector][integration][tls]") {
    temp_dir dir;
    spawned coll(test_support::collector_bin(),
                 {"--sessions-dir", (dir.path / "s").string(), "--agent-port", "0", "--agent-bind",
                  "127.0.0.1", "--http-port", "0", "--http-tls"});
    const auto link = coll.wait_for_stderr("UI and API on ", 10s);
    REQUIRE(link);
    REQUIRE_THAT(*link, Catch::StartsWith("https://127.0.0.1:"));
    const std::string pin = printed_pin(coll, "TLS with the key ");
    // A client that pins the collector's key, as a browser told to trust it would: the
    // sign-in link sets a Secure cookie; the API answers with the token; plain HTTP does not.
    const std::string script =
        "import hashlib, http.client, json, socket, ssl, sys\n"
        "url = sys.argv[1]; pin = sys.argv[2]\n"
        "host, port = url[len('https://'):].split('/')[0].split(':')\n"
        "code = url.split('code=')[1]\n"
        "ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)\n"
        "ctx.check_hostname = False; ctx.verify_mode = ssl.CERT_NONE\n"
        "c = http.client.HTTPSConnection(host, int(port), context=ctx, timeout=10)\n"
        "c.request('GET', '/?code=' + code)\n"
        "r = c.getresponse(); r.read()\n"
        "token = r.getheader('Set-Cookie').split(';')[0].split('=')[1]\n"
        "der = c.sock.getpeercert(binary_form=True)\n"
        "print('pin', 'sha256:' + hashlib.sha256(der).hexdigest() == pin)\n"
        "print('cookie', r.status, r.getheader('Set-Cookie'))\n"
        "c.request('GET', '/api/status', headers={'Authorization': 'Bearer ' + token})\n"
        "r = c.getresponse(); body = json.loads(r.read())\n"
        "print('status', r.status, body['tls_pin'] == pin)\n"
        "p = http.client.HTTPConnection(host, int(port), timeout=10)\n"
        "try:\n"
        "    p.request('GET', '/api/status'); print('plain', p.getresponse().status)\n"
        "except Exception as e:\n"
        "    print('plain refused')\n";
    const auto ran = collector::run_capture({PERFWIRE_PYTHON, "-c", script, *link, pin});
    INFO(ran.err << "\n" << coll.stderr_text());
    REQUIRE(ran.code == 0);
    CHECK_THAT(ran.out, Catch::Contains("pin True"));
    CHECK_THAT(ran.out, Catch::Contains("cookie 303"));
    CHECK_THAT(ran.out, Catch::Contains("HttpOnly; SameSite=Strict; Secure"));
    CHECK_THAT(ran.out, Catch::Contains("status 200 True"));
    CHECK_THAT(ran.out, Catch::Contains("plain refused"));
    // A CI job's perfwire over HTTPS, pinning the same key: the API answers it (a session it
    // does not hold is the collector's 404); another pin, or no pin and no CA that signs a
    // self-made key, and nothing is asked.
    const auto url = link->substr(0, link->find('/', 8));
    const auto token = (dir.path / "s" / ".http-token").string();
    const auto cli = [&](std::vector<std::string> trust) {
        std::vector<std::string> args{PERFWIRE_CLI_BIN, "compare", "--url",     url,
                                      "--token-file",   token,     "--timeout", "10"};
        args.insert(args.end(), trust.begin(), trust.end());
        args.insert(args.end(), {"20990101_000000_a", "20990101_000000_b"});
        return collector::run_capture(args);
    };
    const auto pinned = cli({"--tls-pin", pin});
    INFO(pinned.out << pinned.err);
    CHECK(pinned.code == 2);
    CHECK_THAT(pinned.err, Catch::Contains("/api/sessions/20990101_000000_a/functions"));
    CHECK_THAT(pinned.err, Catch::Contains("HTTP 404"));
    const auto other = cli({"--tls-pin", "sha256:" + std::string(64, 'a')});
    CHECK(other.code == 2);
    CHECK_THAT(other.err, Catch::Contains("not the pinned sha256:aaaa"));
    // No pin: the system's CAs, which signed no key the collector made itself.
    const auto system_ca = cli({});
    CHECK(system_ca.code == 2);
    CHECK(system_ca.err.find("HTTP 404") == std::string::npos);
}

TEST_CASE("hostile peers inside TLS: a frame declaring 2 GiB and a broken hello close their own "
          "connection, a zstd bomb is refused as a bad chunk, and the TLS agent beside them "
          "profiles on",
          "[collector][integration][perf][tls][attack]") {
    temp_dir dir;
    auto demo = test_support::start_demo(60);
    collector_proc coll(dir.path / "sessions", {"--tls", "--agent-tls", "required"});
    const std::string pin = printed_pin(*coll.proc, "TLS with the key ");
    auto agent = test_support::start_agent(
        agent_flavour::cpp, {"--server", "127.0.0.1:" + std::to_string(coll.agent_port),
                             "--tls-pin", pin, "--pid", std::to_string(demo->pid())});
    auto samples = [&] {
        const auto v = coll.get("/api/sessions");
        std::uint64_t n = 0;
        for (const auto& s : v.as_array())
            n += samples_in(s);
        return n;
    };
    wait_for(coll, "/api/sessions", 30s, [](const json::value& v) {
        return !v.as_array().empty() && samples_in(v.as_array()[0]) > 0;
    });
    const auto before = samples();
    REQUIRE(before > 0);
    // Each attack over its own TLS connection (any certificate: the attacker pins nothing),
    // then read until the collector closes it; "closed" or "open" per attack.
    const std::string script =
        "import socket, ssl, struct, sys, zstandard\n"
        "port = int(sys.argv[1])\n"
        "ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)\n"
        "ctx.check_hostname = False; ctx.verify_mode = ssl.CERT_NONE\n"
        "def frame(flag, payload): return struct.pack('>IB', len(payload), flag) + payload\n"
        "hello = frame(3, b'{\"type\":\"hello\",\"version\":1,\"agent\":\"perfwire\",'\n"
        "              b'\"hostname\":\"bomb\"}')\n"
        "bomb = zstandard.ZstdCompressor(level=3).compress(b'\\0' * (200 << 20))\n"
        "sample = b'app 7/7 1.000000: 1 cpu-clock:\\n\\t1 f (/x)\\n\\n'\n"
        "s = ctx.wrap_socket(socket.create_connection(('127.0.0.1', port), timeout=15))\n"
        "s.sendall(hello + frame(1, bomb) + frame(0, sample))\n"
        "s.close(); print('bomb sent', len(bomb), flush=True)\n"
        "attacks = [('huge', struct.pack('>IB', 0x7fffffff, 1)),\n"
        "           ('hello', frame(3, b'this is not JSON'))]\n"
        "for name, data in attacks:\n"
        "    s = ctx.wrap_socket(socket.create_connection(('127.0.0.1', port), timeout=15))\n"
        "    s.sendall(data)\n"
        "    state = 'open'\n"
        "    try:\n"
        "        while s.recv(4096): pass\n"
        "        state = 'closed'\n"
        "    except (ssl.SSLError, OSError):\n"
        "        state = 'closed'\n"
        "    print(name, state, flush=True)\n";
    const auto ran =
        collector::run_capture({PERFWIRE_PYTHON, "-c", script, std::to_string(coll.agent_port)});
    INFO(ran.err << "\n" << coll.proc->stderr_text());
    REQUIRE(ran.code == 0);
    CHECK_THAT(ran.out, Catch::Contains("huge closed"));
    CHECK_THAT(ran.out, Catch::Contains("bomb sent"));
    CHECK_THAT(ran.out, Catch::Contains("hello closed"));
    CHECK_THAT(coll.proc->stderr_text(), Catch::Contains("bad hello"));
    // (A session's listing may come before its metadata names a host.)
    const auto is_bomb = [](const json::value& s) {
        const auto* h = s.as_object().if_contains("hostname");
        return h && h->is_string() && h->as_string() == "bomb";
    };
    // The bomb's session: its one good sample kept, the bomb counted as a bad chunk, never
    // expanded (the collector stayed small).
    const auto bombed = wait_for(coll, "/api/sessions", 20s, [&](const json::value& v) {
        for (const auto& s : v.as_array())
            if (is_bomb(s) && samples_in(s) == 1)
                return true;
        return false;
    });
    for (const auto& s : bombed.as_array())
        if (is_bomb(s))
            CHECK(coll.get("/api/sessions/" + std::string(s.at("id").as_string()))
                      .at("bad_chunks")
                      .to_number<int>() == 1);
    CHECK(test_support::status_kb(coll.proc->pid(), "VmHWM:") < 768 * 1024);
    // The agent beside them goes on: its session keeps growing, and it is the only target.
    wait_for(coll, "/api/sessions", 20s, [&](const json::value& v) {
        std::uint64_t n = 0;
        for (const auto& s : v.as_array())
            n += samples_in(s);
        return n > before;
    });
    CHECK(samples() > before);
    const auto targets = coll.get("/api/targets");
    REQUIRE(targets.as_array().size() == 1);
    CHECK(targets.as_array()[0].at("link").at("encrypted").as_bool());
    CHECK(targets.as_array()[0].at("state").as_string() == "profiling");
}
