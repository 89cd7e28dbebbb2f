#include "collector/sessions.hpp"

#include "collector/fleet/rows.hpp"
#include "collector/model/views.hpp"
#include "collector/symbols/symbolizer.hpp"
#include "protocol/compression.hpp"
#include "protocol/messages.hpp"

#include <boost/asio/post.hpp>

namespace collector {
namespace {

// The frames a device could not name, named by the collector's symbols for the build the
// agent reported.
class session_namer final : public frame_namer {
public:
    explicit session_namer(symbolizer& symbols, session_model& m)
        : symbols_(symbols)
        , model_(m) {
        const auto c = symbols.config();
        all_.insert(c.resymbolize.begin(), c.resymbolize.end());
    }

    bool names_all(std::string_view module) const override {
        return !all_.empty() && all_.count(module) != 0;
    }
    // Whether the modules named whole are still those the collector is set to.
    bool names_all_as_set() const {
        const auto c = symbols_.config();
        return std::set<std::string, std::less<>>(c.resymbolize.begin(), c.resymbolize.end()) ==
               all_;
    }
    symbolizer& symbols() const noexcept { return symbols_; }

    std::optional<name> name_frame(std::string_view module, std::uint64_t address) override {
        if (module == "[kernel.kallsyms]") {
            const auto k = model_.kernel ? model_.kernel->at(address) : std::nullopt;
            if (!k || address - k->start >= 0xFFFFFFFFULL)
                return std::nullopt;
            return name{std::string(k->name), static_cast<std::uint32_t>(address - k->start)};
        }
        const std::string m(module);
        const auto id = model_.build_id_of(m);
        if (!ready(m, id, true))
            return std::nullopt;
        auto answer = symbols_.name_frame(m, id, address);
        if (!answer)
            return std::nullopt;
        named_with(m, id);
        return name{std::move(answer->symbol), answer->offset};
    }

    std::vector<start> starts_of(std::string_view module, std::string_view symbol) override {
        if (module.empty() || module.front() != '/')
            return {};
        const std::string m(module);
        const auto id = model_.build_id_of(m);
        std::vector<start> out;
        if (!ready(m, id, false))
            return out;
        for (auto& s : symbols_.starts_of(m, id, std::string(symbol)))
            out.push_back({s.address, std::move(s.name)});
        if (!out.empty())
            named_with(m, id);
        return out;
    }

private:
    // Whether the table of `module` may be read now: in memory, or the model reads tables as
    // the parse asks. Else it is wanted (read beside the parse; model_.tables_wanted).
    bool ready(const std::string& module, const std::string& id, bool remote) {
        if (!model_.defer_tables || symbols_.has_table(module, id, remote))
            return true;
        auto& want = model_.tables_wanted[module];
        want.build_id = id;
        want.remote = want.remote || remote;
        return false;
    }

    // Frames of `module` were named with the symbols of build `id`: without one, named again
    // when the device reports it (rename_frames).
    void named_with(const std::string& module, const std::string& id) {
        if (id.empty() || id == owner_recording)
            model_.named_without_build_id.insert(module);
    }

