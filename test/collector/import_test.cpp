// The streaming import: one pass, chunks cut on sample boundaries that replay to the same
// profile, an agent's --output file with its perf stat blocks, refusals that say what the
// input was, and nothing left behind by a failed or abandoned import.
#include "collector/model/views.hpp"
#include "collector/sessions.hpp"
#include "collector/store/import.hpp"

#include "support/fixtures.hpp"

#include <catch2/catch.hpp>

#include <filesystem>
#include <map>
#include <random>

using namespace collector;
using test_support::fixture;
using test_support::temp_dir;
namespace fs = std::filesystem;

namespace {

std::map<std::string, std::pair<std::uint64_t, std::uint64_t>> function_map(const profile& p) {
    std::map<std::string, std::pair<std::uint64_t, std::uint64_t>> m;
    for (const auto& r : functions(p, {}).rows)
        m[std::string(p.symbol(r.frame)) + " " + std::string(p.module(r.frame))] = {r.self,
                                                                                    r.total};
    return m;
}

// Feeds `text` in random pieces of 1 byte to 300 KiB.
import_result import_text(session_store& store, const std::string& text, unsigned seed) {
    import_stream s(store, "test");
    std::mt19937 rng(seed);
    for (std::size_t pos = 0; pos < text.size();) {
        const std::size_t n = std::min<std::size_t>(
            text.size() - pos, rng() % 4 == 0 ? 1 + rng() % 7 : rng() % 300000);
        if (!s.feed(std::string_view(text).substr(pos, n)))
            break;
        pos += n;
    }
    return s.finish();
}

// Every folder in the store's root, staged ones included.
std::vector<std::string> folders(const fs::path& root) {
    std::vector<std::string> out;
    for (const auto& e : fs::directory_iterator(root))
        out.push_back(e.path().filename().string());
    return out;
}

} // namespace

TEST_CASE("an import parses in one pass into chunks that replay to the same profile",
          "[collector][import]") {
    temp_dir tmp;
    session_store store(tmp.path);
    // > 4 MiB, so the text is cut into several chunks.
    const std::string one = fixture("collector/fixtures/callchain_fields.txt") +
                            fixture("collector/fixtures/flat.txt") +
                            fixture("collector/fixtures/system_wide_cpu.txt");
    std::string text;
    while (text.size() < (std::size_t{9} << 20))
        text += one;

    profile direct;
    script_parser parser(direct);
    parser.feed(text);
    parser.finish();

    auto done = import_text(store, text, 5);
    if (!done)
        FAIL(done.error());
    auto& r = *done;
    REQUIRE(r.model);
    CHECK(r.model->prof.sample_count() == direct.sample_count());
    CHECK(r.model->parser.stats().skipped_lines == 0);
    CHECK(function_map(r.model->prof) == function_map(direct));
    CHECK(r.model->chunks >= 3);
    CHECK(r.model->event_types == std::set<std::string>{"cpu-clock"});

    // On disk: a listed session whose chunks, each replayed alone, give the same profile.
    const auto listed = store.list();
    REQUIRE(listed.size() == 1);
    CHECK(listed[0].at("id").as_string() == r.session_id);
    CHECK(listed[0].at("samples").to_number<std::uint64_t>() == direct.sample_count());
    CHECK(listed[0].at("chunks").to_number<std::uint64_t>() == r.model->chunks);
    session_model replayed;
    REQUIRE(store.replay(r.session_id, [&](bool compressed, std::string_view payload) {
        CHECK(compressed);
        CHECK(replayed.ingest(compressed, payload));
    }));
    CHECK(replayed.prof.sample_count() == direct.sample_count());
    CHECK(replayed.parser.stats().skipped_lines == 0);
    CHECK(function_map(replayed.prof) == function_map(direct));
    CHECK(folders(tmp.path) == std::vector<std::string>{r.session_id});
}

TEST_CASE("an agent's --output file imports whole, perf stat blocks and all",
          "[collector][import]") {
    temp_dir tmp;
    session_store store(tmp.path);
    const std::string script = fixture("collector/fixtures/callchain_fields.txt");
    const std::string stat = " Performance counter stats for process id '42':\n\n"
                             "          1,001.50 msec task-clock  #    0.999 CPUs utilized\n"
                             "   <not supported>      cycles\n\n"
                             "       1.002003004 seconds time elapsed\n\n";
    // As the agent writes rounds: the first may be empty; each ends with its stat report.
    const std::string marker(perf_stat_marker);
    const std::string file = marker + stat + script + marker + stat + script + marker + stat;
    profile direct;
    script_parser parser(direct);
    parser.feed(script + script);
    parser.finish();

    auto done = import_text(store, file, 9);
    if (!done)
        FAIL(done.error());
    auto& r = *done;
    CHECK(r.model->prof.sample_count() == direct.sample_count());
    CHECK(r.model->parser.stats().skipped_lines == 0);
    REQUIRE(r.model->last_stat);
    CHECK(r.model->last_stat_text.find("task-clock") != std::string::npos);
    session_model replayed;
    REQUIRE(store.replay(r.session_id, [&](bool compressed, std::string_view payload) {
        replayed.ingest(compressed, payload);
    }));
    CHECK(replayed.prof.sample_count() == direct.sample_count());
    CHECK(replayed.parser.stats().skipped_lines == 0);
    CHECK(replayed.last_stat_text == r.model->last_stat_text);
}

