#include "collector/symbols/debuginfod.hpp"

#include "collector/symbols/locate.hpp"

#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <filesystem>
#include <map>
#include <mutex>
#include <thread>
#include <unistd.h>
#include <utility>

#ifdef PERFWIRE_DEBUGINFOD
#include <elfutils/debuginfod.h>
#endif

namespace collector {
namespace {

constexpr std::size_t max_queued = 256;
constexpr std::size_t max_answers = 4096;

constexpr auto retry_failures_after = std::chrono::seconds(60);

struct answer {
    bool done = false;
    std::string path, why;
    std::chrono::steady_clock::time_point when; // answered
};

} // namespace

struct debuginfod_fetcher::state {
    std::string urls;
    std::function<void(bool found)> arrived;
    debuginfod_limits limits;
    // The downloads begun in the last hour, and the bytes fetched since start.
    std::deque<std::chrono::steady_clock::time_point> begun;
    std::uint64_t fetched_bytes = 0;
    std::size_t fetched_files = 0;
    // The download in progress (worker thread): when it began, when its last byte came, and
    // why it was cut short.
    std::chrono::steady_clock::time_point started, progressed;
    long received = 0;
    std::string cut;
    std::mutex mutex;
    std::condition_variable wake;
    std::deque<std::string> queue;
    std::map<std::string, answer> answers;
    std::deque<std::string> order; // answers, oldest first: the first forgotten
    bool stopping = false;
    std::thread worker;

