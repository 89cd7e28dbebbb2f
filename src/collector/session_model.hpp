// The parsed state of one session: the profile, the parser that fills it, the last perf stat
// report and what the agent said about its binaries. Touched by one thread at a time (the
// session's strand, or an import before the session is published). No Asio here.
#pragma once

#include "collector/model/profile.hpp"
#include "collector/parse/perf_script.hpp"
#include "collector/parse/perf_stat.hpp"
#include "collector/symbols/kernel_symbols.hpp"

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>

namespace collector {

class symbolizer;
class fleet_encoder;

struct session_model {
    // `names`: the collector's symbols, which name frames the device could not (for the
    // build the agent reported in its metrics); nullptr leaves them as perf printed them.
    explicit session_model(symbolizer* names = nullptr);
    ~session_model();
    session_model(const session_model&) = delete;
    session_model& operator=(const session_model&) = delete;

    profile prof;
    script_parser parser{prof};
    // The symbolizer's generation when this model was made (the names it holds).
    std::uint64_t symbols_generation = 0;
    // A recording the owner imported: modules without a build-id may be read at their paths
    // (locate.hpp, owner_recording). An agent's session: never.
    bool owner_recording = false;
    // The build-id to look a module's symbols up with.
    std::string build_id_of(const std::string& module) const;
    std::optional<stat_report> last_stat;
    std::string last_stat_text;
    // Every perf stat report together (each covers its own interval): per event, the sum of
    // what was counted and in how many intervals; the intervals' seconds.
    struct stat_total {
        double value = 0;
        std::string unit;
        std::uint64_t intervals = 0;
    };
    std::map<std::string, stat_total, std::less<>> stat_totals;
    std::uint64_t stat_intervals = 0;
    double stat_seconds = 0;
    std::uint64_t chunks = 0, bad_chunks = 0;
    std::set<std::string> event_types; // the profile's, and `wall` when it has what it needs
    std::size_t noted_events = 0;

    // One data frame's payload: decompressed (bounded), split at the stat marker, parsed.
    // Returns false for a chunk that could not be decompressed. `added` sees the samples it
    // added, [from, to), before any of them is folded (the fleet store's rows).
    bool ingest(bool compressed, std::string_view payload,
                const std::function<void(std::size_t from, std::size_t to)>& added = nullptr);
    // The rows this session's samples are in the fleet store (fleet/rows.hpp): made with
    // the first chunk a live session takes when the collector writes to one.
    std::unique_ptr<fleet_encoder> fleet;
    // A perf stat report that came with a chunk.
    void note_stat(std::string_view stat);
    // After samples were added: the event names seen so far.
    void note_events();

    // The collector's symbols are at a newer generation: frames nobody could name are named
    // in place where that is all that changed (script_parser::name_again); `reparse` when
    // only a new parse is exact (a name given would now be another, or the modules named
    // whole changed), the model then as it was.
    script_parser::renaming name_again();

    // The device's build-id of each binary the target mapped (module path -> hex), from the
    // agent's `binaries` metrics (frames of flag 4, or metrics_note lines in the text); other
    // metrics are ignored here. At most max_device_binaries paths of at most max_binary_path
    // bytes: an agent naming ever new files grows it no further (counted in memory_bytes).
    std::map<std::string, std::string> device_build_ids;
    std::size_t device_build_id_bytes = 0;
    static constexpr std::size_t max_device_binaries = 4096, max_binary_path = 4096;
    void note_metrics(std::string_view payload);
    // A build-id learned elsewhere (the model this one replaces), kept unless one is known for
    // the path already; within the same bounds.
    void keep_build_id(const std::string& path, const std::string& build_id);
    // Frames of these modules were named before their build-id was known: the names may be
    // of another build. note_metrics sets `names_stale` when one becomes known (the session
    // is then named again, see rename_frames).
    std::set<std::string, std::less<>> named_without_build_id;
    bool names_stale = false;

    // Symbol tables are read beside the parse, never in it: with `defer_tables`, a frame whose
    // module's table is not in memory keeps perf's name for now, and the table is wanted
    // here (module -> its build-id, and whether debuginfod may be asked); once it is read the
    // session is named again (name_again: in place, or a new parse where a function would
    // now be told apart). Without it (a model made alone, as the tests do), tables are read
    // as the parse asks for them.
    bool defer_tables = false;
    struct wanted_table {
        std::string build_id;
        bool remote = false;
    };
    std::map<std::string, wanted_table> tables_wanted;

    // The device's kernel symbols, when its agent sent them; or why they are not here.
    std::shared_ptr<const kernel_symbols> kernel;
    std::string kernel_note;

    std::size_t memory_bytes() const noexcept {
        return prof.memory_bytes() + parser.memory_bytes() + last_stat_text.size() +
               device_build_id_bytes;
    }

    // What this model may hold (the collector's memory budget shares it out, sessions.hpp).
    // Past it, the oldest samples are folded into rows per interval (profile::compact), the
    // newest half of what is left for samples staying whole; if the folded rows alone are
    // still too many, their interval widens fourfold at a time, up to `widest_fold`. A model
    // never stops taking samples: every count and unfiltered view stays exact, a time window
    // exact to the interval.
    std::size_t allowance = SIZE_MAX;
    static constexpr std::uint64_t first_fold = 1'000'000'000;            // 1 s
    static constexpr std::uint64_t widest_fold = 4096 * 1'000'000'000ULL; // 68 min
    // Called after samples were added (ingest does): brings the model within its allowance
    // as far as folding can. The samples folded.
    std::size_t fit();
    // The call tree's shape (frames, nodes, sites, threads, names: what folding cannot
    // shrink) may take half the allowance (by capacity: the growth that crosses it may take it
    // to the whole); past it a sample that needs a new one is counted at
    // profile::past_room_symbol (ingest and fit keep the bound).
    void bound_shape() noexcept;

private:
    std::unique_ptr<frame_namer> namer_;
};

} // namespace collector
