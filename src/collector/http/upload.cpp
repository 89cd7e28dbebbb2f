#include "collector/http/upload.hpp"

#include "collector/fleet/backlog.hpp"
#include "collector/http/events.hpp"
#include "collector/http/target.hpp"
#include "collector/live_session.hpp"
#include "collector/log.hpp"
#include "collector/store/import.hpp"
#include "protocol/error.hpp"

#include <boost/asio/bind_executor.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <atomic>
#include <chrono>

namespace collector {
namespace json = boost::json;

namespace {

// Imports at once; each holds its model and a few chunks (docs/api.md).
constexpr int max_running = 2;
std::atomic<int> running{0};
std::atomic<std::uint64_t> next_id{1};

} // namespace

std::string upload_source(std::string_view name) {
    // The file's own name, as the browser gives it: its last path element, no control
    // characters, at most 200 bytes (never cut inside a UTF-8 sequence).
    if (const auto slash = name.find_last_of("/\\"); slash != std::string_view::npos)
        name.remove_prefix(slash + 1);
    std::string out;
    for (const char c : name)
        if (static_cast<unsigned char>(c) >= 0x20 && c != 0x7f)
            out.push_back(c);
    if (out.size() > 200) {
        std::size_t cut = 200;
        while (cut > 0 && (static_cast<unsigned char>(out[cut]) & 0xC0) == 0x80)
            --cut;
        out.resize(cut);
    }
    return out.empty() || out == "." || out == ".." ? std::string("upload") : out;
}

struct upload::state : std::enable_shared_from_this<upload::state> {
    state(app_context& a, std::optional<std::uint64_t> d, std::string source)
        : app(a)
        , strand(asio::make_strand(a.pool))
        , stream(a.store, std::move(source), "perf", &a.symbols)
        , declared(d)
        , id(next_id++) {
        stream.set_allowance(a.sessions.saved_allowance());
        stream.defer_tables(); // read beside the parse once it is a session (want_tables)
    }

    app_context& app;
    asio::strand<asio::thread_pool::executor_type> strand;
    import_stream stream; // on the strand only
    std::optional<std::uint64_t> declared;
    std::uint64_t id;
    std::chrono::steady_clock::time_point last_event{};

    // Progress for the browsers, a few times a second (I/O thread).
    void announce(std::string_view phase, bool force = false) {
        const auto now = std::chrono::steady_clock::now();
        if (!force && now - last_event < std::chrono::milliseconds(250))
            return;
        last_event = now;
        auto& p = stream.progress();
        json::object o{{"import", id},
                       {"phase", phase},
                       {"bytes", p.bytes.load()},
                       {"samples", p.samples.load()}};
        if (declared)
            o["total"] = *declared;
        app.browsers->import_progress(o);
    }
};

namespace {

asio::awaitable<bool> feed_on_pool(std::shared_ptr<upload::state> s, std::string_view block) {
    co_return s->stream.feed(block);
}

asio::awaitable<import_result> finish_on_pool(std::shared_ptr<upload::state> s) {
    co_return s->stream.finish();
}

// Dropping an unfinished import removes its staged folder: do it on the strand, after any
// work already queued there.
asio::awaitable<void> drop_on_pool(std::shared_ptr<upload::state> s) {
    s->stream.cancel();
    (void)s->stream.finish();
    co_return;
}

} // namespace

http_response busy_importing(const http_request& req) {
    auto res = make_error(req, http::status::service_unavailable, "busy",
                          std::to_string(max_running) +
                              " imports are running; try again when one has finished");
    res.set(http::field::retry_after, "5");
    return res;
}

upload::upload(std::shared_ptr<state> s)
    : state_(std::move(s)) {}

upload::~upload() {
    --running;
}

std::shared_ptr<upload> upload::start(app_context& app, std::optional<std::uint64_t> declared,
                                      std::string_view target) {
    if (running.fetch_add(1) >= max_running) {
        --running;
        return nullptr;
    }
    auto s =
        std::make_shared<state>(app, declared, upload_source(split_target(target).param("name")));
    // While perf script runs over an uploaded perf.data, progress comes from the pool.
    s->stream.on_progress([weak = std::weak_ptr<state>(s)] {
        if (auto self = weak.lock())
            asio::post(self->app.io, [self] {
                self->announce(self->stream.progress().converting ? "converting" : "receiving");
            });
    });
    return std::make_shared<upload>(std::move(s));
}

asio::awaitable<bool> upload::feed(std::string_view block) {
    const bool ok =
        co_await asio::co_spawn(state_->strand, feed_on_pool(state_, block), asio::use_awaitable);
    state_->announce("receiving");
    co_return ok;
}

void upload::abandon() {
    auto s = state_;
    // The staged folder goes on the strand; the browsers hear of it on the I/O thread, which
    // owns the SSE hub.
    asio::co_spawn(s->strand, drop_on_pool(s),
                   asio::bind_executor(s->app.io, [s](std::exception_ptr e) {
                       if (e)
                           log("dropping an unfinished import failed: " + protocol::describe(e));
                       s->announce("cancelled", true);
                   }));
}

void upload::cancel() noexcept {
    state_->stream.cancel();
}

asio::awaitable<http_response> upload::finish(const http_request& req) {
    state_->announce("parsing", true); // (a perf.data upload then reports "converting")
    auto done =
        co_await asio::co_spawn(state_->strand, finish_on_pool(state_), asio::use_awaitable);
    auto& app = state_->app;
    if (!done) {
        state_->announce("failed", true);
        co_return make_error(req, done.error());
    }
    auto& r = *done;
    const auto samples = r.model->prof.sample_count();
    const auto& st = r.model->parser.stats();
    json::object body{{"session_id", r.session_id},
                      {"samples", samples},
                      {"bytes", state_->stream.progress().bytes.load()},
                      {"skipped_lines", st.skipped_lines},
                      {"zero_bytes", r.zero_bytes},
                      {"lost_samples", st.lost_events}};
    const bool renamed = r.model->symbols_generation < app.symbols.generation();
    if (auto e = app.sessions.adopt(r.session_id, std::move(r.model)))    // its symbol tables,
        asio::post(e->strand, [e, app = &app] { want_tables(e, *app); }); // read beside
    if (app.backlog)
        app.backlog->added(r.session_id);
    if (renamed) // the symbol settings changed while it was imported
        rename_frames(app);
    state_->announce("done", true);
    app.changed(change::sessions, r.session_id);
    co_return make_json(req, http::status::ok, body);
}

} // namespace collector
