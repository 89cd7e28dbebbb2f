#include "protocol/compression.hpp"

#include <catch2/catch.hpp>

#include <zstd.h>

#include <random>

using namespace protocol;

namespace {

// Text shaped like perf script output, so ratios resemble the real thing.
std::string perf_like_text(std::size_t lines) {
    std::string s;
    std::mt19937 rng(7);
    for (std::size_t i = 0; i < lines; ++i) {
        s += "demo 4242/4243 [001] 12345." + std::to_string(100000 + i) + ": 10101010 cpu-clock:\n";
        s += "\t    55d0c0ffee" + std::to_string(rng() % 1000) + " hot_loop+0x1" +
             std::to_string(rng() % 90) + " (/usr/bin/demo)\n\n";
    }
    return s;
}

} // namespace

TEST_CASE("compress then decompress returns the input", "[protocol][zstd]") {
    for (std::size_t lines : {0, 1, 10, 5000}) {
        const std::string text = perf_like_text(lines);
        const std::string packed = compress(text);
        auto back = decompress(packed);
        REQUIRE(back.has_value());
        CHECK(*back == text);
        if (lines == 5000)
            CHECK(packed.size() * 5 < text.size());
    }
}

TEST_CASE("streaming compressor output decompresses to what was written", "[protocol][zstd]") {
    const std::string text = perf_like_text(20000); // ~2 MB, beyond one zstd block
    zstd_compressor c;
    std::size_t pos = 0;
    std::size_t piece = 1;
    while (pos < text.size()) {
        const std::size_t n = std::min(piece, text.size() - pos);
        c.write(std::string_view(text).substr(pos, n));
        pos += n;
        piece = piece * 3 + 1; // a spread of write sizes
    }
    CHECK(c.input_bytes() == text.size());
    // Output accumulates while writing: the whole chunk is never held uncompressed.
    CHECK(c.output_bytes() < text.size() / 4);
    const std::string first = c.finish();
    CHECK(c.input_bytes() == 0);
    // No content size is declared for a streamed frame: the bounded path must cope.
    CHECK(ZSTD_getFrameContentSize(first.data(), first.size()) == ZSTD_CONTENTSIZE_UNKNOWN);
    auto back = decompress(first);
    REQUIRE(back.has_value());
    CHECK(*back == text);

    SECTION("the compressor is reusable for the next chunk") {
        c.write("second chunk\n");
        const auto small = c.finish();
        // A small chunk costs its bytes, not zstd's 128 KiB output block (a flight recorder
        // keeps a minute of them).
        CHECK(small.capacity() < 256);
        auto again = decompress(small);
        REQUIRE(again.has_value());
        CHECK(*again == "second chunk\n");
    }
}

TEST_CASE("a zstd bomb is refused", "[protocol][zstd]") {
    const std::string zeros(8u << 20, '\0'); // 8 MiB that compresses to a few hundred bytes
    SECTION("declared size over the cap") {
        const std::string packed = compress(zeros);
        CHECK(packed.size() < 4096);
        auto r = decompress(packed, 1u << 20);
        REQUIRE(r.has_error());
        CHECK(r.error() == errc::zstd_too_large);
    }
    SECTION("no declared size: refused once output passes the cap") {
        zstd_compressor c;
        c.write(zeros);
        const std::string packed = c.finish();
        auto r = decompress(packed, 1u << 20);
        REQUIRE(r.has_error());
        CHECK(r.error() == errc::zstd_too_large);
        // The same frame is fine under a cap that fits it.
        auto ok = decompress(packed, zeros.size());
        REQUIRE(ok.has_value());
        CHECK(ok->size() == zeros.size());
    }
}

TEST_CASE("corrupt and truncated zstd input is an error", "[protocol][zstd]") {
    const std::string text = perf_like_text(2000);
    const std::string packed = compress(text);

    SECTION("not zstd at all") {
        CHECK(decompress("main 123 cpu-clock").error() == errc::zstd_corrupt);
        CHECK(decompress("ab").error() == errc::zstd_corrupt);
    }
    SECTION("truncated at every tenth of its length") {
        for (int tenth = 0; tenth < 10; ++tenth) {
            const auto cut = packed.size() * tenth / 10;
            auto r = decompress(std::string_view(packed).substr(0, cut));
            REQUIRE(r.has_error());
            CHECK(r.error() == errc::zstd_truncated);
        }
        CHECK(decompress(std::string_view(packed).substr(0, packed.size() - 1)).error() ==
              errc::zstd_truncated);
    }
    SECTION("a flipped byte in the body is detected") {
        std::string bad = packed;
        bad[bad.size() / 2] = static_cast<char>(bad[bad.size() / 2] ^ 0x55);
        auto r = decompress(bad);
        REQUIRE(r.has_error());
        CHECK(r.error() == errc::zstd_corrupt);
    }
    SECTION("trailing garbage after the frame") {
        auto r = decompress(packed + "garbage!");
        REQUIRE(r.has_error());
        CHECK(r.error() == errc::zstd_corrupt);
    }
}
