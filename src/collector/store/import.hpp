// Imports a recording as a saved session in one streaming pass. perf script text (or a
// perf.data file, turned into text by `perf script` as it goes) flows in blocks through the
// parser into the session's model, while the same text, cut into ordinary chunks on sample
// boundaries (each with at most one perf stat report, as an agent sends them), is compressed
// and written by a writer thread. So the session is ready to view the moment the input ends,
// with no second parse, and memory is the model plus a few chunks whatever the input's size.
// Until finish() succeeds everything lives in a staged folder nobody lists: an interrupted or
// cancelled import leaves nothing behind.
//
// Blocking: run it on the thread pool (or a thread of its own), one call at a time; only
// progress() may be read, and cancel() called, from elsewhere.
#pragma once

#include "collector/result.hpp"

#include "collector/session_model.hpp"
#include "collector/store/session_store.hpp"

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

namespace collector {

struct import_progress {
    std::atomic<std::uint64_t> bytes{0};      // input taken (upload or file)
    std::atomic<std::uint64_t> text_bytes{0}; // perf script text parsed
    std::atomic<std::uint64_t> samples{0};
    std::atomic<bool> converting{false}; // perf script is running over a perf.data file
    std::atomic<bool> cancelled{false};
};

struct imported {
    std::string session_id;
    std::unique_ptr<session_model> model;
    std::uint64_t zero_bytes = 0; // NUL bytes of a damaged text tail, left out
};
// A failure is "import_failed" with status 400 when the input is at fault and 500 when the
// collector is (a full disk, no perf), or "cancelled".
using import_result = result<imported>;

class import_stream {
public:
    // `names`: the collector's symbols, to name what the device could not (session_model).
    import_stream(session_store& store, std::string source, std::string perf = "perf",
                  symbolizer* names = nullptr);
    ~import_stream(); // without a successful finish(): nothing is left
    import_stream(const import_stream&) = delete;
    import_stream& operator=(const import_stream&) = delete;

    // Symbol tables not in memory are not read in the parse: the model lists them
    // (session_model::defer_tables) for the collector to read beside it once it is a session.
    void defer_tables();

    // What the model may hold as it grows (session_model::allowance): past it, its oldest
    // samples are folded.
    void set_allowance(std::size_t bytes);

    // The next block of the input, in any size. False once the import failed (error() says
    // why) or was cancelled: stop feeding.
    bool feed(std::string_view block);
    // A perf.data file that is already on disk (the CLI): converted in place, not copied.
    bool feed_perf_data(const std::string& path);
    // Ends the input: the last chunk is written and the session published.
    import_result finish();

    import_progress& progress() noexcept;
    // Called (on the importing thread) about four times a second while text is parsed.
    void on_progress(std::function<void()> f);
    const std::string& error() const noexcept;
    void cancel() noexcept { progress().cancelled = true; }

private:
    struct impl;
    std::unique_ptr<impl> impl_;
};

// A file on disk (perf.data or text). `report` is called about once a second.
import_result import_file(session_store& store, const std::string& path, const std::string& source,
                          const std::string& perf = "perf",
                          const std::function<void(const import_progress&)>& report = {},
                          symbolizer* names = nullptr, bool defer_tables = false);

} // namespace collector
