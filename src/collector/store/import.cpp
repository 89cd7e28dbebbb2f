#include "collector/store/import.hpp"

#include "collector/model/views.hpp"

#include "collector/symbols/locate.hpp"
#include "collector/symbols/subprocess.hpp"
#include "protocol/compression.hpp"
#include "protocol/messages.hpp"

#include <boost/json/object.hpp>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <fcntl.h>
#include <mutex>
#include <optional>
#include <sstream>
#include <thread>
#include <unistd.h>

namespace collector {
namespace {

// A chunk is cut at the first sample boundary past this much text.
constexpr std::size_t chunk_bytes = std::size_t{4} << 20;
// A perf stat report is a few dozen lines; past this it is not one.
constexpr std::size_t max_stat_bytes = std::size_t{1} << 20;
// Chunks waiting for the writer thread; the parser waits when they are all taken.
constexpr std::size_t queued_chunks = 2;
// How far a NUL byte after an odd first line still says the input is binary.
constexpr std::size_t sniff_bytes = 64 << 10;

constexpr std::string_view perf_data_magic = "PERFILE2";
constexpr std::string_view stat_line = perf_stat_marker.substr(1); // "### PERF_STAT ###\n"

double now_seconds() {
    return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch())
        .count();
}

// Compresses and stores chunks on a thread of its own, so the parser never waits for zstd or
// the disk unless both queued chunks are still unwritten.
class chunk_sink {
public:
    explicit chunk_sink(session_writer& w)
        : writer_(w)
        , thread_([this] { run(); }) {}
    ~chunk_sink() { close(); }
    chunk_sink(const chunk_sink&) = delete;
    chunk_sink& operator=(const chunk_sink&) = delete;

    // False once a write failed: nothing more will be stored.
    bool push(std::string text) {
        std::unique_lock lock(mutex_);
        space_.wait(lock, [&] { return queue_.size() < queued_chunks || error_; });
        if (error_)
            return false;
        queue_.push_back(std::move(text));
        work_.notify_one();
        return true;
    }

    // Waits until every pushed chunk is written; the first error, if any.
    boost::system::error_code close() {
        {
            std::lock_guard lock(mutex_);
            closing_ = true;
            work_.notify_one();
        }
        if (thread_.joinable())
            thread_.join();
        return error_;
    }

private:
    void run() {
        for (;;) {
            std::string text;
            {
                std::unique_lock lock(mutex_);
                work_.wait(lock, [&] { return !queue_.empty() || closing_; });
                if (queue_.empty())
                    return;
                text = std::move(queue_.front());
                queue_.pop_front();
            }
            auto ec = error_ ? boost::system::error_code()
                             : writer_.write_chunk(true, protocol::compress(text));
            std::lock_guard lock(mutex_);
            if (ec && !error_)
                error_ = ec;
            space_.notify_one();
        }
    }

    session_writer& writer_;
    std::mutex mutex_;
    std::condition_variable work_, space_;
    std::deque<std::string> queue_;
    bool closing_ = false;
    boost::system::error_code error_;
    std::thread thread_;
};

// For a message that quotes the input.
std::string printable(std::string_view s) {
    std::string out(s);
    for (char& c : out)
        if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f)
            c = '?';
    return out;
}

bool has_nul(std::string_view s) {
    return std::memchr(s.data(), '\0', s.size()) != nullptr;
}

// A byte no line of perf script text starts with: control characters but tab and CR.
bool odd_byte(char c) {
    const auto u = static_cast<unsigned char>(c);
    return (u < 0x20 && c != '\t' && c != '\r' && c != '\n') || u == 0x7f;
}

} // namespace

struct import_stream::impl {
    impl(session_store& s, std::string src, std::string p, symbolizer* names)
        : store(s)
        , source(std::move(src))
        , perf(std::move(p))
        , model(std::make_unique<session_model>(names)) {
        model->owner_recording = true;
        model->parser.memoize_frames(true); // (given back at the end: the session keeps none)
    }

    enum class kind { unknown, text, perf_data };

    session_store& store;
    std::string source, perf;
    import_progress progress;
    std::string error;
    bool bad_input = true, finished = false;

