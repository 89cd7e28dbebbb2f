#include "collector/connections.hpp"

#include <algorithm>
#include <arpa/inet.h>
#include <cstring>
#include <map>
#include <mutex>
#include <sys/resource.h>
#include <utility>

namespace collector {

struct connection_counts {
    std::atomic<std::size_t> http{0}, agents{0}, unproven{0};
    std::atomic<std::uint64_t> refused_http{0}, refused_agents{0}, evicted{0};
    // The unproven agent connections, oldest first, each with what closes it.
    std::mutex m;
    struct waiter {
        std::chrono::steady_clock::time_point since;
        std::function<void()> close;
    };
    std::map<std::uint64_t, waiter> waiting;
    std::uint64_t next = 1;

    // Drops `place` from the unproven list; whether it was there.
    bool leave(std::uint64_t place) {
        std::lock_guard lock(m);
        if (!waiting.erase(place))
            return false;
        --unproven;
        return true;
    }
};

connection_budget::caps connection_budget::for_descriptors(std::size_t descriptors) {
    caps c;
    c.http = std::clamp<std::size_t>(descriptors / 4, 16, 4096);
    c.agents = std::clamp<std::size_t>(descriptors / 2, 16, 16384);
    c.unproven_agents = std::clamp<std::size_t>(c.agents / 8, 8, 1024);
    return c;
}

std::size_t connection_budget::raise_descriptor_limit() {
    rlimit r{};
    if (::getrlimit(RLIMIT_NOFILE, &r) != 0)
        return 1024;
    if (r.rlim_cur < r.rlim_max) {
        rlimit raised = r;
        raised.rlim_cur = r.rlim_max;
        if (::setrlimit(RLIMIT_NOFILE, &raised) == 0)
            r = raised;
    }
    return r.rlim_cur == RLIM_INFINITY ? std::size_t{1} << 20
                                       : static_cast<std::size_t>(r.rlim_cur);
}

connection_budget::connection_budget(caps c)
    : caps_(c)
    , counts_(std::make_shared<connection_counts>()) {}

namespace {

// Takes one of `n` if fewer than `cap` are taken.
bool take_one(std::atomic<std::size_t>& n, std::size_t cap) {
    auto now = n.load();
    do {
        if (now >= cap)
            return false;
    } while (!n.compare_exchange_weak(now, now + 1));
    return true;
}

} // namespace

std::optional<connection_budget::slot>
connection_budget::take(kind k, when_full w, std::chrono::steady_clock::time_point now) {
    auto& c = *counts_;
    if (k == kind::http) {
        if (!take_one(c.http, caps_.http)) {
            ++c.refused_http;
            return std::nullopt;
        }
        return slot(counts_, k);
    }
    std::function<void()> evict;
    std::uint64_t place = 0;
    {
        std::lock_guard lock(c.m);
        if (c.waiting.size() >= caps_.unproven_agents) {
            // The oldest that can be closed gives its place (its slot in the agents' total is
            // given back when its connection ends), if it has had its time.
            const auto oldest = std::find_if(c.waiting.begin(), c.waiting.end(),
                                             [](const auto& kv) { return bool(kv.second.close); });
            if (w == when_full::refuse || oldest == c.waiting.end() ||
                now - oldest->second.since < evictable_after || c.agents.load() >= caps_.agents) {
                ++c.refused_agents;
                return std::nullopt;
            }
            evict = std::move(oldest->second.close);
            c.waiting.erase(oldest);
            --c.unproven;
            ++c.evicted;
        }
        if (!take_one(c.agents, caps_.agents)) {
            ++c.refused_agents;
            return std::nullopt;
        }
        place = c.next++;
        c.waiting.emplace(place, connection_counts::waiter{now, nullptr});
        ++c.unproven;
    }
    if (evict)
        evict();
    slot s(counts_, k);
    s.unproven_ = place;
    return s;
}

std::string address_key(const std::string& address) {
    in6_addr a{};
    if (::inet_pton(AF_INET6, address.c_str(), &a) != 1)
        return address;
    char text[INET6_ADDRSTRLEN] = {};
    if (IN6_IS_ADDR_V4MAPPED(&a)) {
        in_addr v4{};
        std::memcpy(&v4, a.s6_addr + 12, 4);
        return ::inet_ntop(AF_INET, &v4, text, sizeof text) ? std::string(text) : address;
    }
    std::memset(a.s6_addr + 8, 0, 8);
    return ::inet_ntop(AF_INET6, &a, text, sizeof text) ? std::string(text) + "/64" : address;
}

std::size_t connection_budget::open(kind k) const noexcept {
    return k == kind::http ? counts_->http.load() : counts_->agents.load();
}

std::size_t connection_budget::unproven() const noexcept {
    return counts_->unproven.load();
}

std::uint64_t connection_budget::refused(kind k) const noexcept {
    return k == kind::http ? counts_->refused_http.load() : counts_->refused_agents.load();
}

std::uint64_t connection_budget::evicted() const noexcept {
    return counts_->evicted.load();
}

connection_budget::slot::slot(std::shared_ptr<connection_counts> owner, kind k)
    : owner_(std::move(owner))
    , kind_(k) {}

connection_budget::slot::slot(slot&& o) noexcept
    : owner_(std::move(o.owner_))
    , kind_(o.kind_)
    , unproven_(std::exchange(o.unproven_, 0)) {}

connection_budget::slot& connection_budget::slot::operator=(slot&& o) noexcept {
    if (this != &o) {
        release();
        owner_ = std::move(o.owner_);
        kind_ = o.kind_;
        unproven_ = std::exchange(o.unproven_, 0);
    }
    return *this;
}

connection_budget::slot::~slot() {
    release();
}

void connection_budget::slot::prove() {
    if (owner_ && unproven_)
        owner_->leave(std::exchange(unproven_, 0));
}

void connection_budget::slot::on_evict(std::function<void()> close) {
    if (!owner_ || !unproven_)
        return;
    std::lock_guard lock(owner_->m);
    if (auto it = owner_->waiting.find(unproven_); it != owner_->waiting.end())
        it->second.close = std::move(close);
}

void connection_budget::slot::release() {
    if (!owner_)
        return;
    prove();
    --(kind_ == kind::http ? owner_->http : owner_->agents);
    owner_.reset();
}

std::chrono::milliseconds accept_backoff::failed(const std::string& error, std::string& describe) {
    describe.clear();
    if (failures_++ == 0)
        describe = "accept: " + error +
                   "; accepting again after a pause (said once until it "
                   "accepts again)";
    wait_ = std::clamp(wait_ * 2, std::chrono::milliseconds(50), std::chrono::milliseconds(2000));
    return wait_;
}

std::string accept_backoff::succeeded() {
    wait_ = std::chrono::milliseconds(0);
    if (failures_ == 0)
        return {};
    const auto n = std::exchange(failures_, 0);
    return "accepting again after " + std::to_string(n) + " failed accept" + (n == 1 ? "" : "s");
}

} // namespace collector
