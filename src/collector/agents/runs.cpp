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

const run_book::run* run_book::peek(std::string_view key) const {
    const auto it = runs_.find(key);
    return it == runs_.end() ? nullptr : &it->second;
}

run_book::run& run_book::at(const std::string& key) {
    if (auto* known = find(key))
        return *known;
    if (runs_.size() >= max_runs) {
        // Forgotten first: a run that ended; never one a link holds, one parked, or one whose
        // session waits on disk for its device.
        auto oldest = runs_.end();
        for (auto it = runs_.begin(); it != runs_.end(); ++it) {
            const auto& r = it->second;
            if (r.parked || r.on_disk || (!r.ended && !r.holder.expired()))
                continue;
            if (oldest == runs_.end() || r.touched < oldest->second.touched)
                oldest = it;
        }
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

std::vector<std::unique_ptr<live_session>> run_book::parked_beyond(std::string_view device,
                                                                   std::size_t keep) {
    std::vector<std::map<std::string, run, std::less<>>::iterator> of_device;
    const std::string prefix = key(device, "");
    for (auto it = runs_.lower_bound(prefix);
         it != runs_.end() && it->first.compare(0, prefix.size(), prefix) == 0; ++it)
        if (it->second.parked)
            of_device.push_back(it);
    std::sort(of_device.begin(), of_device.end(),
              [](const auto& a, const auto& b) { return a->second.touched < b->second.touched; });
    std::vector<std::unique_ptr<live_session>> out;
    for (std::size_t i = 0; i + keep < of_device.size(); ++i) {
        out.push_back(std::move(of_device[i]->second.parked));
        of_device[i]->second.ended = true;
    }
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
        // Every session of the run counts for what is stored (a continuous run is cut into
        // several); the open one with the highest number is the one that goes on.
        auto& r = at(key(device->as_string(), run_id->as_string()));
        const std::string session(id->as_string());
        const auto last = store.last_run_seq(session);
        const bool newer = last >= r.received;
        r.received = r.stored = std::max(r.received, last);
        if (!still_open) {
            r.ended = r.ended || !r.on_disk;
            continue;
        }
        if (r.on_disk && !newer)
            continue;
        r.ended = false;
        r.session_id = session;
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
