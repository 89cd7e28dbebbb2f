#include "collector/sessions.hpp"
#include "collector/store/session_store.hpp"
#include "protocol/compression.hpp"

#include "support/fixtures.hpp"

#include <catch2/catch.hpp>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/use_future.hpp>

#include <filesystem>
#include <fstream>
#include <unistd.h>

using namespace collector;
namespace fs = std::filesystem;

namespace {

using test_support::temp_dir;

} // namespace

TEST_CASE("sessions are written as received and replay in order", "[collector][store]") {
    temp_dir tmp;
    session_store store(tmp.path);
    boost::json::object meta{{"agent", "perfwire"}, {"hostname", "board/7 ../x"}};
    auto w = store.create("board/7 ../x", meta);
    REQUIRE(w.has_value());
    CHECK(session_store::valid_id(w->id()));
    CHECK(w->id().find("board_7_.._x") != std::string::npos); // made filename-safe
    CHECK(fs::path(w->dir()).parent_path() == tmp.path);

    const std::string first = "demo 1/1 1.0: 1 cpu-clock:\n\t1 f (/x)\n\n";
    REQUIRE_FALSE(w->write_chunk(true, protocol::compress(first)));
    REQUIRE_FALSE(w->write_chunk(false, "second\n"));
    REQUIRE_FALSE(w->append_metrics(R"({"type":"system","ts":1})"));
    REQUIRE_FALSE(w->append_metrics(R"({"type":"system","ts":3})"));

    // Listed before the connection closes (no ended_at yet), as after a crash.
    auto listed = store.list();
    REQUIRE(listed.size() == 1);
    CHECK(listed[0].at("chunks").as_uint64() == 2);
    CHECK(listed[0].at("ended_at").is_null());
    CHECK(listed[0].at("hostname").as_string() == "board/7 ../x");

    std::vector<std::string> seen;
    auto r = store.replay(w->id(), [&](bool compressed, std::string_view payload) {
        seen.push_back(compressed ? *protocol::decompress(payload) : std::string(payload));
    });
    REQUIRE(r.has_value());
    CHECK(*r == 0);
    CHECK(seen == std::vector<std::string>{first, "second\n"});
    CHECK(store.metrics(w->id()).size() == 2);

    meta["ended_at"] = 12345;
    meta["id"] = w->id();
    REQUIRE_FALSE(w->write_meta(meta));
    CHECK(store.meta(w->id())->at("ended_at").as_int64() == 12345);

    // Two agents in the same second get distinct folders.
    auto w2 = store.create("board/7 ../x", meta);
    REQUIRE(w2.has_value());
    CHECK(w2->id() != w->id());
    CHECK(store.list().size() == 2);

    CHECK_FALSE(store.remove(w->id()));
    CHECK(store.list().size() == 1);
    CHECK(store.remove(w->id())); // already gone
    // Nothing of it is left, hidden or not: the root holds only the other session.
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(tmp.path))
        names.push_back(e.path().filename().string());
    CHECK(names == std::vector<std::string>{w2->id()});

    // A removal or an import cut short by a crash leaves a hidden folder: cleared at start.
    fs::create_directories(tmp.path / ".removed-abc123" / "session" / "chunks");
    fs::create_directories(tmp.path / ".staging-abc123" / "chunks");
    session_store reopened(tmp.path);
    CHECK_FALSE(fs::exists(tmp.path / ".removed-abc123"));
    CHECK_FALSE(fs::exists(tmp.path / ".staging-abc123"));
    CHECK(reopened.list().size() == 1);
}

TEST_CASE("a kernel's symbols are kept once however many sessions name them, and go with the "
          "last",
          "[collector][store]") {
    temp_dir tmp;
    session_store store(tmp.path);
    const std::string kallsyms = "ffffffff81000000 T _stext\nffffffff81000100 T do_work\n";
    std::vector<std::string> ids;
    for (int i = 0; i < 3; ++i) {
        auto w = store.create("board", {{"agent", "perfwire"}});
        REQUIRE(w.has_value());
        REQUIRE_FALSE(w->write_kernel_symbols(i < 2 ? kallsyms : kallsyms + "x\n"));
        REQUIRE_FALSE(w->write_meta({{"agent", "perfwire"}}));
        ids.push_back(w->id());
    }
    std::size_t kept = 0;
    for (const auto& e : fs::directory_iterator(tmp.path / ".kernels")) {
        CHECK(e.path().extension() == ".txt");
        ++kept;
    }
    CHECK(kept == 2); // two kernels, three sessions
    CHECK(store.kernel_symbols(ids[0]) == kallsyms);
    CHECK(store.kernel_symbols(ids[1]) == kallsyms);
    CHECK(store.kernel_symbols(ids[2]) == kallsyms + "x\n");
    CHECK(store.list().size() == 3); // (.kernels is no session)
    // A session folder of an earlier collector keeps its own copy.
    const auto legacy = tmp.path / ids[2] / "kallsyms.txt";
    fs::remove(tmp.path / ids[2] / "kallsyms.ref");
    std::ofstream(legacy) << "old\n";
    CHECK(store.kernel_symbols(ids[2]) == "old\n");
    // A reference that is not a digest names nothing.
    std::ofstream(tmp.path / ids[2] / "kallsyms.ref") << "../../etc/passwd";
    CHECK(store.kernel_symbols(ids[2]) == "old\n");
    REQUIRE_FALSE(store.remove(ids[0]));
    CHECK(store.kernel_symbols(ids[1]) == kallsyms); // still named by the second
    REQUIRE_FALSE(store.remove(ids[1]));
    std::size_t left = 0;
    for ([[maybe_unused]] const auto& e : fs::directory_iterator(tmp.path / ".kernels"))
        ++left;
    CHECK(left == 1); // (the third kernel: its session no longer names it, changed by hand above)
}