    std::optional<session_writer> writer; // the staged folder
    std::optional<chunk_sink> sink;
    std::unique_ptr<session_model> model;
    kind what = kind::unknown;
    std::string head;       // the first bytes, until they say what the input is
    int perf_data_fd = -1;  // an uploaded perf.data, written into the staged folder
    std::string first_line; // for a useful message when nothing parses
    std::string host;       // the recording machine's, when perf's header names it
    // Text or binary, from the first line: complete yet, and holding a control byte.
    bool first_line_done = false, odd_first_line = false;
    std::uint64_t zero_bytes = 0; // NUL bytes left out: a damaged tail's
    char last_kept = '\n';        // the last byte passed on as text

    std::function<void()> on_progress;
    std::chrono::steady_clock::time_point last_progress{};

    // The current chunk's text. [0, parsed) has been parsed; parsed is a line start.
    std::string pending;
    std::size_t parsed = 0;
    bool in_stat = false;
    std::size_t marker_at = 0, stat_begin = 0;

    bool fail(std::string why, bool input_fault = true) {
        if (error.empty()) {
            error = std::move(why);
            bad_input = input_fault;
        }
        return false;
    }
    bool ok() const { return error.empty() && !progress.cancelled; }

    bool start() {
        if (writer)
            return true;
        auto w = store.create_staged();
        if (!w)
            return fail("cannot create the session: " + w.error().message(), false);
        writer.emplace(std::move(*w));
        sink.emplace(*writer);
        return true;
    }

    bool push_chunk(std::string text) {
        if (!sink->push(std::move(text)))
            return fail("cannot store the session: " + sink->close().message(), false);
        ++model->chunks;
        model->fit(); // within its allowance as it grows
        return true;
    }

    bool feed(std::string_view block) {
        if (!ok())
            return false;
        progress.bytes += block.size();
        if (what == kind::unknown) {
            head.append(block);
            if (head.size() < perf_data_magic.size())
                return true;
            if (!decide())
                return false;
            const std::string first = std::move(head);
            head = {};
            return what == kind::perf_data ? write_perf_data(first) : take_binary_checked(first);
        }
        return what == kind::perf_data ? write_perf_data(block) : take_binary_checked(block);
    }

    // Binary data is refused: a NUL byte within the first line, or after a first line with
    // control bytes in it. NUL bytes later are a damaged tail — a device that lost power while
    // writing --output leaves the end of the file zero-filled — and are left out, each run
    // ending the line it cut (unreadable, as other garbage is), the samples before it kept.
    bool take_binary_checked(std::string_view block) {
        const auto binary = [&] {
            return fail(source + " is neither a perf.data file nor perf script text (binary data)");
        };
        for (std::size_t i = 0; !first_line_done && i < block.size(); ++i) {
            if (block[i] == '\0')
                return binary();
            first_line_done = block[i] == '\n';
            odd_first_line = odd_first_line || odd_byte(block[i]);
        }
        if (!has_nul(block)) {
            if (!block.empty())
                last_kept = block.back();
            return take_text(block);
        }
        if (odd_first_line && progress.text_bytes < sniff_bytes)
            return binary();
        std::string kept;
        kept.reserve(block.size());
        for (std::size_t i = 0; i < block.size();) {
            const auto nul = block.find('\0', i);
            kept.append(block.substr(i, nul == std::string_view::npos ? nul : nul - i));
            if (!kept.empty())
                last_kept = kept.back();
            if (nul == std::string_view::npos)
                break;
            i = block.find_first_not_of('\0', nul);
            if (i == std::string_view::npos)
                i = block.size();
            zero_bytes += i - nul;
            if (last_kept != '\n') // the line the zeros cut ends there
                kept.push_back(last_kept = '\n');
        }
        return take_text(kept);
    }

    // On the first bytes: perf.data (by its magic) or text; binary data is refused at once.
    bool decide() {
        if (std::string_view(head).substr(0, perf_data_magic.size()) == perf_data_magic) {
            what = kind::perf_data;
            if (!start())
                return false;
            const auto path = writer->dir() / "upload.data";
            perf_data_fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
            if (perf_data_fd < 0)
                return fail("cannot store the upload: " + std::string(std::strerror(errno)), false);
            return true;
        }
        what = kind::text;
        return start();
    }