    void run();
    answer fetch(const std::string& build_id);
};

bool debuginfod_fetcher::available() noexcept {
#ifdef PERFWIRE_DEBUGINFOD
    return true;
#else
    return false;
#endif
}

debuginfod_fetcher::debuginfod_fetcher(std::string urls, std::function<void(bool found)> arrived,
                                       debuginfod_limits limits)
    : state_(std::make_shared<state>()) {
    state_->urls = std::move(urls);
    state_->arrived = std::move(arrived);
    state_->limits = limits;
    if (!state_->urls.empty() && available())
        state_->worker = std::thread([s = state_] { s->run(); });
}

debuginfod_fetcher::~debuginfod_fetcher() {
    stop();
}

void debuginfod_fetcher::stop() {
    {
        std::lock_guard lock(state_->mutex);
        state_->stopping = true;
    }
    state_->wake.notify_all();
    if (state_->worker.joinable())
        state_->worker.join();
}

std::optional<std::string> debuginfod_fetcher::lookup(const std::string& build_id, std::string& why,
                                                      bool& pending) {
    pending = false;
    if (state_->urls.empty()) {
        why = "DEBUGINFOD_URLS is not set";
        return std::nullopt;
    }
    if (!available()) {
        why = "this collector was built without libdebuginfod";
        return std::nullopt;
    }
    if (!plausible_build_id(build_id)) {
        why = "not a build-id";
        return std::nullopt;
    }
    auto& s = *state_;
    std::lock_guard lock(s.mutex);
    if (const auto it = s.answers.find(build_id); it != s.answers.end()) {
        if (!it->second.done) {
            pending = true;
            why = "asked " + s.urls + ", waiting for the answer";
            return std::nullopt;
        }
        if (!it->second.path.empty())
            return it->second.path;
        if (std::chrono::steady_clock::now() - it->second.when < retry_failures_after) {
            why = it->second.why;
            return std::nullopt;
        }
        s.answers.erase(it); // a failure may have been the network's: asked again
    }
    if (s.queue.size() >= max_queued) {
        pending = true; // looked up again shortly
        why = "many build-ids are being asked for; this one waits its turn";
        return std::nullopt;
    }
    // The oldest answers are forgotten first (asked again if needed), never one in flight.
    while (s.answers.size() >= max_answers && !s.order.empty()) {
        if (const auto it = s.answers.find(s.order.front());
            it != s.answers.end() && it->second.done)
            s.answers.erase(it);
        s.order.pop_front();
    }
    // What agents can make the collector download: so many files an hour, so much in all.
    const auto now = std::chrono::steady_clock::now();
    while (!s.begun.empty() && now - s.begun.front() > std::chrono::hours(1))
        s.begun.pop_front();
    const std::string limit =
        s.fetched_bytes >= s.limits.total_bytes
            ? "this collector has fetched " + std::to_string(s.fetched_files) + " files (" +
                  std::to_string(s.fetched_bytes >> 20) +
                  " MiB) from debuginfod, its limit; a restart allows more"
        : s.begun.size() >= s.limits.per_hour
            ? std::to_string(s.limits.per_hour) +
                  " debuginfod downloads in the last hour, the most an hour; asked again later"
            : std::string();
    if (!limit.empty()) {
        s.answers[build_id] = {true, {}, limit, now};
        s.order.push_back(build_id);
        why = limit;
        return std::nullopt;
    }
    s.answers[build_id] = {};
    s.order.push_back(build_id);
    s.queue.push_back(build_id);
    s.begun.push_back(now);
    s.wake.notify_one();
    pending = true;
    why = "asked " + s.urls + ", waiting for the answer";
    return std::nullopt;
}

void debuginfod_fetcher::state::run() {
    bool answered_any = false, found_any = false;
    for (;;) {
        std::string id;
        {
            std::unique_lock lock(mutex);
            if (queue.empty() && answered_any) {
                // Everything asked is answered: the symbols are looked up again once (with
                // nothing found, so that the lookups say why rather than wait).
                const bool found = std::exchange(found_any, false);
                answered_any = false;
                lock.unlock();
                if (arrived)
                    arrived(found);
                lock.lock();
            }
            wake.wait(lock, [&] { return stopping || !queue.empty(); });
            if (stopping)
                return;
            id = std::move(queue.front());
            queue.pop_front();
        }
        auto a = fetch(id);
        a.when = std::chrono::steady_clock::now();
        std::error_code ec;
        const auto size = a.path.empty() ? 0 : std::filesystem::file_size(a.path, ec);
        std::lock_guard lock(mutex);
        answered_any = true;
        found_any = found_any || !a.path.empty();
        if (!a.path.empty()) {
            fetched_bytes += ec ? 0 : size;
            ++fetched_files;
        }
        answers[id] = std::move(a);
    }
}

answer debuginfod_fetcher::state::fetch([[maybe_unused]] const std::string& build_id) {
    answer a;
    a.done = true;
#ifdef PERFWIRE_DEBUGINFOD
    debuginfod_client* client = debuginfod_begin();
    if (!client) {
        a.why = "cannot start a debuginfod client";
        return a;
    }
    // Cut a transfer short when the collector stops, and one past the limits. Called about
    // once a second while it runs: before a server answered, with a count of calls and 0;
    // once one did, with the bytes so far and the file's size (when the server said it).
    // So bytes count as progress only once a size is known: a server that sends no answer,
    // or one without a size, has `stall` to finish.
    {
        std::lock_guard lock(mutex);
        started = progressed = std::chrono::steady_clock::now();
        received = 0;
        cut.clear();
    }
    debuginfod_set_user_data(client, this);
    debuginfod_set_progressfn(client, [](debuginfod_client* c, long got, long size) -> int {
        auto* self = static_cast<state*>(debuginfod_get_user_data(c));
        std::lock_guard lock(self->mutex);
        if (self->stopping)
            return 1;
        const auto now = std::chrono::steady_clock::now();
        const auto& l = self->limits;
        if (size > 0 && got > self->received) {
            self->received = got;
            self->progressed = now;
        }
        if (std::max(got, size) > 0 &&
            static_cast<std::uint64_t>(std::max(got, size)) > l.file_bytes)
            self->cut = "the debug file is larger than " + std::to_string(l.file_bytes >> 20) +
                        " MiB, the most one download may be";
        else if (now - self->progressed > l.stall)
            self->cut = "the server sent nothing for " + std::to_string(l.stall.count()) + " s";
        else if (now - self->started > l.deadline)
            self->cut =
                "the download took longer than " + std::to_string(l.deadline.count()) + " s";
        return self->cut.empty() ? 0 : 1;
    });
    char* path = nullptr;
    const int fd = debuginfod_find_debuginfo(
        client, reinterpret_cast<const unsigned char*>(build_id.c_str()), 0, &path);
    if (fd >= 0) {
        ::close(fd);
        a.path = path ? path : "";
    } else {
        std::lock_guard lock(mutex);
        a.why = !cut.empty()    ? "asking " + urls + " was given up: " + cut
                : fd == -ENOENT ? "not on " + urls
                                : "asking " + urls + " failed (error " + std::to_string(-fd) + ")";
    }
    std::free(path);
    debuginfod_end(client);
#else
    a.why = "this collector was built without libdebuginfod";
#endif
    return a;
}

} // namespace collector
