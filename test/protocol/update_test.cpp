// What an agent update offer is judged by (protocol/update.hpp), and the Python agent judging
// it the same way: its later_version, version rule and signed text against the C++ ones.
#include "collector/symbols/subprocess.hpp"
#include "protocol/digest.hpp"
#include "protocol/tls.hpp"
#include "protocol/update.hpp"
#include "support/fixtures.hpp"

#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace {

struct pair_case {
    const char* candidate;
    const char* current;
};

const std::vector<pair_case> version_pairs = {
    {"0.1.0.1", "0.1.0"},
    {"0.1.0", "0.1.0.1"},
    {"0.1.0", "0.1.0"},
    {"0.1", "0.1.0"},
    {"0.10.0", "0.9.9"},
    {"1", "0.99.99"},
    {"", "0.1"},
    {"0.1", ""},
    {"0.1.0.-", "0.1.0"},
    {"0.1.0", "0.1.0.-"},
    {"0.5.0-rc1", "0.5.0"},
    {"0.1.", "0.1"},
    {"0.1.a", "0.1.b"},
    {"1.0", "1.0.0.0"},
    {"0.1.0", "0.01.0"},
    {"2", "10"},
};

const std::vector<const char*> versions = {
    "0.1.0", "0.1.0.1", "1",    "10.20.30", "0.5.0-rc1",
    "0.1.",  ".1",      "0..1", "0.1.0\n",  "1234567890123456789",
    "",      "0.1a"};

} // namespace

namespace {

// Ed25519 keys of small order (y = 0, 1, the two points of order 8, p - 1, p, p + 1), each
// also with the sign bit set; and the base point, which is not one.
const std::vector<std::string> weak_keys = {"ed25519:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=",
                                            "ed25519:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAIA=",
                                            "ed25519:AQAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=",
                                            "ed25519:AQAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAIA=",
                                            "ed25519:JuiVj8KyJ7BFw/SJ8u+Y8NXfrAXTxjM5sTgCiG1T/AU=",
                                            "ed25519:JuiVj8KyJ7BFw/SJ8u+Y8NXfrAXTxjM5sTgCiG1T/IU=",
                                            "ed25519:xxdqcD1N2E+6PAt2DRBnDyogU/osOczGTsf9d5KsA3o=",
                                            "ed25519:xxdqcD1N2E+6PAt2DRBnDyogU/osOczGTsf9d5KsA/o=",
                                            "ed25519:7P///////////////////////////////////////38=",
                                            "ed25519:7P////////////////////////////////////////8=",
                                            "ed25519:7f///////////////////////////////////////38=",
                                            "ed25519:7f////////////////////////////////////////8=",
                                            "ed25519:7v///////////////////////////////////////38=",
                                            "ed25519:7v////////////////////////////////////////8="};
const std::string base_point = "ed25519:WGZmZmZmZmZmZmZmZmZmZmZmZmZmZmZmZmZmZmZmZmY=";

} // namespace

TEST_CASE("update versions: later by dotted numbers, offered only as dotted numbers",
          "[protocol][update]") {
    using protocol::later_version;
    using protocol::update_version;
    CHECK(later_version("0.1.0.1", "0.1.0"));
    CHECK_FALSE(later_version("0.1.0", "0.1.0.1"));
    CHECK_FALSE(later_version("0.1.0", "0.1.0"));
    CHECK_FALSE(later_version("0.1", "0.1.0")); // a missing part is 0
    CHECK(later_version("0.10.0", "0.9.9"));    // numbers, not text
    CHECK_FALSE(later_version("", "0.1"));
    CHECK(update_version("0.1.0.1"));
    CHECK(update_version("10.20.30"));
    for (const char* refused :
         {"", "0.5.0-rc1", "0.1.", ".1", "0..1", "0.1.0\n", "0.1a", "1234567890123456789"})
        CHECK_FALSE(update_version(refused));
    CHECK_FALSE(update_version(std::string(65, '1')));
}

