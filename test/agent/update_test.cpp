// Agent updates over the link, against the real agent on loopback: a framing peer plays the
// collector. An agent takes an update only when it was given a public key (--update-pubkey), the
// offer's Ed25519 signature by its private half covers architecture, version, size and sha256,
// the version is later than its own and the bytes are the ones signed: every refusal
// (--no-update, no key, another architecture, unsigned, another key, a signature moved to
// another version, an older build
// replayed, a wrong checksum, pieces out of order) leaves the old agent running, its executable
// untouched and the offered build never run; a good update replaces the executable, restarts the
// agent in the same process and it says hello again with the new version.
#include "protocol/digest.hpp"
#include "protocol/tls.hpp"
#include "protocol/update.hpp"
#include "support/agents.hpp"
#include "support/fixtures.hpp"
#include "support/framing_peer.hpp"
#include "support/spawn.hpp"

#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

using namespace std::chrono_literals;
namespace fs = std::filesystem;
namespace json = boost::json;
using test_support::error_of;
using test_support::framing_peer;
using test_support::listener;
using test_support::ok;
using test_support::read_hello;
using test_support::spawned;
using test_support::temp_dir;

namespace {

const std::string code = "00112233445566778899aabbccddeeff";

protocol::tls::signing_key make_key(const fs::path& file) {
    return std::get<protocol::tls::signing_key>(protocol::tls::load_signing_key(file, true));
}

std::string file_bytes(const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    std::ostringstream out;
    out << in.rdbuf();
    return out.str();
}

framing_peer accept_agent(listener& l) {
    const int fd = l.accept(15s);
    REQUIRE(fd >= 0);
    return framing_peer(fd);
}

// An offer of `size` bytes with `sha256` for `arch`, signed with `signing_key` (none: unsigned).
std::string offer(const std::string& arch, const std::string& sha256, std::size_t size,
                  const protocol::tls::signing_key* signing_key = nullptr,
                  const std::string& version = PERFWIRE_VERSION ".1") {
    protocol::update_offer o{version, arch, sha256, {}, size};
    json::object j;
    j["version"] = version;
    j["arch"] = arch;
    j["size"] = size;
    j["sha256"] = sha256;
    if (signing_key)
        j["signature"] = protocol::tls::sign(*signing_key, protocol::update_signed_text(o));
    return json::serialize(j);
}

// Sends `bytes` in pieces; the last answer.
std::optional<protocol::command_response> send_pieces(framing_peer& peer, std::string_view bytes,
                                                      std::size_t piece = 300 << 10) {
    std::optional<protocol::command_response> r;
    for (std::size_t at = 0; at < bytes.size(); at += piece) {
        json::object o;
        o["offset"] = at;
        o["data"] = protocol::base64_encode(bytes.substr(at, piece));
        r = peer.command("update_data", json::serialize(o));
        if (!ok(r))
            return r;
    }
    return r;
}

} // namespace