TEST_CASE("an import that finds nothing says what it found, and leaves nothing",
          "[collector][import]") {
    temp_dir tmp;
    session_store store(tmp.path);
    std::mt19937 rng(3);
    std::string random(200000, '\0');
    for (auto& c : random)
        c = static_cast<char>(rng());
    auto bin = import_text(store, random, 1);
    REQUIRE_FALSE(bin.has_value());
    CHECK(bin.error().code == "import_failed");
    CHECK(bin.error().status == 400); // the input's fault
    CHECK_THAT(bin.error().message,
               Catch::Contains("neither a perf.data file nor perf script text"));

    auto words = import_text(store, "hello\nthis is <b>not</b> perf\n", 1);
    REQUIRE_FALSE(words.has_value());
    CHECK_THAT(words.error().message, Catch::Contains("holds no perf script samples"));
    CHECK_THAT(words.error().message, Catch::Contains("hello"));

    auto empty = import_text(store, "", 1);
    REQUIRE_FALSE(empty.has_value());
    CHECK_THAT(empty.error().message, Catch::Contains("is empty"));
    CHECK(folders(tmp.path).empty());
    CHECK(store.list().empty());
}

TEST_CASE("a text recording with a zero-filled tail imports the samples before it",
          "[collector][import]") {
    temp_dir tmp;
    session_store store(tmp.path);
    // An --output file cut by a power loss: the last page written half way, its rest zeros.
    const std::string marker(perf_stat_marker);
    const std::string all = fixture("collector/fixtures/callchain_fields.txt");
    const std::string text = marker + all.substr(0, all.find("\n\n", 40000) + 2);
    REQUIRE(text.size() < (std::size_t{64} << 10)); // short: the whole file is "first bytes"
    std::size_t cut = text.size() * 3 / 5;
    while (text[cut] == '\n' || text[cut - 1] == '\n')
        ++cut; // inside a line
    const std::string damaged = text.substr(0, cut) + std::string(4096 + 123, '\0');
    // The oracle: the same text, cut at the same byte, without the zeros.
    profile before;
    script_parser parser(before);
    parser.feed(text.substr(0, cut));
    parser.finish();
    REQUIRE(before.sample_count() > 10);

    auto done = import_text(store, damaged, 4);
    if (!done)
        FAIL(done.error());
    CHECK(done->model->prof.sample_count() == before.sample_count());
    CHECK(done->zero_bytes == 4096 + 123);
    CHECK(function_map(done->model->prof) == function_map(before));
    // Zeros in the middle end the line they cut; the samples after them are read too.
    const std::string middle = text.substr(0, cut) + std::string(512, '\0') + "\n" + text;
    profile both;
    script_parser twice(both);
    twice.feed(text.substr(0, cut) + "\n" + text);
    twice.finish();
    auto mid = import_text(store, middle, 6);
    if (!mid)
        FAIL(mid.error());
    CHECK(mid->model->prof.sample_count() == both.sample_count());
    CHECK(mid->model->prof.sample_count() > before.sample_count());

    // Binary from the first bytes is still refused: an ELF header, zeros from the start.
    for (const std::string& bin : {std::string("\x7f"
                                               "ELF\x02\x01\x01\0\0\0\0\0\0\0\0\0",
                                               16) +
                                       std::string(5000, 'x') + "\n" + text,
                                   std::string(9000, '\0') + text}) {
        auto refused = import_text(store, bin, 2);
        REQUIRE_FALSE(refused.has_value());
        CHECK_THAT(refused.error().message,
                   Catch::Contains("neither a perf.data file nor perf script text"));
    }
}

TEST_CASE("an import abandoned half way or cancelled leaves nothing", "[collector][import]") {
    temp_dir tmp;
    session_store store(tmp.path);
    const std::string text = fixture("collector/fixtures/callchain_fields.txt");
    {
        import_stream s(store, "half");
        REQUIRE(s.feed(text.substr(0, text.size() / 2)));
        CHECK(folders(tmp.path).size() == 1); // staged, not listed
        CHECK(store.list().empty());
    }
    CHECK(folders(tmp.path).empty());
    import_stream s(store, "cancelled");
    REQUIRE(s.feed(text));
    s.cancel();
    CHECK_FALSE(s.feed(text));
    const auto r = s.finish();
    REQUIRE_FALSE(r.has_value());
    CHECK(r.error().code == "cancelled");
    CHECK(r.error().message == "cancelled");
    CHECK(folders(tmp.path).empty());
}

TEST_CASE("a staged import left by a stopped collector is removed at the next start",
          "[collector][import]") {
    temp_dir tmp;
    {
        session_store store(tmp.path);
        REQUIRE(store.create_staged().has_value());
    }
    REQUIRE(folders(tmp.path).size() == 1);
    session_store again(tmp.path);
    CHECK(folders(tmp.path).empty());
}