TEST_CASE("the signed text names every field of an offer, one to a line — its Ed25519 "
          "signature holds for that offer and key only",
          "[protocol][update]") {
    const protocol::update_offer o{"0.1.0.1", "aarch64", std::string(64, 'a'), {}, 1234};
    CHECK(protocol::update_signed_text(o) == "perfwire-agent-update-v2\narch=aarch64\n"
                                             "version=0.1.0.1\nsize=1234\nsha256=" +
                                                 std::string(64, 'a') + "\n");
    test_support::temp_dir dir;
    using protocol::tls::signing_key;
    const auto key = std::get<signing_key>(protocol::tls::load_signing_key(dir.path / "k", true));
    const auto again = std::get<signing_key>(protocol::tls::load_signing_key(dir.path / "k", true));
    CHECK(again.public_key == key.public_key); // made once, then loaded
    const auto owner_only =
        std::filesystem::perms::owner_read | std::filesystem::perms::owner_write;
    CHECK((std::filesystem::status(dir.path / "k").permissions() & std::filesystem::perms::all) ==
          owner_only);
    const auto other = std::get<signing_key>(protocol::tls::load_signing_key(dir.path / "o", true));
    const auto sig = protocol::tls::sign(key, protocol::update_signed_text(o));
    CHECK(protocol::tls::verify(key.public_key, protocol::update_signed_text(o), sig));
    auto moved = o;
    moved.size = 1235;
    CHECK_FALSE(protocol::tls::verify(key.public_key, protocol::update_signed_text(moved), sig));
    CHECK_FALSE(protocol::tls::verify(other.public_key, protocol::update_signed_text(o), sig));
    CHECK_FALSE(protocol::tls::verify(key.public_key, protocol::update_signed_text(o), ""));
    CHECK_FALSE(protocol::tls::verify("ed25519:AAAA", protocol::update_signed_text(o), sig));
    CHECK(protocol::tls::parse_public_key(" " + key.public_key + "\n") == key.public_key);
    CHECK_FALSE(
        protocol::tls::parse_public_key("ed25519:" + std::string(42, 'A') + "==")); // 31 bytes
    CHECK_FALSE(protocol::tls::parse_public_key(key.public_key.substr(8)));
    // Keys of small order, in every encoding (the sign bit set or not): any signature would
    // verify under them — R the identity and S = 0 for any message under the identity key.
    for (const auto& weak : weak_keys) {
        INFO(weak);
        CHECK(protocol::tls::weak_public_key(weak));
        CHECK_FALSE(protocol::tls::parse_public_key(weak));
    }
    CHECK_FALSE(protocol::tls::weak_public_key(key.public_key));
    CHECK_FALSE(protocol::tls::weak_public_key(base_point));
    CHECK(protocol::tls::parse_public_key(base_point));
    const std::string forged = "AQ" + std::string(84, 'A') + "=="; // R = (0, 1), S = 0
    CHECK_FALSE(protocol::tls::verify(weak_keys[2], protocol::update_signed_text(o), forged));
    // Not an Ed25519 key: refused with a reason.
    std::ofstream(dir.path / "not-a-key") << "hello\n";
    CHECK(std::holds_alternative<std::string>(
        protocol::tls::load_signing_key(dir.path / "not-a-key", true)));
}

TEST_CASE("the Python agent judges update versions and signs offers as the C++ code does",
          "[protocol][update][python]") {
    // The agent's module loaded as a library (its main() runs only as a script); one line
    // per question.
    std::ostringstream script;
    script << "import importlib.util, sys\n"
              "spec = importlib.util.spec_from_file_location('agent', '"
           << PERFWIRE_PYTHON_AGENT
           << "')\n"
              "a = importlib.util.module_from_spec(spec); spec.loader.exec_module(a)\n";
    for (const auto& p : version_pairs)
        script << "print(a.later_version("
               << "'" << p.candidate << "', '" << p.current << "'))\n";
    for (const char* v : versions) {
        std::string escaped;
        for (char c : std::string(v))
            escaped += c == '\n' ? std::string("\\n") : std::string(1, c);
        script << "print(bool(a.UPDATE_VERSION.match('" << escaped << "')) and len('" << escaped
               << "') <= 64)\n";
    }
    script << "print(a.update_signed_text({'arch': 'aarch64', 'version': '0.1.0.1', 'size': 1234, "
              "'sha256': '"
           << std::string(64, 'a') << "'}).encode().hex())\n";
    for (const auto& weak : weak_keys)
        script << "print(a.weak_public_key('" << weak << "') and a.parse_public_key('" << weak
               << "') is None)\n";
    script << "print(a.parse_public_key('" << base_point << "') is not None and not "
           << "a.weak_public_key('" << base_point << "'))\n";
    const auto ran = collector::run_capture({PERFWIRE_PYTHON, "-c", script.str()});
    INFO(ran.err);
    REQUIRE(ran.code == 0);
    std::istringstream lines(ran.out);
    std::string line;
    for (const auto& p : version_pairs) {
        REQUIRE(std::getline(lines, line));
        INFO("later_version(\"" << p.candidate << "\", \"" << p.current << "\")");
        CHECK((line == "True") == protocol::later_version(p.candidate, p.current));
    }
    for (const char* v : versions) {
        REQUIRE(std::getline(lines, line));
        INFO("version \"" << v << "\"");
        CHECK((line == "True") == protocol::update_version(v));
    }
    REQUIRE(std::getline(lines, line));
    const protocol::update_offer o{"0.1.0.1", "aarch64", std::string(64, 'a'), {}, 1234};
    std::string hex;
    for (unsigned char c : protocol::update_signed_text(o)) {
        constexpr char digits[] = "0123456789abcdef";
        hex += digits[c >> 4];
        hex += digits[c & 15];
    }
    CHECK(line == hex);
    for (const auto& weak : weak_keys) {
        INFO("a weak key refused: " << weak);
        REQUIRE(std::getline(lines, line));
        CHECK(line == "True");
    }
    REQUIRE(std::getline(lines, line));
    CHECK(line == "True"); // the base point is a key
}
