// What must end when the collector stops: each long-lived thing on the I/O thread (a browser
// connection, an agent being dialled, an import reading its body) registers how to end it for
// as long as it runs, and stop() ends them all. Standard library only; I/O thread only, but
// for stopping(), which the pool's and the symbol loader's jobs ask too.
//
// The order of a shutdown is in docs/architecture.md ("Stopping"): stop accepting, end every
// connection and cancel the work (this registry), let the I/O loop drain, join the threads,
// then destroy.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <utility>

namespace collector {

class stop_registry {
public:
    // Registered while it lives; moved, not copied.
    class hook {
    public:
        hook() = default;
        hook(hook&& o) noexcept
            : owner_(std::exchange(o.owner_, nullptr))
            , id_(o.id_) {}
        hook& operator=(hook&& o) noexcept {
            if (this != &o) {
                release();
                owner_ = std::exchange(o.owner_, nullptr);
                id_ = o.id_;
            }
            return *this;
        }
        hook(const hook&) = delete;
        hook& operator=(const hook&) = delete;
        ~hook() { release(); }

    private:
        friend class stop_registry;
        hook(stop_registry* owner, std::uint64_t id)
            : owner_(owner)
            , id_(id) {}
        void release() {
            if (owner_)
                owner_->ends_.erase(id_);
            owner_ = nullptr;
        }
        stop_registry* owner_ = nullptr;
        std::uint64_t id_ = 0;
    };

    // `end` is called once by stop(); after stop() it is called at once (a connection
    // accepted just before the listener closed ends like the others).
    [[nodiscard]] hook on_stop(std::function<void()> end) {
        if (stopping_) {
            end();
            return {};
        }
        const auto id = next_++;
        ends_.emplace(id, std::move(end));
        return hook(this, id);
    }

    // Ends everything registered; what registers afterwards ends at once.
    void stop() {
        stopping_ = true;
        // An end may release other hooks (closing a connection ends its import): take each
        // out before calling it.
        while (!ends_.empty()) {
            auto end = std::move(ends_.begin()->second);
            ends_.erase(ends_.begin());
            end();
        }
    }

    bool stopping() const noexcept { return stopping_.load(); }
    std::size_t size() const noexcept { return ends_.size(); }

private:
    std::map<std::uint64_t, std::function<void()>> ends_;
    std::uint64_t next_ = 1;
    std::atomic<bool> stopping_{false};
};

} // namespace collector
