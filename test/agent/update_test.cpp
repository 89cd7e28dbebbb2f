// Agent updates over the link, against the real agent on loopback: a framing peer plays the
// collector. Refusals (unpaired, --no-update, another architecture, unsigned, a wrong
// checksum or signature, pieces out of order) each leave the old agent running and its
// executable untouched; a good update replaces the executable, restarts the agent in the same
// process and it says hello again with the new version.
#include "protocol/digest.hpp"
#include "support/agents.hpp"
#include "support/fixtures.hpp"
#include "support/framing_peer.hpp"
#include "support/spawn.hpp"

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
const std::string key = "an update key of this test, 32 b";

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

std::string offer(const std::string& arch, const std::string& sha256, std::size_t size,
                  const std::string& signature = {}) {
    json::object o;
    o["version"] = PERFWIRE_VERSION ".1";
    o["arch"] = arch;
    o["size"] = size;
    o["sha256"] = sha256;
    if (!signature.empty())
        o["signature"] = signature;
    return json::serialize(o);
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

TEST_CASE("update over the link: every refusal keeps the old agent and a good build replaces it "
          "and restarts as the new version",
          "[agent][integration][update]") {
    const auto flavour = test_support::each_agent();
    INFO(flavour);
    const bool python = flavour == test_support::agent_flavour::python;
    temp_dir dir;
    // The agent as installed on a device, in a folder of the test's own; the later build: the
    // C++ agent's, or the Python agent's script with a later version.
    const fs::path exe = dir.path / (python ? "perfwire_agent.py" : "perfwire-agent");
    fs::copy_file(python ? PERFWIRE_PYTHON_AGENT : PERFWIRE_AGENT_BIN, exe);
    const std::string old_bytes = file_bytes(exe);
    std::string next = file_bytes(python ? PERFWIRE_PYTHON_AGENT : PERFWIRE_AGENT_NEXT_BIN);
    if (python) {
        const std::string line = "VERSION = \"" PERFWIRE_VERSION "\"";
        const auto at = next.find(line);
        REQUIRE(at != std::string::npos);
        next.replace(at, line.size(), "VERSION = \"" PERFWIRE_VERSION ".1\"");
    }
    REQUIRE(next.size() > 50000);
    auto start = [&](std::vector<std::string> args) {
        if (python)
            args.insert(args.begin(), exe.string());
        return std::make_unique<spawned>(python ? PERFWIRE_PYTHON : exe.string(), args);
    };
    const std::string sum = protocol::sha256_hex(next);
    const std::string signature = protocol::hmac_sha256_hex(key, sum);
    const fs::path key_file = dir.path / "update.key";
    std::ofstream(key_file) << key << "\n";
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
    };

    {
        INFO("an agent started without a pairing code takes no update");
        listener l;
        auto agent = start({"--server", "127.0.0.1:" + std::to_string(l.port())});
        auto peer = accept_agent(l);
        CHECK(read_hello(peer).update_arch == std::optional<std::string>(arch));
        CHECK(peer.command("status")->fields.at("update").as_string() == "refused");
        CHECK_THAT(error_of(peer.command("update", offer(arch, sum, next.size()))),
                   Catch::Contains("pairing code"));
        untouched();
    }
    {
        INFO("nor one started with --no-update");
        listener l;
        auto agent = start(
            {"--server", "127.0.0.1:" + std::to_string(l.port()), "--token", code, "--no-update"});
        auto peer = accept_agent(l);
        read_hello(peer);
        REQUIRE(ok(peer.command("auth", R"({"token":")" + code + R"("})")));
        CHECK_THAT(error_of(peer.command("update", offer(arch, sum, next.size()))),
                   Catch::Contains("--no-update"));
        untouched();
    }

    {
        INFO("an update under way goes with its connection, and a second offer replaces it");
        listener l;
        auto agent = start({"--server", "127.0.0.1:" + std::to_string(l.port()), "--token", code});
        auto peer = std::make_optional(accept_agent(l));
        read_hello(*peer);
        REQUIRE(ok(peer->command("auth", R"({"token":")" + code + R"("})")));
        CHECK(peer->command("status")->fields.at("update").as_string() == "checksum");
        REQUIRE(ok(peer->command("update", offer(arch, sum, next.size()))));
        REQUIRE(ok(send_pieces(*peer, std::string_view(next).substr(0, 4096))));
        CHECK(partial_files() == 1);
        REQUIRE(ok(peer->command("update", offer(arch, sum, next.size()))));
        CHECK(partial_files() == 1);
        CHECK_THAT(error_of(peer->command("update_data", R"({"offset":4096,"data":"AAAA"})")),
                   Catch::Contains("offset 0"));
        REQUIRE(ok(peer->command("update", offer(arch, sum, next.size()))));
        REQUIRE(ok(send_pieces(*peer, std::string_view(next).substr(0, 4096))));
        peer.reset(); // the collector goes
        for (int i = 0; i < 100 && partial_files() > 0; ++i)
            std::this_thread::sleep_for(50ms);
        untouched();
    }

    listener l;
    auto agent = start({"--server", "127.0.0.1:" + std::to_string(l.port()), "--token", code,
                        "--update-key", key_file.string()});
    auto peer = accept_agent(l);
    const auto before = read_hello(peer);
    CHECK(before.agent_version == std::optional<std::string>(PERFWIRE_VERSION));
    CHECK_THAT(error_of(peer.command("update", offer(arch, sum, next.size(), signature))),
               Catch::Contains("unauthenticated"));
    REQUIRE(ok(peer.command("auth", R"({"token":")" + code + R"("})")));
    CHECK(peer.command("status")->fields.at("update").as_string() == "signed");

    CHECK_THAT(error_of(peer.command(
                   "update", offer(python ? "x86_64" : "aarch64", sum, next.size(), signature))),
               Catch::Contains("wrong architecture"));
    CHECK_THAT(error_of(peer.command("update", offer(arch, sum, next.size()))),
               Catch::Contains("signed"));
    CHECK_THAT(error_of(peer.command("update", offer(arch, sum, 128u << 20, signature))),
               Catch::Contains("size"));
    untouched();

    // The offer names one checksum, the bytes have another.
    const std::string other = protocol::sha256_hex("another build");
    REQUIRE(ok(peer.command(
        "update", offer(arch, other, next.size(), protocol::hmac_sha256_hex(key, other)))));
    REQUIRE(ok(send_pieces(peer, next)));
    CHECK_THAT(error_of(peer.command("update_apply", "{}", 60s)),
               Catch::Contains("checksum mismatch"));
    untouched();

    // Signed with another key.
    REQUIRE(ok(peer.command(
        "update", offer(arch, sum, next.size(), protocol::hmac_sha256_hex("not the key", sum)))));
    REQUIRE(ok(send_pieces(peer, next)));
    CHECK_THAT(error_of(peer.command("update_apply", "{}", 60s)), Catch::Contains("signature"));
    untouched();

    // Pieces out of order, more than offered, not base64, and an apply before the end.
    REQUIRE(ok(peer.command("update", offer(arch, sum, next.size(), signature))));
    CHECK_THAT(error_of(peer.command("update_data", R"({"offset":4096,"data":"AAAA"})")),
               Catch::Contains("offset 0"));
    REQUIRE(ok(peer.command("update", offer(arch, sum, next.size(), signature))));
    CHECK_THAT(error_of(peer.command("update_data", R"({"offset":0,"data":"not base64!"})")),
               Catch::Contains("base64"));
    REQUIRE(ok(peer.command("update", offer(arch, sum, 3, signature))));
    CHECK_THAT(error_of(peer.command("update_data", R"({"offset":0,"data":"AAAAAA=="})")),
               Catch::Contains("more bytes"));
    REQUIRE(ok(peer.command("update", offer(arch, sum, next.size(), signature))));
    REQUIRE(ok(send_pieces(peer, std::string_view(next).substr(0, 1000))));
    CHECK_THAT(error_of(peer.command("update_apply", "{}", 60s)), Catch::Contains("received 1000"));
    untouched();
    CHECK(ok(peer.command("ping")));
    CHECK_FALSE(agent->wait(0ms));

    // The real thing.
    REQUIRE(ok(peer.command("update", offer(arch, sum, next.size(), signature))));
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
}
