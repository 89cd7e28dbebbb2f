#include "collector/symbols/debuginfod.hpp"

#include "collector/symbols/locate.hpp"

#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <map>
#include <mutex>
#include <thread>
#include <unistd.h>

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
    std::function<void()> arrived;
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

debuginfod_fetcher::debuginfod_fetcher(std::string urls, std::function<void()> arrived)
    : state_(std::make_shared<state>()) {
    state_->urls = std::move(urls);
    state_->arrived = std::move(arrived);
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
    s.answers[build_id] = {};
    s.order.push_back(build_id);
    s.queue.push_back(build_id);
    s.wake.notify_one();
    pending = true;
    why = "asked " + s.urls + ", waiting for the answer";
    return std::nullopt;
}

void debuginfod_fetcher::state::run() {
    bool found_any = false;
    for (;;) {
        std::string id;
        {
            std::unique_lock lock(mutex);
            if (queue.empty() && found_any) {
                // Everything asked is answered: the symbols are looked up again once.
                found_any = false;
                lock.unlock();
                if (arrived)
                    arrived();
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
        std::lock_guard lock(mutex);
        found_any = found_any || !a.path.empty();
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
    // Cut a transfer short when the collector stops.
    debuginfod_set_user_data(client, this);
    debuginfod_set_progressfn(client, [](debuginfod_client* c, long, long) -> int {
        auto* self = static_cast<state*>(debuginfod_get_user_data(c));
        std::lock_guard lock(self->mutex);
        return self->stopping ? 1 : 0;
    });
    char* path = nullptr;
    const int fd = debuginfod_find_debuginfo(
        client, reinterpret_cast<const unsigned char*>(build_id.c_str()), 0, &path);
    if (fd >= 0) {
        ::close(fd);
        a.path = path ? path : "";
    } else {
        a.why = fd == -ENOENT ? "not on " + urls
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
