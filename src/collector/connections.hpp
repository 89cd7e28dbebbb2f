// What connections the collector holds at once, whoever opened them, and how its listeners
// behave when descriptors run out. No Asio here: the accept loops (http/server.cpp,
// agents/agent_link.cpp) ask and wait; this only counts.
//
// Every accepted connection takes a slot of its kind and gives it back when it ends. The caps
// are a share of the descriptors the process may open (RLIMIT_NOFILE, raised to its hard limit
// at start), so a flood of idle connections meets a cap long before it takes the descriptors
// that session files, symbolizers and the listeners themselves need. Agent connections that
// have not yet said a valid hello ("unproven": no token, no enrollment) have a cap of their
// own, far below the agents' total: a crowd of strangers cannot crowd out enrolled devices.
// When that cap is reached, a connection the per-address gate admitted may take the place of
// the oldest unproven one connected for at least `evictable_after` (which is closed):
// strangers that connect and say nothing cannot keep a device out by holding every unproven
// slot, nor cut one off in its handshake by connecting faster.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <string>

namespace collector {

struct connection_counts;

class connection_budget {
public:
    enum class kind { http, agent };
    struct caps {
        std::size_t http = 256;
        std::size_t agents = 1024;
        std::size_t unproven_agents = 128;
    };
    // The caps for a process that may open `descriptors` files: HTTP a quarter, agents half
    // (unproven ones an eighth of those), the rest for files, pipes and children.
    static caps for_descriptors(std::size_t descriptors);
    // Raises this process's soft RLIMIT_NOFILE to its hard limit; the limit now in force.
    static std::size_t raise_descriptor_limit();

    // What an agent connection does when every unproven slot is taken: is closed, or closes
    // the oldest unproven connection and takes its place.
    enum class when_full { refuse, evict_oldest };

    explicit connection_budget(caps c);

    class slot {
    public:
        slot() = default;
        slot(slot&& o) noexcept;
        slot& operator=(slot&& o) noexcept;
        slot(const slot&) = delete;
        slot& operator=(const slot&) = delete;
        ~slot();
        // An agent connection said a valid hello: it no longer counts as unproven.
        void prove();
        void release();
        // What closes this connection if a newer one takes its unproven slot (called on the
        // thread that takes slots; not once it is proven).
        void on_evict(std::function<void()> close);
        explicit operator bool() const noexcept { return owner_ != nullptr; }

    private:
        friend class connection_budget;
        slot(std::shared_ptr<connection_counts> owner, kind k);
        std::shared_ptr<connection_counts> owner_;
        kind kind_ = kind::http;
        std::uint64_t unproven_ = 0; // its place in the unproven list; 0 once proven
    };

    // An unproven connection younger than this is never closed for a newer one: a device in
    // the middle of its handshake finishes it, however fast strangers churn.
    static constexpr std::chrono::seconds evictable_after{2};

    // A slot, or nullopt when the kind's cap (or the unproven agents' cap) is reached.
    std::optional<slot>
    take(kind k, when_full w = when_full::refuse,
         std::chrono::steady_clock::time_point now = std::chrono::steady_clock::now());

    const caps& limits() const noexcept { return caps_; }
    std::size_t open(kind k) const noexcept;
    std::size_t unproven() const noexcept;
    std::uint64_t refused(kind k) const noexcept;
    // Unproven agent connections closed to make room for a newer one.
    std::uint64_t evicted() const noexcept;

private:
    caps caps_;
    std::shared_ptr<connection_counts> counts_;
};

// What the per-address connection limits count by: an IPv4 address as it is (an IPv4-mapped
// IPv6 one as IPv4), an IPv6 address by its /64 ("2001:db8:1:2::/64": one host is given a whole
// /64 and may pick any address in it). Anything else is returned unchanged.
std::string address_key(const std::string& address);

// When accept fails (EMFILE, ENFILE, ENOBUFS, ENOMEM: the connection is left in the kernel's
// queue, so accepting again at once fails again and spins): how long to wait before the next
// accept, 50 ms doubling to 2 s, back to nothing after a success. `describe` is the line to
// log, once per episode (empty when nothing should be logged).
class accept_backoff {
public:
    std::chrono::milliseconds failed(const std::string& error, std::string& describe);
    // An accept succeeded; the line to log if an episode of failures just ended.
    std::string succeeded();

private:
    std::chrono::milliseconds wait_{0};
    std::uint64_t failures_ = 0;
};

} // namespace collector