    bool write_perf_data(std::string_view data) {
        while (!data.empty()) {
            const ssize_t n = ::write(perf_data_fd, data.data(), data.size());
            if (n < 0 && errno == EINTR)
                continue;
            if (n <= 0)
                return fail("cannot store the upload: " + std::string(std::strerror(errno)), false);
            data.remove_prefix(static_cast<std::size_t>(n));
        }
        return true;
    }

    // The recording's build-id table (`perf buildid-list`): its modules are then matched by
    // the build that was recorded, as a live session's are by its agent's binaries metrics —
    // and kept the same way (a binaries line in metrics.jsonl), so that a reload matches them
    // too. Without one (an old perf, no table), modules are matched by path as before.
    void note_build_ids(const std::string& path) {
        const auto c = run_capture({perf, "buildid-list", "-i", path});
        if (c.code != 0)
            return;
        protocol::binaries_metrics table;
        std::istringstream in(c.out);
        for (std::string line; std::getline(in, line) && table.binaries.size() < 4096;) {
            const auto sp = line.find(' ');
            if (sp == std::string::npos)
                continue;
            std::string id = line.substr(0, sp), module = line.substr(sp + 1);
            if (plausible_build_id(id) && !module.empty() && module.front() == '/')
                table.binaries.push_back({std::move(module), std::move(id)});
        }
        if (table.binaries.empty())
            return;
        const auto json = protocol::serialize(protocol::health_metrics{std::move(table)});
        model->note_metrics(json);
        (void)writer->append_metrics(json); // (lost only with the session's own folder)
    }

    // The machine it was recorded on, as perf's header says it ("# hostname : vm").
    void note_host(std::string_view header) {
        constexpr std::string_view key = "# hostname : ";
        const auto at = header.find(key);
        if (at == std::string_view::npos || (at && header[at - 1] != '\n'))
            return;
        auto name = header.substr(at + key.size());
        name = name.substr(0, std::min<std::size_t>(name.find('\n'), 255));
        host = printable(name);
    }

    bool convert(const std::string& path) {
        note_build_ids(path);
        if (const auto h = run_capture({perf, "report", "--header-only", "-i", path}); h.code == 0)
            note_host(h.out);
        progress.converting = true;
        const std::vector<std::string> fields = {
            perf,
            "script",
            "-i",
            path,
            "--show-lost-events",
            "-F",
            "comm,tid,pid,time,period,event,ip,sym,symoff,dso"};
        auto sink_text = [this](std::string_view block) { return take_text(block); };
        auto c = run_streaming(fields, sink_text);
        if (c.code != 0 && c.code != 127 && progress.text_bytes == 0 && ok())
            // Recorded without some field (no period), or an old perf: the default format.
            c = run_streaming({perf, "script", "-i", path, "--show-lost-events"}, sink_text);
        progress.converting = false;
        if (!ok())
            return false;
        if (c.code == 127)
            return fail("cannot run " + perf +
                            " on the collector to read perf.data: " + c.err.substr(0, 300),
                        false);
        if (c.code != 0)
            return fail("perf script failed on " + source + ": " + c.err.substr(0, 300));
        return true;
    }

    // Text: parsed as it comes, cut into chunks; "### PERF_STAT ###" lines start a perf
    // stat report that runs until the next sample header (an agent's --output file).
    bool take_text(std::string_view block) {
        if (what == kind::unknown)
            what = kind::text;
        if (!start())
            return false;
        if (first_line.empty() && progress.text_bytes == 0) {
            first_line = printable(block.substr(0, block.find('\n')).substr(0, 120));
            note_host(block.substr(0, 64 << 10)); // text with perf script --header's lines
        }
        progress.text_bytes += block.size();
        pending.append(block);
        while (ok()) {
            if (in_stat) {
                if (!scan_stat())
                    break;
                continue;
            }
            const auto last_nl = pending.rfind('\n');
            if (last_nl == std::string::npos || last_nl < parsed) {
                if (pending.size() - parsed > max_line) { // one endless line: the parser skips
                    model->parser.feed(std::string_view(pending).substr(parsed));
                    pending.resize(parsed);
                }
                break;
            }
            const std::size_t complete = last_nl + 1;
            const std::size_t marker = find_marker(complete);
            const std::size_t upto = marker == std::string::npos ? complete : marker;
            model->parser.feed(std::string_view(pending).substr(parsed, upto - parsed));
            parsed = upto;
            if (marker != std::string::npos) {
                model->parser.finish(); // (a period's report: waits go on, as on the device)
                in_stat = true;
                marker_at = marker;
                stat_begin = parsed = marker + stat_line.size();
                continue;
            }
            if (pending.size() >= chunk_bytes)
                cut();
            break;
        }
        progress.samples = model->prof.sample_count();
        if (on_progress) {
            const auto now = std::chrono::steady_clock::now();
            if (now - last_progress > std::chrono::milliseconds(250)) {
                last_progress = now;
                on_progress();
            }
        }
        return ok();
    }

