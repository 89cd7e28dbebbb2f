// A live session named again (new symbols, a build-id, the kernel's symbols): its new model
// is built off the session's strand while chunks keep arriving.
#include "collector/context.hpp"
#include "collector/live_session.hpp"
#include "support/fixtures.hpp"

#include <catch2/catch.hpp>

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/use_future.hpp>

#include <atomic>
#include <chrono>
#include <future>
#include <thread>

using namespace collector;

TEST_CASE("a live session named again takes every chunk that arrives meanwhile, none twice",
          "[collector][ingestion]") {
    test_support::temp_dir dir;
    asio::io_context io;
    config c;
    c.sessions_dir = (dir.path / "sessions").string();
    app_context app(io, c);
    auto made = live_session::open(app, "test", "agent", {});
    REQUIRE(made);
    live_session& live = **made;
    const auto e = app.sessions.known(live.id());
    REQUIRE(e);
    const std::string chunk = test_support::fixture("collector/fixtures/callchain_fields.txt");
    std::atomic<int> digested{0};
    // Runs the I/O loop until `done`, 10 s at most.
    const auto run_until = [&](const auto& done) {
        const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
        while (!done() && std::chrono::steady_clock::now() < end) {
            io.restart();
            io.run_for(std::chrono::milliseconds(5));
        }
        return done();
    };
    const auto ingest = [&] { live.chunk(false, chunk, [&](bool) { ++digested; }); };
    // Whether a rebuild is under way (asked on the strand, where it is kept).
    const auto rebuilding = [&] {
        auto f = asio::post(e->strand, asio::use_future([&] { return e->rebuilding != nullptr; }));
        while (f.wait_for(std::chrono::milliseconds(1)) != std::future_status::ready) {
            io.restart();
            io.poll();
        }
        return f.get();
    };

    // Symbols that may name anything anew (here: another module named whole each time), so
    // that the session is parsed again rather than named in place.
    int renames = 0;
    const auto name_anew = [&] {
        auto changed = app.symbols.config();
        changed.resymbolize = {"/opt/app-" + std::to_string(++renames)};
        app.symbols.configure(changed);
        rename_frames(app);
    };

    ingest();
    REQUIRE(run_until([&] { return digested == 1; }));
    const auto per_chunk = e->samples.load();
    REQUIRE(per_chunk > 0);
    int sent = 1;
    for (int round = 0; round < 5; ++round) {
        // Named again: the rebuild takes the chunks on disk now; the three sent right after it
        // reach the strand while it runs (before its result can), and must be taken as well.
        name_anew();
        for (int i = 0; i < 3; ++i, ++sent)
            ingest();
        REQUIRE(run_until([&] { return digested == sent && !rebuilding(); }));
        CHECK(e->samples.load() == per_chunk * static_cast<std::uint64_t>(sent));
        CHECK(e->chunks.load() == static_cast<std::uint64_t>(sent));
    }
    // Views keep being answered meanwhile: the model in place is never missing.
    auto f = asio::post(e->strand, asio::use_future([&] { return e->model != nullptr; }));
    while (f.wait_for(std::chrono::milliseconds(1)) != std::future_status::ready) {
        io.restart();
        io.poll();
    }
    CHECK(f.get());
    // A version for each chunk and each model put in place.
    CHECK(e->version.load() >= static_cast<std::uint64_t>(sent + 5));

    // The session ends while it is being named again: the rebuild is given up, and the next
    // view makes the model again whole, every chunk in it once. (The strand is held until both
    // are queued, so the end comes right after the rebuild begins, before it can be done.)
    std::promise<void> open;
    asio::post(e->strand, [gate = open.get_future().share()] { gate.wait(); });
    name_anew();
    live.end(1.0);
    open.set_value();
    REQUIRE(run_until([&] { return !rebuilding(); }));
    auto reloaded = asio::post(e->strand, asio::use_future([&] {
                                   const bool unloaded = !e->loaded;
                                   ensure_loaded(*e, app.store, &app.symbols);
                                   return std::pair(unloaded, e->model->prof.sample_count());
                               }));
    while (reloaded.wait_for(std::chrono::milliseconds(1)) != std::future_status::ready) {
        io.restart();
        io.poll();
    }
    const auto [unloaded, samples] = reloaded.get();
    CHECK(unloaded);
    CHECK(samples == per_chunk * static_cast<std::uint64_t>(sent));
    app.pool.join();
}
