#include "protocol/pairing.hpp"

#include <catch2/catch.hpp>

#include <set>

using namespace protocol;

TEST_CASE("pairing codes are 32 lowercase hex characters and differ", "[protocol][pairing]") {
    std::set<std::string> seen;
    for (int i = 0; i < 64; ++i) {
        const std::string code = generate_pairing_code();
        REQUIRE(code.size() == 32);
        for (char c : code)
            CHECK(((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')));
        seen.insert(code);
    }
    CHECK(seen.size() == 64);
}

TEST_CASE("constant-time comparison is exact", "[protocol][pairing]") {
    const std::string code = "0123456789abcdef0123456789abcdef";
    CHECK(constant_time_equal(code, code));
    CHECK_FALSE(constant_time_equal(code, "0123456789abcdef0123456789abcdee"));
    CHECK_FALSE(constant_time_equal(code, "1123456789abcdef0123456789abcdef"));
    CHECK_FALSE(constant_time_equal(code, code.substr(0, 31)));
    CHECK_FALSE(constant_time_equal(code, code + "0"));
    CHECK_FALSE(constant_time_equal(code, code + code)); // cyclic walk must not match
    CHECK_FALSE(constant_time_equal(code, ""));
    CHECK_FALSE(constant_time_equal("", "")); // an empty secret matches nothing
}
