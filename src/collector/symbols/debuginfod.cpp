#include "collector/symbols/debuginfod.hpp"

#include "collector/symbols/locate.hpp"

#include <cerrno>
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

struct answer {
    bool done = false;
    std::string path, why;
};

} // namespace

struct debuginfod_fetcher::state {
    std::string urls;
    std::function<void()> arrived;
    std::mutex mutex;
    std::condition_variable wake;
    std::deque<std::string> queue;
    std::map<std::string, answer> answers;
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
    std::lock_guard lock(state_->mutex);
    if (const auto it = state_->answers.find(build_id); it != state_->answers.end()) {
        if (!it->second.done) {
            pending = true;
            why = "asked " + state_->urls + ", waiting for the answer";
            return std::nullopt;
        }
        if (it->second.path.empty()) {
            why = it->second.why;
            return std::nullopt;
        }
        return it->second.path;
    }
    if (state_->queue.size() >= max_queued || state_->answers.size() >= max_answers) {
        why = "too many build-ids asked at once; asked again later";
        return std::nullopt;
    }
    state_->answers[build_id] = {};
    state_->queue.push_back(build_id);
    state_->wake.notify_one();
    pending = true;
    why = "asked " + state_->urls + ", waiting for the answer";
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