    // A "### PERF_STAT ###" line starting in [parsed, complete).
    std::size_t find_marker(std::size_t complete) const {
        for (std::size_t at = pending.find(stat_line, parsed); at < complete;
             at = pending.find(stat_line, at + 1))
            if (at == 0 || pending[at - 1] == '\n')
                return at;
        return std::string::npos;
    }

    // Inside a stat report: true when it ended (the chunk is pushed), false for more input.
    bool scan_stat() {
        for (;;) {
            const auto nl = pending.find('\n', parsed);
            if (nl == std::string::npos)
                break;
            header_fields h;
            if (read_header(std::string_view(pending).substr(parsed, nl - parsed), h)) {
                end_stat(parsed);
                return true;
            }
            parsed = nl + 1;
        }
        if (pending.size() - stat_begin > max_stat_bytes) {
            end_stat(parsed); // what follows is parsed (and counted) as script text
            return true;
        }
        return false;
    }

    // The chunk is the script text, the marker and the report, ending at `end`.
    void end_stat(std::size_t end) {
        model->note_stat(std::string_view(pending).substr(stat_begin, end - stat_begin));
        std::string chunk = std::move(pending);
        pending.assign(chunk, end);
        chunk.resize(end);
        if (marker_at == 0)
            chunk.insert(0, 1, '\n'); // the marker is "\n### PERF_STAT ###\n" in a chunk
        parsed = 0;
        in_stat = false;
        push_chunk(std::move(chunk));
    }

    // Cuts the current chunk at the last sample boundary in what was parsed: a line start
    // whose line is not a frame (a header or a blank line), so every chunk replays alone.
    void cut() {
        std::size_t at = parsed;
        while (at > 0 && (at >= pending.size() || pending[at] == '\t'))
            at = at >= 2 ? pending.rfind('\n', at - 2) + 1 : 0;
        if (at == 0 && pending.size() >= 4 * chunk_bytes)
            at = parsed; // a sample this large is not perf's: bound the memory anyway
        if (at == 0)
            return;
        // The chunk takes the buffer; only the tail after the cut is copied back.
        std::string chunk = std::move(pending);
        pending.reserve(chunk_bytes + (std::size_t{1} << 20));
        pending.assign(chunk, at);
        chunk.resize(at);
        parsed -= at;
        push_chunk(std::move(chunk));
    }