    symbolizer& symbols_;
    session_model& model_;
    std::set<std::string, std::less<>> all_;
};

} // namespace

session_model::session_model(symbolizer* names) {
    parser.on_metrics_note([this](std::string_view record) { note_metrics(record); });
    if (!names)
        return;
    symbols_generation = names->generation();
    namer_ = std::make_unique<session_namer>(*names, *this);
    parser.name_frames_with(namer_.get());
}

session_model::~session_model() = default;

script_parser::renaming session_model::name_again() {
    auto* namer = static_cast<session_namer*>(namer_.get());
    if (!namer)
        return script_parser::renaming::unchanged;
    const auto generation = namer->symbols().generation();
    if (!namer->names_all_as_set())
        return script_parser::renaming::reparse;
    const auto done = parser.name_again();
    if (done == script_parser::renaming::reparse)
        return done;
    symbols_generation = generation;
    if (done == script_parser::renaming::renamed) {
        fleet.reset(); // its stacks are by node id: made again with the next chunk
        fit();         // named, a profile has more nodes
    }
    return done;
}

std::string session_model::build_id_of(const std::string& module) const {
    const auto it = device_build_ids.find(module);
    if (it != device_build_ids.end() && !it->second.empty())
        return it->second;
    return owner_recording ? std::string(collector::owner_recording) : std::string();
}

void session_model::keep_build_id(const std::string& path, const std::string& build_id) {
    if (path.size() > max_binary_path || device_build_ids.size() >= max_device_binaries)
        return;
    if (device_build_ids.try_emplace(path, build_id).second)
        device_build_id_bytes += path.size() + 128 + 64; // (the id at most, the node)
}

void session_model::note_metrics(std::string_view payload) {
    if (payload.find("\"binaries\"") == std::string_view::npos)
        return; // not worth a parse
    auto m = protocol::parse_metrics(payload);
    if (!m)
        return;
    if (const auto* b = std::get_if<protocol::binaries_metrics>(&*m))
        for (const auto& bin : b->binaries) {
            if (bin.path.size() > max_binary_path ||
                (!device_build_ids.count(bin.path) &&
                 device_build_ids.size() >= max_device_binaries))
                continue;
            keep_build_id(bin.path, "");
            device_build_ids[bin.path] = bin.build_id;
            names_stale = names_stale ||
                          (!bin.build_id.empty() && named_without_build_id.count(bin.path) != 0);
        }
}

bool session_model::ingest(bool compressed, std::string_view payload,
                           const std::function<void(std::size_t, std::size_t)>& added) {
    std::string text;
    if (compressed) {
        auto out = protocol::decompress(payload, protocol::max_chunk_text);
        if (!out) {
            ++bad_chunks;
            return false;
        }
        text = std::move(*out);
        payload = text;
    }
    const auto [script, stat] = split_perf_stat(payload);
    const auto before = prof.sample_count();
    bound_shape();
    parser.feed(script);
    parser.finish(); // chunks end on sample boundaries
    note_stat(stat);
    note_events();
    ++chunks;
    if (added && prof.sample_count() > before)
        added(before, prof.sample_count());
    fit();
    return true;
}

void session_model::bound_shape() noexcept {
    prof.set_shape_room(allowance == SIZE_MAX ? SIZE_MAX : allowance / 2);
}

std::size_t session_model::fit() {
    bound_shape();
    const std::size_t held = memory_bytes();
    if (held <= allowance)
        return 0;
    const std::size_t samples = prof.sample_bytes();
    const std::size_t fixed = held - samples;
    const std::size_t room = allowance > fixed ? allowance - fixed : 0;
    constexpr std::size_t whole_sample = 21; // bytes a sample kept whole takes (profile.hpp)
    const std::size_t folded =
        prof.compact(room / 2 / whole_sample, std::max(prof.compact_width(), first_fold));
    // Wider intervals only while the folded rows alone take more than their half, and only
    // while widening makes them fewer.
    const auto folded_bytes = [&] {
        return prof.compacted_rows() * (sizeof(std::uint64_t) * 2 + 4 * 3 + 1);
    };
    while (prof.compacted_rows() > 0 && folded_bytes() > room / 2 &&
           prof.compact_width() < widest_fold) {
        const auto rows = prof.compacted_rows();
        prof.coarsen(prof.compact_width() * 4);
        if (prof.compacted_rows() >= rows)
            break;
    }
    return folded;
}

void session_model::note_stat(std::string_view stat) {
    if (stat.empty())
        return;
    last_stat = parse_perf_stat(stat);
    last_stat_text = std::string(stat);
    ++stat_intervals;
    stat_seconds += last_stat->elapsed_seconds.value_or(0.0);
    for (const auto& c : last_stat->counters) {
        // At most 64 events (a report lists what the agent counted): a known one always adds.
        if (!c.value || (stat_totals.size() >= 64 && !stat_totals.count(c.event)))
            continue;
        auto& t = stat_totals[c.event];
        t.value += *c.value;
        t.unit = c.unit;
        ++t.intervals;
    }
}

void session_model::note_events() {
    if (prof.event_count() == noted_events)
        return;
    noted_events = prof.event_count();
    for (std::uint8_t e = 0; e < prof.event_count(); ++e)
        event_types.emplace(prof.event_name(e));
    if (has_wall(prof)) // on-CPU and off-CPU together: each thread's wall-clock time
        event_types.emplace(wall_event);
}

session_registry::session_registry(session_store& store, asio::thread_pool& pool,
                                   std::size_t budget_bytes, symbolizer* names)
    : store_(store)
    , pool_(pool)
    , budget_(budget_bytes)
    , names_(names) {}

boost::system::result<std::shared_ptr<session_entry>>
session_registry::create_live(std::string_view agent_name, const boost::json::object& meta) {
    auto writer = store_.create(agent_name, meta);
    if (!writer)
        return writer.error();
    auto e = std::make_shared<session_entry>(writer->id(), pool_);
    e->model = std::make_unique<session_model>(names_);
    e->model->defer_tables = true;
    e->allowance = memory_.allowance ? memory_.allowance : SIZE_MAX;
    e->model->allowance = e->allowance;
    e->loaded = true;
    e->writer.emplace(std::move(*writer));
    e->live = true;
    entries_[e->id] = e;
    live_.insert(e->id);
    gone_.erase(e->id); // (an id made again, in the second of one removed)
    return e;
}

boost::system::result<std::shared_ptr<session_entry>>
session_registry::reopen_live(std::string_view id) {
    auto e = find(id);
    if (!e)
        return boost::system::error_code(ENOENT, boost::system::system_category());
    auto writer = store_.reopen(id);
    if (!writer)
        return writer.error();
    auto w = std::make_shared<session_writer>(std::move(*writer));
    e->allowance = memory_.allowance ? memory_.allowance : SIZE_MAX;
    e->live = true;
    live_.emplace(e->id);
    gone_.erase(e->id);
    asio::post(e->strand, [e, w, store = &store_, names = names_] {
        ensure_loaded(*e, *store, names);
        e->writer.emplace(std::move(*w));
        publish_counts(*e);
    });
    return e;
}

std::shared_ptr<session_entry> session_registry::adopt(std::string id,
                                                       std::unique_ptr<session_model> model) {
    auto e = std::make_shared<session_entry>(std::move(id), pool_);
    e->memory_bytes = model->memory_bytes();
    e->allowance = saved_share();
    e->model = std::move(model);
    publish_counts(*e);
    e->loaded = true;
    e->last_used = ++clock_;
    entries_[e->id] = e;
    gone_.erase(e->id);
    evict_over_budget(e.get());
    return e;
}

std::shared_ptr<session_entry> session_registry::find(std::string_view id) {
    if (!session_store::valid_id(id))
        return nullptr;
    std::shared_ptr<session_entry> e;
    if (const auto it = entries_.find(id); it != entries_.end()) {
        e = it->second;
    } else {
        if (!store_.meta(id))
            return nullptr;
        e = std::make_shared<session_entry>(std::string(id), pool_);
        e->allowance = saved_share(); // loaded within it when first viewed
        entries_[e->id] = e;
    }
    e->last_used = ++clock_;
    evict_over_budget(e.get());
    return e;
}

std::shared_ptr<session_entry> session_registry::known(std::string_view id) const {
    const auto it = entries_.find(id);
    return it == entries_.end() ? nullptr : it->second;
}

std::vector<std::shared_ptr<session_entry>> session_registry::entries() const {
    std::vector<std::shared_ptr<session_entry>> out;
    out.reserve(entries_.size());
    for (const auto& [id, e] : entries_)
        out.push_back(e);
    return out;
}

std::size_t session_registry::saved_bytes() const {
    std::size_t sum = 0;
    for (const auto& [id, e] : entries_)
        if (!is_live(id))
            sum += e->memory_bytes.load();
    return sum;
}

std::size_t session_registry::saved_share() const noexcept {
    return std::min(budget_, total_budget_ == SIZE_MAX ? SIZE_MAX : total_budget_ / 4 * 3 / 4);
}

void session_registry::evict_over_budget(const session_entry* keep) {
    evict_saved_over(saved_share(), keep);
}

void session_registry::set_memory_budget(std::size_t total, std::size_t live_cap) {
    total_budget_ = total;
    live_cap_ = live_cap;
    if (names_) { // devices' kernel tables, and modules' symbol tables: a quarter each at most
        names_->kernels().set_limit(total / 4);
        names_->set_table_limit(total == SIZE_MAX ? SIZE_MAX : total / 4);
    }
    memory_.budget = total;
    memory_.allowance = live_cap;
}

memory_use session_registry::memory() const {
    memory_use m;
    m.budget = memory_.budget;
    m.allowance = memory_.allowance;
    m.kernel = names_ ? names_->kernels().memory_bytes() : 0;
    m.symbols = names_ ? names_->table_bytes() : 0;
    for (const auto& [id, e] : entries_) {
        if (is_live(id)) {
            m.live += e->memory_bytes.load();
            m.folded += e->folded.load();
            ++m.live_sessions;
        } else if (const auto held = e->memory_bytes.load()) {
            m.saved += held;
            ++m.saved_loaded;
        }
    }
    return m;
}

memory_use session_registry::enforce() {
    // The saved session used last stays (it is likely on someone's screen): unloading it
    // would make its next view replay it.
    const session_entry* recent = nullptr;
    for (const auto& [id, e] : entries_)
        if (!is_live(id) && e->memory_bytes.load() && (!recent || e->last_used > recent->last_used))
            recent = e.get();
    evict_saved_over(saved_share(), recent);
    memory_use m = memory();
    const std::size_t share = total_budget_ / 4 * 3;
    const std::size_t tables = m.kernel + m.symbols;
    const std::size_t models = share > tables ? share - tables : 0;
    std::vector<std::shared_ptr<session_entry>> live;
    for (const auto& id : live_)
        if (const auto it = entries_.find(id); it != entries_.end())
            live.push_back(it->second);
    constexpr std::size_t least = memory_use::least_allowance;
    const std::size_t left = models > m.saved ? models - m.saved : 0;
    m.allowance =
        std::min(live_cap_, live.empty() ? live_cap_ : std::max(least, left / live.size()));
    for (const auto& e : live) {
        e->allowance = m.allowance;
        if (e->memory_bytes.load() <= m.allowance || e->fitting.exchange(true))
            continue;
        // A session that takes no chunk now (its agent paused) folds too.
        asio::post(e->strand, [e] {
            if (e->model && e->loaded) {
                e->model->allowance = e->allowance.load();
                e->model->fit();
                publish_counts(*e);
            }
            e->fitting = false;
        });
    }
    memory_.allowance = m.allowance;
    return m;
}

void session_registry::evict_saved_over(std::size_t limit, const session_entry* keep) {
    std::size_t sum = saved_bytes();
    while (sum > limit) {
        session_entry* oldest = nullptr;
        std::shared_ptr<session_entry> victim;
        for (const auto& [id, e] : entries_)
            if (e.get() != keep && e->memory_bytes.load() && !is_live(id) &&
                (!oldest || e->last_used < oldest->last_used)) {
                oldest = e.get();
                victim = e;
            }
        if (!victim)
            return; // only the session in use is loaded: it stays, whatever its size
        sum -= victim->memory_bytes.exchange(0);
        // The model belongs to the strand: unload it there, after any view already queued.
        asio::post(victim->strand, [victim] {
            if (!victim->loaded || victim->writer)
                return;
            victim->model.reset();
            victim->loaded = false;
            victim->memory_bytes = 0;
        });
    }
}

void session_registry::forget(std::string_view id) {
    if (const auto it = entries_.find(id); it != entries_.end())
        entries_.erase(it);
    if (const auto it = live_.find(id); it != live_.end())
        live_.erase(it);
    if (gone_.emplace(id, ++gone_count_).second) {
        gone_order_.emplace_back(std::string(id), gone_count_);
        if (gone_order_.size() > max_gone) {
            const auto& [oldest, stamp] = gone_order_.front();
            if (const auto it = gone_.find(oldest); it != gone_.end() && it->second == stamp)
                gone_.erase(it);
            gone_order_.pop_front();
        }
    }
}

bool session_registry::gone(std::string_view id) const {
    return gone_.find(id) != gone_.end();
}

bool session_registry::is_live(std::string_view id) const {
    return live_.find(id) != live_.end();
}

void session_registry::set_live(std::string_view id, bool live) {
    if (const auto it = entries_.find(id); it != entries_.end()) {
        it->second->live = live;
        if (!live) // a saved session now: loaded again within a saved one's share
            it->second->allowance = saved_share();
    }
    if (live)
        live_.emplace(id);
    else if (const auto it = live_.find(id); it != live_.end())
        live_.erase(it);
}

std::uint64_t session_entry::unsaved_samples() const {
    std::uint64_t n = dropped_samples;
    for (const auto& u : unsaved)
        n += u.samples;
    return n;
}

namespace {

// Stores a chunk after any kept from before (in order); false when it could not be written
// now: it is then kept, and `e.store_error` says why.
bool store_chunk(session_entry& e, bool compressed, std::string_view payload, std::uint64_t seq) {
    if (!e.writer)
        return true;
    // What waits goes first, so the recording keeps the order the chunks arrived in.
    while (!e.unsaved.empty()) {
        auto& first = e.unsaved.front();
        if (auto ec = e.writer->write_chunk(first.compressed, first.payload, first.seq)) {
            e.store_error = ec.message();
            break;
        }
        e.unsaved_bytes -= first.payload.size();
        e.unsaved.pop_front();
    }
    if (e.unsaved.empty()) {
        const auto ec = e.writer->write_chunk(compressed, payload, seq);
        if (!ec)
            return true;
        e.store_error = ec.message();
    }
    e.unsaved.push_back({compressed, std::string(payload), 0, seq});
    e.unsaved_bytes += payload.size();
    while (e.unsaved_bytes > max_unsaved_bytes && e.unsaved.size() > 1) {
        e.unsaved_bytes -= e.unsaved.front().payload.size();
        ++e.dropped_chunks;
        e.dropped_samples += e.unsaved.front().samples;
        e.unsaved.pop_front();
    }
    return false;
}

// How many samples the chunk just stored brought: counted as unsaved while it waits.
void chunk_samples(session_entry& e, std::uint64_t samples) {
    if (!e.unsaved.empty() && e.unsaved.back().samples == 0)
        e.unsaved.back().samples = samples;
}

// The metadata with `unsaved_chunks` / `unsaved_samples` as they are now.
void note_unsaved(session_entry& e, const session_store& store) {
    if (!e.writer)
        return;
    auto meta = store.meta(e.id).value_or(boost::json::object());
    meta["unsaved_chunks"] = e.unsaved_chunks();
    meta["unsaved_samples"] = e.unsaved_samples();
    meta["store_error"] = e.store_error;
    (void)e.writer->write_meta(meta); // best effort: the disk may still be full
}

} // namespace

chunk_taken take_chunk(session_entry& e, const session_store& store, bool compressed,
                       std::string_view payload, const std::function<bool()>& parse,
                       std::uint64_t seq) {
    chunk_taken out;
    const auto unsaved_before = e.unsaved_chunks();
    const bool suspect = e.junk_bytes >= session_entry::max_junk_bytes;
    const auto keep = [&] {
        out.stored = store_chunk(e, compressed, payload, seq);
        if (e.rebuilding) // a new model is being built from the chunks stored before this one
            e.rebuilding->chunks.emplace_back(compressed, std::string(payload));
    };
    if (!suspect)
        keep();
    const auto samples_before = e.model->prof.sample_count();
    const auto stats_before = e.model->stat_intervals;
    out.parsed = parse();
    const bool brought =
        e.model->prof.sample_count() > samples_before || e.model->stat_intervals > stats_before;
    if (brought && suspect) {
        keep();
    } else if (!brought && !suspect) {
        e.junk_bytes += payload.size();
    } else if (!brought) {
        out.first_refused = !e.refused_chunks++;
        e.refused_bytes += payload.size();
    }
    if (!out.stored)
        chunk_samples(e, e.model->prof.sample_count() - samples_before);
    if (e.unsaved_chunks() != unsaved_before) {
        out.saved_again = out.stored;
        out.unsaved_noted = true;
        note_unsaved(e, store);
    }
    publish_counts(e);
    ++e.version;
    return out;
}

model_seed seed_of(const session_entry& e) {
    model_seed seed;
    if (e.model) {
        seed.device_build_ids.insert(e.model->device_build_ids.begin(),
                                     e.model->device_build_ids.end());
        seed.kernel = e.model->kernel;
        seed.kernel_note = e.model->kernel_note;
    }
    for (const auto& u : e.unsaved)
        seed.unsaved.emplace_back(u.compressed, u.payload);
    return seed;
}

std::unique_ptr<session_model> build_model(const session_store& store, const std::string& id,
                                           symbolizer* names, std::size_t allowance,
                                           const model_seed& seed, std::size_t max_chunks,
                                           const samples_added& added) {
    auto fresh = std::make_unique<session_model>(names);
    fresh->defer_tables = true; // read beside the parse (live_session.cpp, want_tables)
    fresh->allowance = allowance;
    fresh->owner_recording = store.owner_import(id); // never what an agent said of itself
    // The build-ids and the kernel's symbols first: frames are named for what ran. What
    // reached memory but not the disk is kept from the model in place.
    for (const auto& line : store.metrics(id))
        fresh->note_metrics(line);
    const auto kept = store.kernel_symbols(id);
    if (kept)
        fresh->kernel = names
                            ? names->kernels().get(*kept)
                            : std::make_shared<const kernel_symbols>(kernel_symbols::parse(*kept));
    for (const auto& [module, build] : seed.device_build_ids)
        fresh->keep_build_id(module, build);
    if (!fresh->kernel)
        fresh->kernel = seed.kernel;
    fresh->kernel_note = seed.kernel_note;
    if (kept && !fresh->kernel)
        fresh->kernel_note = kernel_tables::full;
    std::function<void(std::size_t, std::size_t)> hook;
    if (added)
        hook = [&](std::size_t from, std::size_t to) { added(*fresh, from, to); };
    const auto take = [&](bool compressed, std::string_view payload) {
        fresh->ingest(compressed, payload, hook);
    };
    fresh->parser.memoize_frames(true); // (a whole session's text at once)
    (void)store.replay(id, take, max_chunks);
    for (const auto& [compressed, payload] : seed.unsaved)
        take(compressed, payload);
    fresh->parser.memoize_frames(false);
    return fresh;
}

void load_model(session_entry& e, const session_store& store, symbolizer* names) {
    e.rebuilding.reset(); // made whole here: a rebuild under way is given up
    e.model = build_model(store, e.id, names, e.allowance.load(), seed_of(e), SIZE_MAX);
    publish_counts(e);
    ++e.version;
}

void publish_counts(session_entry& e) {
    const auto& prof = e.model->prof;
    e.samples = prof.sample_count();
    e.chunks = e.model->chunks;
    e.memory_bytes = e.model->memory_bytes();
    e.sample_bytes = prof.sample_bytes();
    e.folded = prof.sample_count() - prof.raw_samples();
    e.lost_samples = e.model->parser.stats().lost_events;
    e.threads = prof.threads().size();
    e.span_ns = prof.sample_count() ? prof.last_time() - prof.first_time() : 0;
    session_entry::label l{std::string(process_name(prof, std::nullopt)),
                           {e.model->event_types.begin(), e.model->event_types.end()}};
    if (!(l == e.named()))
        e.name(std::move(l));
}

void ensure_loaded(session_entry& e, const session_store& store, symbolizer* names) {
    if (e.loaded)
        return;
    load_model(e, store, names);
    e.loaded = true;
    e.memory_bytes = e.model->memory_bytes();
}

} // namespace collector
