#include "protocol/frame.hpp"

#include <catch2/catch.hpp>

#include <random>
#include <vector>

using namespace protocol;

namespace {

std::vector<frame> drain(frame_decoder& d) {
    std::vector<frame> out;
    for (;;) {
        auto r = d.next();
        REQUIRE(r.has_value());
        if (!*r)
            return out;
        out.push_back(std::move(**r));
    }
}

// Three frames of different types, with a zero-length keep-alive between them.
const std::vector<frame> sample_frames = {
    {frame_flag::response, R"({"type":"hello","version":1,"agent":"perfwire"})"},
    {frame_flag::text, std::string(3000, 'x') + "\nmain 1 [000] 1.0: 1 cpu-clock:\n"},
    {frame_flag::metrics, R"({"type":"system"})"},
};

std::string sample_stream() {
    std::string s;
    s += encode_frame(sample_frames[0].flag, sample_frames[0].payload);
    s += encode_frame(frame_flag::metrics, "");
    s += encode_frame(sample_frames[1].flag, sample_frames[1].payload);
    s += encode_frame(sample_frames[2].flag, sample_frames[2].payload);
    return s;
}

void check_frames(const std::vector<frame>& got) {
    REQUIRE(got.size() == sample_frames.size());
    for (std::size_t i = 0; i < got.size(); ++i) {
        CHECK(got[i].flag == sample_frames[i].flag);
        CHECK(got[i].payload == sample_frames[i].payload);
    }
}

} // namespace

TEST_CASE("header is big-endian length then flag", "[protocol][frame]") {
    const auto h = encode_header(frame_flag::zstd, 0x01020304);
    CHECK(std::string(h.data(), h.size()) == std::string("\x01\x02\x03\x04\x01", 5));
    const auto f = encode_frame(frame_flag::command, "ab");
    CHECK(f == std::string("\0\0\0\x02\x02"
                           "ab",
                           7));
}

TEST_CASE("decoder yields frames from a stream fed whole", "[protocol][frame]") {
    frame_decoder d(collector_max_frame);
    d.feed(sample_stream());
    check_frames(drain(d));
    CHECK(!d.finish());
}

TEST_CASE("decoder yields the same frames under every two-way split", "[protocol][frame]") {
    const std::string s = sample_stream();
    for (std::size_t cut = 0; cut <= s.size(); ++cut) {
        frame_decoder d(collector_max_frame);
        d.feed(std::string_view(s).substr(0, cut));
        auto got = drain(d);
        d.feed(std::string_view(s).substr(cut));
        auto rest = drain(d);
        got.insert(got.end(), rest.begin(), rest.end());
        check_frames(got);
        CHECK(!d.finish());
    }
}

TEST_CASE("decoder handles a byte at a time and random splits", "[protocol][frame]") {
    const std::string s = sample_stream();
    SECTION("byte at a time") {
        frame_decoder d(collector_max_frame);
        std::vector<frame> got;
        for (char c : s) {
            d.feed(std::string_view(&c, 1));
            auto part = drain(d);
            got.insert(got.end(), part.begin(), part.end());
        }
        check_frames(got);
    }
    SECTION("random splits") {
        std::mt19937 rng(12345);
        for (int trial = 0; trial < 200; ++trial) {
            frame_decoder d(collector_max_frame);
            std::vector<frame> got;
            std::size_t pos = 0;
            while (pos < s.size()) {
                const std::size_t n = std::min<std::size_t>(s.size() - pos, 1 + rng() % 700);
                d.feed(std::string_view(s).substr(pos, n));
                pos += n;
                auto part = drain(d);
                got.insert(got.end(), part.begin(), part.end());
            }
            check_frames(got);
            CHECK(!d.finish());
        }
    }
}

TEST_CASE("zero-length frames are skipped", "[protocol][frame]") {
    frame_decoder d(agent_max_frame);
    d.feed(encode_frame(frame_flag::command, "") + encode_frame(frame_flag::text, ""));
    CHECK(drain(d).empty());
    CHECK(!d.finish());
}

TEST_CASE("unknown flag is an error after the frames before it", "[protocol][frame]") {
    frame_decoder d(collector_max_frame);
    std::string s = encode_frame(frame_flag::text, "ok");
    s += std::string("\0\0\0\x01\x06"
                     "z",
                     6);
    s += encode_frame(frame_flag::text, "never");
    d.feed(s);
    auto first = d.next();
    REQUIRE(first.has_value());
    REQUIRE(first->has_value());
    CHECK((*first)->payload == "ok");
    auto second = d.next();
    REQUIRE(second.has_error());
    CHECK(second.error() == errc::unknown_flag);
    // The error is sticky: nothing after it is decoded.
    d.feed(encode_frame(frame_flag::text, "more"));
    CHECK(d.next().error() == errc::unknown_flag);
}

