// The run's outbox: what the collector has not stored yet, in order, bounded.
#include "agent/run.hpp"

#include "protocol/messages.hpp"
#include "support/fixtures.hpp"

#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>

using agent::outbox;

namespace {
const std::string a = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
const std::string b = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb";
} // namespace

TEST_CASE("the outbox numbers a run's chunks and lets go what the collector stored",
          "[agent][run]") {
    outbox box(1 << 20);
    CHECK(box.add(a, "one") == 1);
    CHECK(box.add(a, "two") == 2);
    CHECK(box.add(a, "three") == 3);
    CHECK(box.count() == 3);
    CHECK(box.bytes() == 11);
    // A link that sent nothing yet sends from the first; one that sent two, the third.
    REQUIRE(box.after(0));
    CHECK(box.after(0)->chunk == "one");
    CHECK(box.after(2)->chunk == "three");
    CHECK(box.after(3) == nullptr);
    CHECK(box.bytes_after(1) == 8);
    // Stored up to 2: those go; what is left to send comes right after.
    CHECK(box.stored(a, 2) == 2);
    CHECK(box.count() == 1);
    CHECK(box.after(0)->seq == 3);
    // An answer about a run it does not hold lets nothing go.
    CHECK(box.stored(b, 99) == 2);
    CHECK(box.count() == 1);
    // A new run numbers from 1; storing it lets the older run's tail go too, not the reverse.
    CHECK(box.add(b, "b-one") == 1);
    CHECK(box.add(b, "b-two") == 2);
    CHECK(box.stored(a, 99) == 3); // a's tail stored: b's chunks stay
    CHECK(box.count() == 2);
    CHECK(box.front()->run == b);
    CHECK(box.stored(b, 1) == 4);
    CHECK(box.count() == 1);
    CHECK(box.last_run() == b);
    CHECK(box.last_seq() == 2);
}

TEST_CASE("past its cap the outbox drops the oldest chunks and counts them", "[agent][run]") {
    outbox box(10);
    box.add(a, "12345");
    box.add(a, "67890");
    box.add(a, "abc"); // 13 bytes: the first goes
    CHECK(box.count() == 2);
    CHECK(box.dropped_chunks() == 1);
    CHECK(box.dropped_bytes() == 5);
    CHECK(box.front()->seq == 2);
    // A chunk larger than the cap is kept alone rather than lost at once.
    box.add(a, std::string(50, 'x'));
    CHECK(box.count() == 1);
    CHECK(box.front()->seq == 4);
    CHECK(box.dropped_chunks() == 3);
    // A link that had sent up to chunk 1 (dropped since) goes on from the oldest held.
    REQUIRE(box.after(1));
    CHECK(box.after(1)->seq == 4);
}

TEST_CASE("run ids are 128 random bits in lowercase hex", "[agent][run]") {
    const auto one = agent::make_run_id();
    const auto two = agent::make_run_id();
    CHECK(protocol::valid_run_id(one));
    CHECK(protocol::valid_run_id(two));
    CHECK(one != two);
    CHECK_FALSE(protocol::valid_run_id("0123"));
    CHECK_FALSE(protocol::valid_run_id("0123456789ABCDEF0123456789abcdef"));
}

TEST_CASE("past memory the outbox spools to disk, reads it back, and a restart recovers what is "
          "whole",
          "[agent][run]") {
    test_support::temp_dir dir;
    auto opened = agent::spool_dir::open(dir.path / "spool");
    REQUIRE(std::holds_alternative<agent::spool_dir>(opened));
    auto spool = std::get<agent::spool_dir>(opened);
    {
        outbox box(10, spool, 1 << 20);
        box.add(a, "12345");
        box.add(a, "67890");
        box.add(a, "abc"); // over 10 in memory: the oldest goes to disk
        CHECK(box.count() == 3);
        CHECK(box.dropped_chunks() == 0);
        CHECK(box.spooled_bytes() == 5);
        CHECK(box.memory_bytes() == 8);
        REQUIRE(box.front()->spooled);

        CHECK(box.payload(*box.front()) == "12345");
        // Stored: its file goes.
        box.stored(a, 1);
        CHECK(box.spooled_bytes() == 0);
        std::size_t files = 0;
        for (const auto& f : std::filesystem::directory_iterator(dir.path / "spool"))
            files += f.is_regular_file();
        CHECK(files == 0);
        box.add(a, "defgh"); // 67890 goes to disk
        box.add(b, "b-1");   // abc too
        CHECK(box.spooled_bytes() == 8);
    } // the agent stops (or dies): the spool stays

    // One file cut short by a power loss, one stray file that is not the spool's.
    std::filesystem::path cut;
    for (const auto& f : std::filesystem::directory_iterator(dir.path / "spool"))
        if (f.path().filename().string().find(".00000000000000000003.") != std::string::npos)
            cut = f.path();
    REQUIRE_FALSE(cut.empty());
    std::filesystem::resize_file(cut, std::filesystem::file_size(cut) - 1);
    { std::ofstream(dir.path / "spool" / "notes.txt") << "mine"; }

    outbox again(10, spool, 1 << 20);
    again.recover();
    CHECK(again.broken_files() == 1);
    REQUIRE(again.count() == 1);
    CHECK(again.front()->run == a);
    CHECK(again.front()->seq == 2);
    CHECK(again.payload(*again.front()) == "67890");
    CHECK(std::filesystem::exists(dir.path / "spool" / "notes.txt"));
    CHECK_FALSE(std::filesystem::exists(cut));
}

TEST_CASE("a full spool drops its oldest chunks, and one that cannot be written drops, counted",
          "[agent][run]") {
    test_support::temp_dir dir;
    auto spool = std::get<agent::spool_dir>(agent::spool_dir::open(dir.path / "spool"));
    outbox box(4, spool, 10); // 4 bytes of memory, 10 on disk
    for (int i = 0; i < 6; ++i)
        box.add(a, "xxxx");
    // Memory holds the newest; the disk the next two; the oldest three went.
    CHECK(box.spooled_bytes() == 8);
    CHECK(box.memory_bytes() == 4);
    CHECK(box.dropped_chunks() == 3);
    CHECK(box.front()->seq == 4);

    // A spooled chunk's memory is given back, not kept as the capacity of an emptied string
    // (which grew the agent by the chunks' size through an outage).
    outbox big(64, spool, 1 << 20);
    big.add(b, std::string(4096, 'x'));
    big.add(b, "y");
    REQUIRE(big.front()->spooled);
    CHECK(big.front()->chunk.capacity() < 64);
    CHECK(big.payload(*big.front())->size() == 4096);

    // A spool directory that is not one: refused at start with the reason.
    { std::ofstream(dir.path / "file") << "x"; }
    const auto refused = agent::spool_dir::open(dir.path / "file");
    REQUIRE(std::holds_alternative<std::string>(refused));
    CHECK(std::get<std::string>(refused).find("spool directory") != std::string::npos);

    // Its files removed behind its back: what cannot be read back is skipped, counted.
    std::filesystem::remove_all(dir.path / "spool");
    const auto before = box.dropped_chunks();
    CHECK_FALSE(box.payload(*box.front()));
    CHECK(box.dropped_chunks() == before + 1);
}
