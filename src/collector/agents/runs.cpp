#include "collector/agents/runs.hpp"

#include "collector/live_session.hpp"
#include "collector/store/session_store.hpp"

#include <algorithm>

namespace collector::agents {

run_book::run_book() = default;
run_book::~run_book() = default;

std::string run_book::key(std::string_view device, std::string_view run_id) {
    std::string k(device);
    k.push_back('\n');
    k.append(run_id);
    return k;
}

run_book::run* run_book::find(std::string_view key) {
    const auto it = runs_.find(key);
    if (it == runs_.end())
        return nullptr;
    it->second.touched = ++clock_;
    return &it->second;
}

run_book::run& run_book::at(const std::string& key) {
    if (auto* known = find(key))
        return *known;
    if (runs_.size() >= max_runs) {
        auto oldest = runs_.end();
        for (auto it = runs_.begin(); it != runs_.end(); ++it)
            if (!it->second.parked &&
                (oldest == runs_.end() || it->second.touched < oldest->second.touched))
                oldest = it;
        if (oldest != runs_.end())
            runs_.erase(oldest);
    }
    auto& r = runs_[key];
    r.touched = ++clock_;
    return r;
}

std::vector<std::unique_ptr<live_session>>
run_book::expired(std::chrono::steady_clock::time_point now) {
    std::vector<std::unique_ptr<live_session>> out;
    for (auto& [k, r] : runs_)
        if (r.parked && r.wait_until <= now) {
            out.push_back(std::move(r.parked));
            r.ended = true;
        }
    return out;
}

std::vector<std::unique_ptr<live_session>> run_book::take_all_parked() {
    std::vector<std::unique_ptr<live_session>> out;
    for (auto& [k, r] : runs_)
        if (r.parked)
            out.push_back(std::move(r.parked));
    return out;
}

void run_book::recall(const session_store& store) {
    for (const auto& meta : store.list()) {
        const auto* run_id = meta.if_contains("run_id");
        const auto* device = meta.if_contains("run_device");
        const auto* id = meta.if_contains("id");
        const auto* ended = meta.if_contains("ended_at");
        const auto* open = meta.if_contains("run_open");
        if (!run_id || !run_id->is_string() || !device || !device->is_string() || !id ||
            !id->is_string())
            continue;
        const bool still_open =
            !ended || ended->is_null() || (open && open->is_bool() && open->as_bool());
        if (!still_open)
            continue;
        auto& r = at(key(device->as_string(), run_id->as_string()));
        r.session_id = std::string(id->as_string());
        r.received = r.stored = store.last_run_seq(r.session_id);
        r.on_disk = true;
        const auto* continuous = meta.if_contains("continuous");
        r.continuous = continuous && continuous->is_bool() && continuous->as_bool();
        // Down since the stop, or (a crash) since its last chunk was written.
        r.link_down_at = ended && ended->is_number() ? ended->to_number<double>()
                                                     : store.last_chunk_time(r.session_id);
    }
}

std::size_t run_book::parked() const {
    return static_cast<std::size_t>(std::count_if(
        runs_.begin(), runs_.end(), [](const auto& kv) { return !!kv.second.parked; }));
}

} // namespace collector::agents