TEST_CASE("oversized length is refused before any payload is stored", "[protocol][frame]") {
    SECTION("agent limit: 1 MiB + 1") {
        frame_decoder d(agent_max_frame);
        d.feed(std::string_view(encode_header(frame_flag::command, agent_max_frame + 1).data(),
                                header_size));
        CHECK(d.next().error() == errc::frame_too_large);
        d.feed(std::string(4096, 'a'));
        CHECK(d.pending_bytes() == header_size); // nothing appended after the refusal
    }
    SECTION("exactly the limit is accepted") {
        frame_decoder d(agent_max_frame);
        d.feed(encode_frame(frame_flag::command, std::string(agent_max_frame, 'a')));
        auto r = d.next();
        REQUIRE(r.has_value());
        REQUIRE(r->has_value());
        CHECK((*r)->payload.size() == agent_max_frame);
    }
    SECTION("4 GiB - 1 declared to the collector") {
        frame_decoder d(collector_max_frame);
        d.feed(std::string("\xff\xff\xff\xff\x01", 5));
        CHECK(d.next().error() == errc::frame_too_large);
        CHECK(d.pending_bytes() == header_size);
    }
}

TEST_CASE("payload storage grows only with bytes received", "[protocol][frame]") {
    frame_decoder d(collector_max_frame);
    d.feed(std::string_view(encode_header(frame_flag::text, 100u << 20).data(), header_size));
    d.feed("abc");
    CHECK(d.pending_bytes() == 3);
    CHECK(d.next()->has_value() == false);
    CHECK(d.finish() == errc::truncated_frame);
}

TEST_CASE("a stream that stops inside a frame is truncated", "[protocol][frame]") {
    const std::string s = sample_stream();
    for (std::size_t cut : {std::size_t{1}, std::size_t{4}, std::size_t{5}, s.size() - 1}) {
        frame_decoder d(collector_max_frame);
        d.feed(std::string_view(s).substr(0, cut));
        drain(d);
        CHECK(d.finish() == errc::truncated_frame);
    }
}

TEST_CASE("error messages name the problem", "[protocol][error]") {
    const boost::system::error_code ec = errc::frame_too_large;
    CHECK(ec.category().name() == std::string("perfwire.protocol"));
    CHECK(ec.message() == "frame length exceeds limit");
    CHECK(std::string(to_string(frame_flag::zstd)) == "zstd");
}

TEST_CASE("the first frame has its own limit, checked on its header", "[protocol][frame]") {
    frame_decoder first_too_big(1000, 16);
    first_too_big.feed(std::string("\x00\x00\x00\x11\x03", 5)); // 17 bytes declared, none sent
    auto r = first_too_big.next();
    REQUIRE(r.has_error());
    CHECK(r.error() == errc::frame_too_large);

    // After the first frame, the larger limit: both frames in one read.
    frame_decoder d(1000, 16);
    d.feed(encode_frame(frame_flag::response, "hello") +
           encode_frame(frame_flag::text, std::string(500, 'x')));
    auto a = d.next();
    REQUIRE(a.has_value());
    REQUIRE(*a);
    CHECK((*a)->payload == "hello");
    auto b = d.next();
    REQUIRE(b.has_value());
    REQUIRE(*b);
    CHECK((*b)->payload.size() == 500);
}

TEST_CASE("a run's chunk carries its run and number before the zstd data", "[protocol][frame]") {
    const std::string run = "0123456789abcdef0011223344556677";
    const auto bytes = encode_sequenced(run, 0x0102030405060708ull, "zstd-data");
    frame_decoder d(collector_max_frame);
    d.feed(bytes);
    auto f = d.next();
    REQUIRE(f.has_value());
    REQUIRE(f->has_value());
    CHECK((*f)->flag == frame_flag::sequenced);
    CHECK((*f)->payload.size() == sequence_size + 9);
    CHECK((*f)->payload.substr(16, 8) == std::string("\x01\x02\x03\x04\x05\x06\x07\x08", 8));
    const auto c = split_sequenced((*f)->payload);
    REQUIRE(c);
    CHECK(c->run == run);
    CHECK(c->seq == 0x0102030405060708ull);
    CHECK(c->chunk == "zstd-data");
    // Too short to hold a chunk, or numbered 0: not a chunk.
    CHECK_FALSE(split_sequenced((*f)->payload.substr(0, sequence_size)));
    auto zero = encode_sequenced(run, 0, "x");
    CHECK_FALSE(split_sequenced(std::string_view(zero).substr(header_size)));
}
