#include "protocol/digest.hpp"

#include <catch2/catch.hpp>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

using namespace protocol;

TEST_CASE("sha256 matches the FIPS 180-4 examples and sha256sum", "[protocol][digest]") {
    CHECK(sha256_hex("") == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    CHECK(sha256_hex("abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    CHECK(sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq") ==
          "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
    // A million 'a's fed in uneven pieces: blocks split across calls.
    sha256 h;
    const std::string piece(997, 'a');
    std::size_t fed = 0;
    while (fed + piece.size() <= 1'000'000) {
        h.update(piece);
        fed += piece.size();
    }
    h.update(std::string(1'000'000 - fed, 'a'));
    CHECK(h.finish_hex() == "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");

    // A real binary, as coreutils sums it.
    std::ifstream in(PERFWIRE_AGENT_BIN, std::ios::binary);
    std::stringstream bytes;
    bytes << in.rdbuf();
    std::string expected;
    if (FILE* p = ::popen("sha256sum '" PERFWIRE_AGENT_BIN "'", "r")) {
        char buf[65] = {};
        if (std::fread(buf, 1, 64, p) == 64)
            expected = buf;
        ::pclose(p);
    }
    REQUIRE(expected.size() == 64);
    CHECK(sha256_hex(bytes.str()) == expected);
}

TEST_CASE("base64 round-trips and refuses what is not canonical", "[protocol][digest]") {
    const std::pair<const char*, const char*> rfc[] = {{"", ""},
                                                       {"f", "Zg=="},
                                                       {"fo", "Zm8="},
                                                       {"foo", "Zm9v"},
                                                       {"foob", "Zm9vYg=="},
                                                       {"fooba", "Zm9vYmE="},
                                                       {"foobar", "Zm9vYmFy"}};
    for (const auto& [plain, coded] : rfc) {
        CHECK(base64_encode(plain) == coded);
        CHECK(base64_decode(coded) == std::optional<std::string>(plain));
    }
    std::string all;
    for (int i = 0; i < 256; ++i)
        all.push_back(static_cast<char>(i));
    CHECK(base64_decode(base64_encode(all)) == all);
    // An agent build's size, over the encoder's blocks: one text, no padding between them.
    std::string build((7 << 20) + 1, '\0');
    for (std::size_t i = 0; i < build.size(); ++i)
        build[i] = static_cast<char>((i * 2654435761u) >> 13);
    const std::string coded = base64_encode(build);
    CHECK(coded.size() == (build.size() + 2) / 3 * 4);
    CHECK(coded.find('=') == coded.size() - 1);
    CHECK(base64_decode(coded) == build);
    for (const char* bad : {"Zm9", "Zm9v!A==", "Zg=a", "Zh==", "Z===", "Zm=v", "Zg==Zg=="})
        CHECK_FALSE(base64_decode(bad));
}
