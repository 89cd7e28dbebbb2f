#include "collector/live_session.hpp"

#include "collector/context.hpp"
#include "collector/fleet/backlog.hpp"
#include "collector/fleet/store.hpp"
#include "collector/log.hpp"
#include "collector/model/views.hpp"
#include "protocol/compression.hpp"

#include <boost/asio/post.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <utility>

namespace collector {
namespace json = boost::json;

namespace {

json::object final_meta(const json::object& start, const session_entry& e, double ended,
                        std::optional<int> pid) {
    const session_model& m = *e.model;
    json::object meta = start;
    meta["ended_at"] = ended;
    meta["live"] = false;
    // What the recording on disk holds, and what never reached it.
    meta["samples"] = m.prof.sample_count() - std::min(m.prof.sample_count(), e.unsaved_samples());
    meta["unsaved_chunks"] = e.unsaved_chunks();
    meta["unsaved_samples"] = e.unsaved_samples();
    meta["refused_chunks"] = e.refused_chunks;
    meta["refused_bytes"] = e.refused_bytes;
    meta["chunks"] = m.chunks;
    meta["lost_samples"] = m.parser.stats().lost_events;
    json::array events;
    for (const auto& ev : m.event_types)
        events.emplace_back(ev);
    meta["event_types"] = std::move(events);
    if (!m.last_stat_text.empty())
        meta["perf_stat_text"] = m.last_stat_text;
    // What the session list shows for it: the process and how long it was profiled.
    if (!pid)
        if (const auto* p = start.if_contains("pid"); p && p->is_int64())
            pid = static_cast<int>(p->as_int64());
    if (pid)
        meta["pid"] = *pid;
    meta["process"] = process_name(m.prof, pid ? std::optional<std::uint32_t>(*pid) : std::nullopt);
    meta["duration_sec"] = m.prof.sample_count()
                               ? static_cast<double>(m.prof.last_time() - m.prof.first_time()) / 1e9
                               : 0.0;
    return meta;
}

// On the strand: the chunk taken into the session (sessions.hpp, take_chunk), its samples
// also written to the fleet store as this model named them, before any is folded; what
// happened said in the log. `text`: the payload decompressed already, or empty.
bool ingest_chunk(session_entry& e, const app_context& app, const std::string& who, bool compressed,
                  const std::string& payload, std::string_view text,
                  const fleet_encoder::origin* fleet, std::uint64_t seq) {
    const auto past_room_before = e.model->prof.past_room_samples();
    e.model->allowance = e.allowance.load();
    // A fleet store's rows are written as the chunk is parsed and never renamed: a session
    // writing to one reads the symbol tables its parse wants in the parse (on this strand),
    // so that its rows carry the names it keeps.
    if (fleet && app.fleet)
        e.model->defer_tables = false;
    std::function<void(std::size_t, std::size_t)> to_fleet;
    if (fleet && app.fleet)
        to_fleet = [&, chunk = static_cast<std::uint32_t>(e.model->chunks)](std::size_t from,
                                                                            std::size_t to) {
            auto& m = *e.model;
            if (!m.fleet)
                m.fleet = std::make_unique<fleet_encoder>(*fleet);
            const auto now = std::chrono::system_clock::now().time_since_epoch();
            app.fleet->add(m.fleet->encode(
                m.prof, from, to, chunk, m.device_build_ids,
                static_cast<std::uint64_t>(
                    std::chrono::duration_cast<std::chrono::nanoseconds>(now).count())));
        };
    const auto taken = take_chunk(
        e, app.store, compressed, payload,
        [&] {
            // (folding the oldest samples past the allowance)
            return compressed && !text.empty() ? e.model->ingest(false, text, to_fleet)
                                               : e.model->ingest(compressed, payload, to_fleet);
        },
        seq);
    if (!taken.stored)
        log(who,
            "cannot store chunk (kept in memory, written when there is room): " + e.store_error);
    if (!taken.parsed)
        log(who, "unreadable data chunk skipped");
    if (taken.first_refused)
        log(who, "its chunks brought no sample past " +
                     std::to_string(session_entry::max_junk_bytes >> 20) +
                     " MB: those that bring none are no longer stored (refused_chunks)");
    if (past_room_before == 0 && e.model->prof.past_room_samples() > 0)
        log(who, "its frames, call paths and threads fill its share of the memory budget (" +
                     std::to_string(e.model->allowance >> 20) +
                     " MB): samples that need new ones are counted as \"" +
                     std::string(profile::past_room_symbol) + "\" (past_room_samples)");
    if (taken.saved_again)
        log(who, "the chunks kept in memory are on disk now");
    return taken.stored && e.unsaved.empty();
}

// On the strand of a live session: named again with the symbols as they are now, within its
// allowance, without holding up its views. The new model is built on the pool from the
// chunks on disk now (and those still waiting for the disk); views are answered from the model
// in place meanwhile, and what arrives meanwhile (live_session::chunk, ::metrics) is kept in
// `e.rebuilding` and taken by the new model when it is swapped in, on the strand. One rebuild
// at a time: one asked for meanwhile follows it. The browsers are told once it is in place.
void rebuild_live(const std::shared_ptr<session_entry>& e, app_context& app) {
    if (e->rebuilding) {
        e->rebuilding->again = true;
        return;
    }
    if (app.stops.stopping())
        return; // named again when next loaded
    auto job = std::make_shared<session_entry::rebuild>();
    e->rebuilding = job;
    const std::size_t on_disk =
        e->writer ? static_cast<std::size_t>(e->writer->chunks_written()) : SIZE_MAX;
    app.on_pool(app.pool.get_executor(), [e, app = &app, job, seed = seed_of(*e), on_disk] {
        auto built = std::make_shared<std::unique_ptr<session_model>>(
            build_model(app->store, e->id, &app->symbols, e->allowance.load(), seed, on_disk));
        app->on_pool(e->strand, [e, app, job, built]() mutable {
            auto& fresh = *built;
            if (e->rebuilding != job)
                return; // given up: the session ended, or its model was made again whole
            e->rebuilding.reset();
            if (!e->writer || !e->model || !e->loaded)
                return;
            // What the model in place learned meanwhile (a build-id, the kernel's symbols or
            // why they are missing), then the records and chunks that came.
            for (const auto& [module, build] : e->model->device_build_ids)
                fresh->keep_build_id(module, build);
            if (!fresh->kernel)
                fresh->kernel = e->model->kernel;
            if (fresh->kernel_note.empty())
                fresh->kernel_note = e->model->kernel_note;
            for (const auto& record : job->metrics)
                fresh->note_metrics(record);
            for (const auto& [compressed, payload] : job->chunks)
                fresh->ingest(compressed, payload);
            e->model = std::move(fresh);
            publish_counts(*e);
            ++e->version;
            want_tables(e, *app);
            asio::post(app->io, [app, id = e->id] { app->changed(change::data, id); });
            // A build-id that came meanwhile, after frames of its module were named: again.
            const bool stale = e->model->names_stale && e->stale_rebuilds < max_stale_rebuilds;
            if (stale)
                ++e->stale_rebuilds;
            if (job->again || stale)
                rebuild_live(e, *app);
        });
    });
}

// On the strand: the session's work, in the order it came; the symbol tables a parse wanted
// and did not find in memory are read beside it, on the loader thread (want_tables).
void run_in_order(const std::shared_ptr<session_entry>& e, app_context& app) {
    while (!e->work.empty()) {
        auto run = std::move(e->work.front().run);
        e->work.pop_front();
        run({});
    }
    want_tables(e, app);
}

// Hands `run` to the session's strand, behind the work already waiting there.
void in_order(const std::shared_ptr<session_entry>& e, app_context& app,
              std::function<void(std::string_view)> run) {
    app.on_pool(e->strand, [e, app = &app, run = std::move(run)]() mutable {
        e->work.push_back({std::move(run)});
        run_in_order(e, *app);
    });
}

} // namespace

namespace {

// What a live session's samples are called in the fleet store; null without one.
std::shared_ptr<const fleet_encoder::origin> fleet_origin(app_context& app,
                                                          const json::object& meta,
                                                          std::string_view agent_name,
                                                          const std::string& id) {
    if (!app.fleet)
        return nullptr;
    fleet_encoder::origin o;
    o.collector = app.collector_name;
    o.device = fleet_device(meta, agent_name);
    o.session = id;
    const auto* started = meta.if_contains("started_at");
    const double at = started && started->is_number() ? started->to_number<double>() : 0.0;
    o.wall_start_ns = static_cast<std::uint64_t>(std::max(at, 0.0) * 1e9);
    if (app.backlog)
        app.backlog->opened(id);
    return std::make_shared<const fleet_encoder::origin>(std::move(o));
}

} // namespace

boost::system::result<std::unique_ptr<live_session>>
live_session::open(app_context& app, std::string who, std::string_view agent_name,
                   const json::object& meta, std::function<void()> kernel_wanted) {
    auto created = app.sessions.create_live(agent_name, meta);
    if (!created)
        return created.error();
    auto fleet = fleet_origin(app, meta, agent_name, (*created)->id);
    return std::unique_ptr<live_session>(new live_session(
        app, std::move(*created), std::move(who), std::move(fleet), std::move(kernel_wanted)));
}

boost::system::result<std::unique_ptr<live_session>>
live_session::reopen(app_context& app, std::string who, std::string_view id,
                     std::function<void()> kernel_wanted) {
    const auto meta = app.store.meta(id);
    if (!meta)
        return boost::system::error_code(ENOENT, boost::system::system_category());
    auto entry = app.sessions.reopen_live(id);
    if (!entry)
        return entry.error();
    const auto* host = meta->if_contains("hostname");
    const std::string agent_name = host && host->is_string() ? std::string(host->as_string()) : "";
    auto fleet = fleet_origin(app, *meta, agent_name, (*entry)->id);
    app.changed(change::sessions, (*entry)->id);
    return std::unique_ptr<live_session>(new live_session(
        app, std::move(*entry), std::move(who), std::move(fleet), std::move(kernel_wanted)));
}

live_session::live_session(app_context& app, std::shared_ptr<session_entry> entry, std::string who,
                           std::shared_ptr<const fleet_encoder::origin> fleet,
                           std::function<void()> kernel_wanted)
    : app_(app)
    , entry_(std::move(entry))
    , who_(std::move(who))
    , fleet_(std::move(fleet))
    , kernel_wanted_(std::move(kernel_wanted)) {}

const std::string& live_session::id() const noexcept {
    return entry_->id;
}

bool live_session::wants_kernel_symbols() const noexcept {
    return entry_->wants_kernel_symbols;
}

void live_session::chunk(bool compressed, std::string payload,
                         std::function<void(bool stored)> digested, std::uint64_t seq) {
    auto data = std::make_shared<const std::string>(std::move(payload));
    in_order(entry_, app_,
             [e = entry_, app = &app_, who = who_, compressed, data, digested = std::move(digested),
              fleet = fleet_, kernel_wanted = kernel_wanted_, seq](std::string_view text) {
                 const bool stored =
                     ingest_chunk(*e, *app, who, compressed, *data, text, fleet.get(), seq);
                 if (e->model && !e->model->kernel && e->model->parser.stats().unnamed_kernel)
                     e->wants_kernel_symbols = true;
                 const bool unnamed_kernel = e->wants_kernel_symbols && kernel_wanted;
                 asio::post(app->io,
                            [app, id = e->id, digested, unnamed_kernel, kernel_wanted, stored] {
                                digested(stored);
                                app->changed(change::data, id);
                                if (unnamed_kernel)
                                    kernel_wanted();
                            });
             });
}

void live_session::metrics(std::string record) {
    app_.browsers->metrics(entry_->id, record);
    in_order(entry_, app_, [e = entry_, app = &app_, record = std::move(record)](std::string_view) {
        if (e->writer)
            (void)e->writer->append_metrics(record);
        if (!e->model)
            return;
        if (e->rebuilding)
            e->rebuilding->metrics.push_back(record);
        e->model->note_metrics(record);
        if (e->model->names_stale && !e->rebuilding && e->stale_rebuilds < max_stale_rebuilds) {
            // A build-id arrived after frames of its module were named without it (a few
            // times per session: an agent cannot make the collector replay at will).
            ++e->stale_rebuilds;
            rebuild_live(e, *app);
        }
    });
}

void live_session::kernel(std::shared_ptr<const kernel_symbols> table, std::string why) {
    in_order(entry_, app_,
             [e = entry_, app = &app_, table = std::move(table),
              why = std::move(why)](std::string_view) {
                 if (!e->model)
                     return;
                 if (!why.empty() || !table) {
                     e->model->kernel_note = why.empty() ? "the agent sent no kernel symbols" : why;
                     return;
                 }
                 if (!table->size()) {
                     e->model->kernel_note = "the agent sent no kernel symbols";
                     return;
                 }
                 if (e->writer)
                     (void)e->writer->write_kernel_symbols(table->text());
                 e->model->kernel = table;
                 e->wants_kernel_symbols = false;
                 rebuild_live(e, *app);
             });
}

// On the strand: a session named again with the symbols as they are now. Names only added:
// named in place, no replay from disk. That holds the session's strand (about 0.4 µs a site,
// bench/stripped), so a large live session is parsed again off it instead, its views answered
// meanwhile; a saved one would otherwise be parsed again whole when next viewed.
void name_session_again(const std::shared_ptr<session_entry>& e, app_context& app) {
    if (!e->loaded || !e->model)
        return;
    constexpr std::size_t live_in_place_sites = std::size_t{512} << 10;
    if (!e->rebuilding && (!e->writer || e->model->prof.site_count() <= live_in_place_sites)) {
        const auto done = e->model->name_again();
        if (done == script_parser::renaming::renamed) {
            log("session " + e->id + ": frames named in place with the new symbols");
            publish_counts(*e);
            ++e->version;
            asio::post(app.io, [app = &app, id = e->id] { app->changed(change::data, id); });
        }
        // It asked of tables not in memory (new settings, or forgotten): named again once they
        // are read, which is when a parse from the start could be told it is needed.
        if (!e->model->tables_wanted.empty()) {
            want_tables(e, app);
            if (e->reading_tables)
                return;
        }
        if (done != script_parser::renaming::reparse)
            return;
    }
    if (e->writer) {
        rebuild_live(e, app);
        return;
    }
    // Named again when next viewed: a new data version, so that pages drop what they kept of
    // the old names.
    e->model.reset();
    e->loaded = false;
    e->memory_bytes = 0;
    ++e->version;
    asio::post(app.io, [app = &app, id = e->id] { app->changed(change::data, id); });
}

void rename_frames(app_context& app) {
    if (app.stops.stopping())
        return; // the sessions are named again when they are next loaded
    const auto generation = app.symbols.generation();
    for (auto& e : app.sessions.entries())
        app.on_pool(e->strand, [e, app = &app, generation] {
            if (e->loaded && e->model && e->model->symbols_generation < generation) {
                e->table_rounds = 0; // new settings: their tables are read afresh
                name_session_again(e, *app);
            }
        });
}

void want_tables(const std::shared_ptr<session_entry>& e, app_context& app) {
    // A session named again a few times still wanting tables (forgotten meanwhile, past the
    // collector's share for them) keeps the names it has: its parse never waits for them.
    constexpr int max_rounds = 3;
    if (!e->model || e->model->tables_wanted.empty() || e->reading_tables || app.stops.stopping())
        return;
    auto wanted = std::exchange(e->model->tables_wanted, {});
    if (e->table_rounds >= max_rounds)
        return;
    ++e->table_rounds;
    e->reading_tables = true;
    app.on_pool(app.symbol_loads.get_executor(), [e, app = &app, wanted = std::move(wanted)] {
        using seconds = std::chrono::duration<double>;
        const auto began = std::chrono::steady_clock::now();
        for (const auto& [module, want] : wanted) {
            if (app->stops.stopping())
                break;
            app->symbols.load_table(module, want.build_id, want.remote);
        }
        if (const seconds took = std::chrono::steady_clock::now() - began;
            took > std::chrono::seconds(5)) {
            char s[32];
            std::snprintf(s, sizeof s, "%.1f s", took.count());
            log("session " + e->id, "read " + std::to_string(wanted.size()) +
                                        " symbol tables beside its parse in " + s);
        }
        app->on_pool(e->strand, [e, app] {
            e->reading_tables = false;
            name_session_again(e, *app);
            want_tables(e, *app); // more wanted meanwhile
        });
    });
}

void live_session::link_down(double at) {
    entry_->link_down_since = at;
    app_.changed(change::sessions, entry_->id);
}

void live_session::rate_change(double at, int from_hz, int to_hz, const std::string& callgraph,
                               const std::string& why) {
    if (++rate_changes_ > 64)
        return; // (a run's first 64 changes tell its story; an agent chooses how many it says)
    app_.changed(change::sessions, entry_->id);
    in_order(
        entry_, app_,
        [e = entry_, app = &app_, at, from_hz, to_hz, callgraph, why](std::string_view) {
            if (!e->writer)
                return;
            auto meta = app->store.meta(e->id).value_or(json::object());
            json::array all;
            if (const auto* before = meta.if_contains("rate_changes"); before && before->is_array())
                all = before->as_array();
            json::object c{{"at", at},
                           {"from_hz", from_hz},
                           {"to_hz", to_hz},
                           {"callgraph", callgraph},
                           {"why", why}};
            // On the session's clock: after its last sample so far.
            if (e->model && e->model->prof.sample_count())
                c["at_s"] =
                    static_cast<double>(e->model->prof.last_time() - e->model->prof.first_time()) /
                    1e9;
            all.push_back(std::move(c));
            meta["rate_changes"] = std::move(all);
            meta.erase("chunks");
            meta.erase("ended_at");
            (void)e->writer->write_meta(meta);
        });
}

void live_session::link_gap(double down, double up, std::uint64_t late) {
    entry_->link_down_since = 0;
    app_.changed(change::sessions, entry_->id);
    // In its metadata at once: a collector killed later still knows it.
    in_order(entry_, app_, [e = entry_, app = &app_, down, up, late](std::string_view) {
        if (!e->writer)
            return;
        auto meta = app->store.meta(e->id).value_or(json::object());
        const auto append = [&](std::string_view key, json::array entry) {
            json::array all;
            if (const auto* before = meta.if_contains(key); before && before->is_array())
                all = before->as_array();
            all.push_back(std::move(entry));
            meta[key] = std::move(all);
        };
        append("link_gaps", json::array{down, up, late});
        // On the session's clock (seconds from its first sample, as the timeline counts): from
        // its last sample before the link went, for as long as the link was down.
        if (e->model && e->model->prof.sample_count()) {
            const auto& p = e->model->prof;
            const double from = static_cast<double>(p.last_time() - p.first_time()) / 1e9;
            append("link_gaps_s", json::array{from, from + std::max(up - down, 0.0)});
        }
        meta.erase("chunks"); // (counted from the folder)
        meta.erase("ended_at");
        (void)e->writer->write_meta(meta);
    });
}

void live_session::end(double ended_at, std::optional<int> pid) {
    if (std::exchange(ended_, true))
        return;
    const bool run_open = run_open_;
    // Listed as live until its last chunks are parsed and its metadata is final: a session
    // listed as ended holds all it will hold (its samples, its counts).
    in_order(entry_, app_, [e = entry_, app = &app_, ended_at, pid, run_open](std::string_view) {
        // The metadata written at the first data, completed; disk work stays off the I/O
        // thread. A session that never held a sample (an agent that came and went, idle) is
        // not kept.
        const bool empty = !e->model || e->model->prof.sample_count() == 0;
        if (e->writer && !empty) {
            auto meta =
                final_meta(app->store.meta(e->id).value_or(json::object()), *e, ended_at, pid);
            if (run_open)
                meta["run_open"] = true; // its run goes on on the device: it may continue
            (void)e->writer->write_meta(meta);
        }
        e->writer.reset();
        if (empty)
            (void)app->store.remove(e->id);
        if (app->backlog) // checked once its batches are written
            app->backlog->ended(e->id);
        // It was being named again: the next view replays it all from disk (with the names as
        // they are then); a rebuild under way is given up.
        if (std::exchange(e->rebuilding, nullptr)) {
            e->model.reset();
            e->loaded = false;
            e->memory_bytes = 0;
        }
        asio::post(app->io, [app, id = e->id, empty] {
            app->sessions.set_live(id, false);
            if (empty)
                app->sessions.forget(id);
            app->changed(change::sessions, id);
        });
    });
}

} // namespace collector