    import_result finish() {
        if (ok() && what == kind::unknown && !head.empty()) {
            // Shorter than the magic: text, if anything.
            what = kind::text;
            const std::string saved = std::move(head);
            head = {};
            take_binary_checked(saved);
        }
        if (ok() && what == kind::perf_data) {
            ::close(std::exchange(perf_data_fd, -1));
            const auto path = (writer->dir() / "upload.data").string();
            convert(path);
            std::error_code ignored;
            std::filesystem::remove(path, ignored);
        }
        if (ok() && what == kind::text) {
            if (in_stat) {
                end_stat(pending.size());
            } else {
                model->parser.feed(std::string_view(pending).substr(parsed));
                model->parser.finish();
                model->parser.end_waits();
                if (!pending.empty())
                    push_chunk(std::move(pending));
            }
            pending = {};
        }
        model->parser.memoize_frames(false);
        if (sink) {
            if (auto ec = sink->close(); ec && ok())
                fail("cannot store the session: " + ec.message(), false);
        }
        if (ok() && model->prof.sample_count() == 0)
            fail(nothing_found());
        if (progress.cancelled)
            fail("cancelled");
        if (!ok()) {
            discard();
            if (progress.cancelled)
                return failure("cancelled", error);
            return failure("import_failed", error, bad_input ? 400 : 500);
        }
        model->note_events();
        const auto& st = model->parser.stats();
        const double now = now_seconds();
        boost::json::object meta{{"agent", "import"},
                                 {"hostname", host},
                                 {"source", source},
                                 {"started_at", now},
                                 {"ended_at", now},
                                 {"live", false},
                                 {"samples", model->prof.sample_count()},
                                 {"bytes", progress.bytes.load()},
                                 {"skipped_lines", st.skipped_lines},
                                 {"zero_bytes", zero_bytes},
                                 {"lost_samples", st.lost_events}};
        // What the session list shows and finds it by: its events, the process sampled
        // most, and how long the recording ran.
        boost::json::array events;
        for (const auto& ev : model->event_types)
            events.emplace_back(ev);
        meta["event_types"] = std::move(events);
        meta["process"] = process_name(model->prof, std::nullopt);
        meta["duration_sec"] =
            static_cast<double>(model->prof.last_time() - model->prof.first_time()) / 1e9;
        if (auto ec = store.publish(*writer, "import", meta)) {
            discard();
            return failure("import_failed", "cannot store the session: " + ec.message(), 500);
        }
        finished = true;
        imported r;
        r.session_id = writer->id();
        r.model = std::move(model);
        r.zero_bytes = zero_bytes;
        return r;
    }

    std::string nothing_found() const {
        if (progress.bytes == 0)
            return source + " is empty";
        const auto& st = model->parser.stats();
        return source + " holds no perf script samples: " + std::to_string(st.lines) +
               " lines, none a sample header (" + std::to_string(st.skipped_lines) +
               " unreadable; the first: \"" + first_line + "\")";
    }

    // Everything of an import that will not finish: the writer thread, the staged folder.
    void discard() {
        if (perf_data_fd >= 0)
            ::close(std::exchange(perf_data_fd, -1));
        sink.reset(); // joins the writer thread
        if (writer && !finished)
            store.discard(*writer);
        writer.reset();
    }

    ~impl() { discard(); }
};

import_stream::import_stream(session_store& store, std::string source, std::string perf,
                             symbolizer* names)
    : impl_(std::make_unique<impl>(store, std::move(source), std::move(perf), names)) {}

import_stream::~import_stream() = default;

void import_stream::defer_tables() {
    impl_->model->defer_tables = true;
}

void import_stream::set_allowance(std::size_t bytes) {
    impl_->model->allowance = bytes;
}

bool import_stream::feed(std::string_view block) {
    return impl_->feed(block);
}

bool import_stream::feed_perf_data(const std::string& path) {
    std::error_code ec;
    impl_->progress.bytes = std::filesystem::file_size(path, ec);
    impl_->what = impl::kind::text;
    return impl_->start() && impl_->convert(path);
}

import_result import_stream::finish() {
    return impl_->finish();
}

import_progress& import_stream::progress() noexcept {
    return impl_->progress;
}

void import_stream::on_progress(std::function<void()> f) {
    impl_->on_progress = std::move(f);
}

const std::string& import_stream::error() const noexcept {
    return impl_->error;
}

import_result import_file(session_store& store, const std::string& path, const std::string& source,
                          const std::string& perf,
                          const std::function<void(const import_progress&)>& report,
                          symbolizer* names, bool defer_tables) {
    import_stream stream(store, source, perf, names);
    if (defer_tables)
        stream.defer_tables();
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return failure("import_failed", "cannot read " + source + ": " + std::strerror(errno));
    std::vector<char> buf(std::size_t{1} << 20);
    auto last_report = std::chrono::steady_clock::now();
    bool first = true;
    for (;;) {
        const ssize_t n = ::read(fd, buf.data(), buf.size());
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        const std::string_view block(buf.data(), static_cast<std::size_t>(n));
        if (first && block.substr(0, perf_data_magic.size()) == perf_data_magic) {
            stream.feed_perf_data(path); // perf script reads the file where it is
            break;
        }
        first = false;
        if (!stream.feed(block))
            break;
        if (report && std::chrono::steady_clock::now() - last_report > std::chrono::seconds(1)) {
            report(stream.progress());
            last_report = std::chrono::steady_clock::now();
        }
    }
    ::close(fd);
    return stream.finish();
}

} // namespace collector