TEST_CASE("update over the link: every refusal keeps the old agent and never runs the offered "
          "build — a good one replaces it and restarts as the new version",
          "[agent][integration][update]") {
    const auto flavour = test_support::each_agent();
    INFO(flavour);
    const bool python = flavour == test_support::agent_flavour::python;
    temp_dir dir;
    // The agent as installed on a device, in a folder of the test's own; the later build: the
    // C++ agent's, or the Python agent's script with a later version.
    const fs::path exe = dir.path / (python ? "perfwire_agent.py" : "perfwire-agent");
    fs::copy_file(python ? PERFWIRE_PYTHON_AGENT : test_support::agent_bin(), exe);
    const std::string old_bytes = file_bytes(exe);
    std::string next = file_bytes(python ? PERFWIRE_PYTHON_AGENT : PERFWIRE_AGENT_NEXT_BIN);
    if (python) {
        const std::string line = "VERSION = \"" PERFWIRE_VERSION "\"";
        const auto at = next.find(line);
        REQUIRE(at != std::string::npos);
        next.replace(at, line.size(), "VERSION = \"" PERFWIRE_VERSION ".1\"");
    }
    REQUIRE(next.size() > 50000);
    // A build that leaves a marker file the moment it runs (its --version then says something
    // else, so even when it is run it is not installed).
    const fs::path marker = dir.path / "the offered build ran";
    const std::string marking =
        python ? "import sys\nopen(" + json::serialize(json::value(marker.string())) +
                     ", 'w').write('ran')\nprint('not an agent')\n"
               : "#!/bin/sh\necho ran > '" + marker.string() + "'\necho 'not an agent'\n";
    auto start = [&](std::vector<std::string> args) {
        if (python)
            args.insert(args.begin(), exe.string());
        return std::make_unique<spawned>(python ? PERFWIRE_PYTHON : exe.string(), args);
    };
    const std::string sum = protocol::sha256_hex(next);
    const std::string marking_sum = protocol::sha256_hex(marking);
    const auto signing = make_key(dir.path / "update.key");
    const auto* key = &signing;
    const auto other = make_key(dir.path / "another.key");
    // The public key as the agent takes it: the text itself, or a file holding it.
    const std::string pubkey = signing.public_key;
    const fs::path key_file = dir.path / "update.pub";
    std::ofstream(key_file) << pubkey << "\n";
    const std::string arch = python ? "python" : "x86_64";
    // The agent's file of an update under way: .<name>.update-<pid>-<n>.
    auto partial_files = [&] {
        int n = 0;
        for (const auto& e : fs::directory_iterator(dir.path))
            n +=
                e.path().filename().string().starts_with("." + exe.filename().string() + ".update");
        return n;
    };
    auto untouched = [&] {
        CHECK(file_bytes(exe) == old_bytes);
        CHECK(partial_files() == 0);
        CHECK_FALSE(fs::exists(marker));
    };

    {
        INFO("an agent started with --no-update takes no update");
        listener l;
        auto agent = start({"--server", "127.0.0.1:" + std::to_string(l.port()), "--token", code,
                            "--no-update", "--update-pubkey", key_file.string()});
        auto peer = accept_agent(l);
        CHECK(read_hello(peer).updates == std::optional<std::string>("disabled"));
        REQUIRE(ok(peer.command("auth", R"({"token":")" + code + R"("})")));
        CHECK_THAT(error_of(peer.command("update", offer(arch, sum, next.size(), key))),
                   Catch::Contains("--no-update"));
        untouched();
    }
    {
        INFO("nor one given no key to check updates with and no pinned link, whoever signed "
             "them");
        listener l;
        auto agent = start({"--server", "127.0.0.1:" + std::to_string(l.port()), "--token", code});
        auto peer = accept_agent(l);
        const auto h = read_hello(peer);
        CHECK(h.update_arch == std::optional<std::string>(arch));
        CHECK(h.updates == std::optional<std::string>("needs-key"));
        REQUIRE(ok(peer.command("auth", R"({"token":")" + code + R"("})")));
        const auto status = peer.command("status");
        CHECK(status->fields.at("update").as_string() == "refused");
        CHECK(status->fields.at("update_policy").as_string() == "needs-key");
        for (const auto* signed_by : {static_cast<const protocol::tls::signing_key*>(nullptr), key})
            CHECK_THAT(error_of(peer.command("update",
                                             offer(arch, marking_sum, marking.size(), signed_by))),
                       Catch::Contains("--update-pubkey"));
        // Refused by its policy before anything in the offer is judged.
        for (const auto* bad : {R"({"size":"x"})", R"({"size":-1,"arch":"vax"})", "{}"})
            CHECK_THAT(error_of(peer.command("update", bad)), Catch::Contains("--update-pubkey"));
        CHECK_THAT(error_of(peer.command("update_data", R"({"offset":0,"data":"AAAA"})")),
                   Catch::Contains("no update offered"));
        CHECK_THAT(error_of(peer.command("update_apply", "{}")),
                   Catch::Contains("no update offered"));
        untouched();
    }

    {
        INFO("an update under way goes with its connection, and a second offer replaces it");
        listener l;
        auto agent = start({"--server", "127.0.0.1:" + std::to_string(l.port()), "--token", code,
                            "--update-pubkey", pubkey});
        auto peer = std::make_optional(accept_agent(l));
        read_hello(*peer);
        REQUIRE(ok(peer->command("auth", R"({"token":")" + code + R"("})")));
        REQUIRE(ok(peer->command("update", offer(arch, sum, next.size(), key))));
        REQUIRE(ok(send_pieces(*peer, std::string_view(next).substr(0, 4096))));
        CHECK(partial_files() == 1);
        REQUIRE(ok(peer->command("update", offer(arch, sum, next.size(), key))));
        CHECK(partial_files() == 1);
        CHECK_THAT(error_of(peer->command("update_data", R"({"offset":4096,"data":"AAAA"})")),
                   Catch::Contains("offset 0"));
        REQUIRE(ok(peer->command("update", offer(arch, sum, next.size(), key))));
        REQUIRE(ok(send_pieces(*peer, std::string_view(next).substr(0, 4096))));
        peer.reset(); // the collector goes
        for (int i = 0; i < 100 && partial_files() > 0; ++i)
            std::this_thread::sleep_for(50ms);
        untouched();
    }

    listener l;
    auto agent = start({"--server", "127.0.0.1:" + std::to_string(l.port()), "--token", code,
                        "--update-pubkey", key_file.string()});
    auto peer = accept_agent(l);
    const auto before = read_hello(peer);
    CHECK(before.agent_version == std::optional<std::string>(PERFWIRE_VERSION));
    CHECK(before.updates == std::optional<std::string>("signed"));
    CHECK_THAT(error_of(peer.command("update", offer(arch, sum, next.size(), key))),
               Catch::Contains("unauthenticated"));
    REQUIRE(ok(peer.command("auth", R"({"token":")" + code + R"("})")));
    CHECK(peer.command("status")->fields.at("update").as_string() == "signed");

    // Refused at the offer, before a byte is received: another architecture, unsigned, signed
    // with another key, a signature moved onto another version or size, a build no later than
    // the agent's own however well signed (an older signature replayed), too large.
    CHECK_THAT(error_of(peer.command("update",
                                     offer(python ? "x86_64" : "aarch64", sum, next.size(), key))),
               Catch::Contains("wrong architecture"));
    CHECK_THAT(error_of(peer.command("update", offer(arch, sum, next.size()))),
               Catch::Contains("signed"));
    CHECK_THAT(error_of(peer.command("update", offer(arch, sum, next.size(), &other))),
               Catch::Contains("bad signature"));
    {
        auto moved = json::parse(offer(arch, sum, next.size(), key, PERFWIRE_VERSION ".1"));
        moved.as_object()["version"] = PERFWIRE_VERSION ".2";
        CHECK_THAT(error_of(peer.command("update", json::serialize(moved))),
                   Catch::Contains("bad signature"));
        moved.as_object()["version"] = PERFWIRE_VERSION ".1";
        moved.as_object()["size"] = next.size() + 1;
        CHECK_THAT(error_of(peer.command("update", json::serialize(moved))),
                   Catch::Contains("bad signature"));
    }
    for (const std::string older : {PERFWIRE_VERSION, "0.0.9"})
        CHECK_THAT(error_of(peer.command("update", offer(arch, sum, next.size(), key, older))),
                   Catch::Contains("is not later than this agent's " PERFWIRE_VERSION));
    CHECK_THAT(error_of(peer.command("update", offer(arch, sum, 128u << 20, key))),
               Catch::Contains("size"));
    {
        INFO("a version or sha256 with a line break is refused, signed or not");
        auto bent = json::parse(offer(arch, sum, next.size(), key));
        bent.as_object()["version"] = PERFWIRE_VERSION ".1\n";
        CHECK_THAT(error_of(peer.command("update", json::serialize(bent))),
                   Catch::Contains("version must be"));
        bent.as_object()["version"] = PERFWIRE_VERSION ".1";
        bent.as_object()["sha256"] = sum + "\n";
        CHECK_THAT(error_of(peer.command("update", json::serialize(bent))),
                   Catch::Contains("sha256 must be"));
    }
    untouched();

    // The offer is signed for one checksum, the bytes (the marking build) have another: refused
    // at the apply, and never run.
    REQUIRE(ok(peer.command("update", offer(arch, sum, marking.size(), key))));
    REQUIRE(ok(send_pieces(peer, marking)));
    CHECK_THAT(error_of(peer.command("update_apply", "{}", 60s)),
               Catch::Contains("checksum mismatch"));
    untouched();

    // Pieces out of order, more than offered, not base64, and an apply before the end.
    REQUIRE(ok(peer.command("update", offer(arch, sum, next.size(), key))));
    CHECK_THAT(error_of(peer.command("update_data", R"({"offset":4096,"data":"AAAA"})")),
               Catch::Contains("offset 0"));
    REQUIRE(ok(peer.command("update", offer(arch, sum, next.size(), key))));
    CHECK_THAT(error_of(peer.command("update_data", R"({"offset":0,"data":"not base64!"})")),
               Catch::Contains("base64"));
    CHECK(partial_files() == 0); // a bad piece ends its offer, file and all
    REQUIRE(ok(peer.command("update", offer(arch, sum, next.size(), key))));
    CHECK_THAT(error_of(peer.command("update_data", R"({"data":"AAAA"})")),
               Catch::Contains("needs offset"));
    CHECK(partial_files() == 0);
    CHECK_THAT(error_of(peer.command("update_data", R"({"offset":0,"data":"AAAA"})")),
               Catch::Contains("no update offered"));
    REQUIRE(ok(peer.command("update", offer(arch, sum, 3, key))));
    CHECK_THAT(error_of(peer.command("update_data", R"({"offset":0,"data":"AAAAAA=="})")),
               Catch::Contains("more bytes"));
    REQUIRE(ok(peer.command("update", offer(arch, sum, next.size(), key))));
    REQUIRE(ok(send_pieces(peer, std::string_view(next).substr(0, 1000))));
    CHECK_THAT(error_of(peer.command("update_apply", "{}", 60s)), Catch::Contains("received 1000"));
    untouched();
    CHECK(ok(peer.command("ping")));
    CHECK_FALSE(agent->wait(0ms));

    // Signed with the key, the marking build is run to check it (so the marker would have
    // shown any run before), and refused for what it says.
    REQUIRE(ok(peer.command("update", offer(arch, marking_sum, marking.size(), key))));
    REQUIRE(ok(send_pieces(peer, marking)));
    CHECK_THAT(error_of(peer.command("update_apply", "{}", 60s)),
               Catch::Contains("does not run here"));
    CHECK(fs::exists(marker));
    CHECK(file_bytes(exe) == old_bytes);
    fs::remove(marker);

    // The real thing.
    REQUIRE(ok(peer.command("update", offer(arch, sum, next.size(), key))));
    REQUIRE(ok(send_pieces(peer, next)));
    const auto applied = peer.command("update_apply", "{}", 60s);
    INFO(agent->stderr_text());
    REQUIRE(ok(applied));
    CHECK(applied->fields.at("version").as_string() == PERFWIRE_VERSION ".1");
    CHECK(file_bytes(exe) == next);
    // The same process, now the new build: it dials again and says so.
    auto again = accept_agent(l);
    const auto after = read_hello(again);
    CHECK(after.agent_version == std::optional<std::string>(PERFWIRE_VERSION ".1"));
    CHECK_FALSE(agent->wait(0ms));
    CHECK_THAT(agent->stderr_text(), Catch::Contains("updated to " PERFWIRE_VERSION ".1"));
    REQUIRE(ok(again.command("auth", R"({"token":")" + code + R"("})")));
    CHECK(again.command("status")->fields.at("agent_version").as_string() == PERFWIRE_VERSION ".1");
    // The signature of the build it now runs, replayed: refused.
    CHECK_THAT(error_of(again.command("update", offer(arch, sum, next.size(), key))),
               Catch::Contains("is not later than this agent's " PERFWIRE_VERSION ".1"));
}