TEST_CASE("session ids cannot leave the root", "[collector][store]") {
    temp_dir tmp;
    session_store store(tmp.path / "sessions");
    fs::create_directories(tmp.path / "outside");
    std::ofstream(tmp.path / "outside" / "meta.json") << "{}";
    for (const char* bad : {"..", "../outside", "/etc", "a/b", "", ".hidden", "x\ny", "%2e%2e"})
        CHECK_FALSE(session_store::valid_id(bad));
    CHECK_FALSE(store.meta("../outside"));
    CHECK(store.remove("../outside"));
    CHECK(fs::exists(tmp.path / "outside" / "meta.json"));
    CHECK_FALSE(store.replay("..", [](bool, std::string_view) {}).has_value());
    CHECK(store.metrics("../outside").empty());
}

TEST_CASE("a write that fails reports an error and loses no earlier chunk", "[collector][store]") {
    temp_dir tmp;
    session_store store(tmp.path);
    auto w = store.create("agent", {});
    REQUIRE(w.has_value());
    REQUIRE_FALSE(w->write_chunk(false, "kept\n"));
    fs::remove_all(w->dir() / "chunks"); // the disk goes away under the writer
    CHECK(w->write_chunk(false, "lost\n"));
    CHECK(w->chunks_written() == 1);
}

namespace {

// On the entry's strand: load it if needed and report what it holds.
std::uint64_t open_on_strand(const std::shared_ptr<session_entry>& e, const session_store& store) {
    return asio::co_spawn(
               e->strand,
               [](std::shared_ptr<session_entry> entry,
                  const session_store* s) -> asio::awaitable<std::uint64_t> {
                   ensure_loaded(*entry, *s);
                   co_return entry->model->prof.sample_count();
               }(e, &store),
               asio::use_future)
        .get();
}

bool loaded_on_strand(const std::shared_ptr<session_entry>& e) {
    return asio::co_spawn(
               e->strand,
               [](std::shared_ptr<session_entry> entry) -> asio::awaitable<bool> {
                   co_return entry->loaded;
               }(e),
               asio::use_future)
        .get();
}

} // namespace

TEST_CASE("saved sessions over the memory budget are unloaded least recently used first",
          "[collector][store]") {
    temp_dir tmp;
    session_store store(tmp.path);
    const std::string text = test_support::fixture("collector/fixtures/callchain_fields.txt");
    std::vector<std::string> ids;
    for (int i = 0; i < 3; ++i) {
        auto w = store.create("host" + std::to_string(i), {{"agent", "perfwire"}});
        REQUIRE(w.has_value());
        REQUIRE_FALSE(w->write_chunk(true, protocol::compress(text)));
        ids.push_back(w->id());
    }
    asio::thread_pool pool(2);
    // Room for about two sessions of this size.
    session_registry probe(store, pool);
    auto first = probe.find(ids[0]);
    const auto samples = open_on_strand(first, store);
    REQUIRE(samples > 50);
    const std::size_t one = first->memory_bytes.load();
    REQUIRE(one > 0);

    session_registry reg(store, pool, one * 5 / 2);
    auto a = reg.find(ids[0]);
    CHECK(open_on_strand(a, store) == samples);
    auto b = reg.find(ids[1]);
    CHECK(open_on_strand(b, store) == samples);
    CHECK(reg.saved_bytes() == 2 * one);
    (void)reg.find(ids[0]); // a is now more recent than b
    auto c = reg.find(ids[2]);
    CHECK(open_on_strand(c, store) == samples);
    (void)reg.find(ids[2]); // over budget: the least recently used (b) goes
    CHECK(loaded_on_strand(a));
    CHECK_FALSE(loaded_on_strand(b));
    CHECK(loaded_on_strand(c));
    CHECK(reg.saved_bytes() == 2 * one);

    // Opened again, it replays from disk with the same content.
    auto again = reg.find(ids[1]);
    CHECK(again == b);
    CHECK(open_on_strand(again, store) == samples);
    pool.join();
}

TEST_CASE("a session removed is gone from the registry: a session list read from disk before "
          "the removal leaves it out, and an id made again is no longer gone",
          "[collector][store]") {
    temp_dir tmp;
    session_store store(tmp.path);
    asio::thread_pool pool(1);
    session_registry reg(store, pool);
    auto live = reg.create_live("board", {});
    REQUIRE(live);
    const std::string id = (*live)->id;
    CHECK_FALSE(reg.gone(id));
    CHECK(reg.is_live(id));
    // Ended without a sample: removed from disk, then forgotten (live_session::end).
    REQUIRE_FALSE(store.remove(id));
    reg.forget(id);
    CHECK(reg.gone(id));
    CHECK_FALSE(reg.is_live(id));
    CHECK_FALSE(reg.known(id));
    CHECK_FALSE(reg.gone((*live)->id + "x"));
    // The id made again (an import stored under it): known, and no longer gone.
    reg.adopt(id, std::make_unique<session_model>());
    CHECK_FALSE(reg.gone(id));
    CHECK(reg.known(id));
    reg.forget(id);
    CHECK(reg.gone(id));
    // At most max_gone remembered, the oldest forgotten first: the id's first removal, passed
    // over since it was made again, does not take its second with it.
    for (std::size_t i = 0; i + 1 < session_registry::max_gone; ++i)
        reg.forget("20260101_000000_n" + std::to_string(i));
    CHECK(reg.gone(id));
    reg.forget("20260101_000000_n" + std::to_string(session_registry::max_gone - 1));
    CHECK_FALSE(reg.gone(id));
    CHECK(reg.gone("20260101_000000_n" + std::to_string(session_registry::max_gone - 1)));
    pool.join();
}
