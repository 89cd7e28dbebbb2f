#include "agent/chunker.hpp"
#include "protocol/compression.hpp"
#include "support/fixtures.hpp"

#include <catch2/catch.hpp>

#include <random>

using agent::chunker;

namespace {

std::string unpack(const std::string& payload) {
    auto text = protocol::decompress(payload);
    REQUIRE(text.has_value());
    return *text;
}

// Every chunk must start with a sample header line (not a TAB frame line) and hold only
// whole samples: its last line is blank (call-graph output) or complete.
void check_whole_samples(const std::string& chunk) {
    REQUIRE(!chunk.empty());
    CHECK(chunk.front() != '\t');
    CHECK(chunk.back() == '\n');
}

} // namespace

TEST_CASE("chunks of real call-graph output end on sample boundaries", "[agent][chunker]") {
    const std::string text = test_support::fixture("agent/fixtures/script_callchain.txt");
    std::mt19937 rng(3);
    chunker c;
    std::string rebuilt;
    std::size_t pos = 0;
    int cuts = 0;
    while (pos < text.size()) {
        const std::size_t n = std::min<std::size_t>(text.size() - pos, 1 + rng() % 3000);
        c.append(std::string_view(text).substr(pos, n));
        pos += n;
        if (rng() % 4 == 0) {
            if (auto payload = c.cut()) {
                const std::string chunk = unpack(*payload);
                check_whole_samples(chunk);
                rebuilt += chunk;
                ++cuts;
            }
        }
    }
    if (auto last = c.cut({}, true))
        rebuilt += unpack(*last);
    CHECK(cuts > 3);
    CHECK(rebuilt == text); // nothing lost, nothing duplicated, order kept
}

TEST_CASE("flat output with right-aligned comm is cut between lines", "[agent][chunker]") {
    const std::string text = test_support::fixture("agent/fixtures/script_flat.txt");
    chunker c(chunker::encoding::text);
    const auto half = text.size() / 2;
    c.append(std::string_view(text).substr(0, half));
    auto first = c.cut();
    REQUIRE(first);
    check_whole_samples(*first);
    CHECK(first->size() <= half);
    c.append(std::string_view(text).substr(half));
    auto second = c.cut({}, true);
    REQUIRE(second);
    CHECK(*first + *second == text);
}

TEST_CASE("perf stat text follows the marker", "[agent][chunker]") {
    chunker c(chunker::encoding::text);
    c.append("demo 1/1 1.0: 1 cpu-clock:\n\tffff main (/bin/demo)\n\n");
    auto out = c.cut(" 1,234.50 msec task-clock\n");
    REQUIRE(out);
    CHECK(*out == "demo 1/1 1.0: 1 cpu-clock:\n\tffff main (/bin/demo)\n\n"
                  "\n### PERF_STAT ###\n 1,234.50 msec task-clock\n");
    CHECK_FALSE(c.cut()); // nothing new: no chunk
}

TEST_CASE("lost events are counted as they pass", "[agent][chunker]") {
    chunker c(chunker::encoding::text);
    c.append("demo-hash  4481/4484    767.970334: PERF_RECORD_LOST lost 2576\n"
             "demo-recurse  4481/4485    768.584845: PERF_RECORD_LOST lost 35\nx");
    CHECK(c.lost_in_chunk() == 2611);
    c.cut();
    CHECK(c.lost_in_chunk() == 0);
    CHECK(c.lost_total() == 2611);
}

TEST_CASE("input without boundaries cannot grow memory without bound", "[agent][chunker]") {
    chunker c(chunker::encoding::text);
    const std::string junk(chunker::max_tail + 10, 'x');
    c.append(junk);
    CHECK(c.chunk_bytes() == junk.size()); // flushed into the chunk, not held
    auto out = c.cut();
    REQUIRE(out);
    CHECK(out->size() == junk.size());
}
