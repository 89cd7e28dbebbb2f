#include "collector/http/sse.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <utility>

namespace collector {

// Each line of `data` is its own "data:" field (the browser joins them with '\n'), so no
// payload can end the event early or start another: "\n\nevent: targets" stays data.
std::string sse_hub::format(std::string_view kind, std::string_view data) {
    std::string out;
    out.reserve(kind.size() + data.size() + 16);
    out.append("event: ").append(kind).append("\n");
    for (;;) {
        const auto nl = data.find_first_of("\r\n");
        out.append("data: ").append(data.substr(0, nl)).append("\n");
        if (nl == std::string_view::npos)
            break;
        data.remove_prefix(nl + (data.substr(nl, 2) == "\r\n" ? 2 : 1));
    }
    out.append("\n");
    return out;
}

void sse_hub::broadcast(std::string_view kind, std::string_view data) {
    if (clients_.empty())
        return;
    auto event = std::make_shared<const std::string>(format(kind, data));
    for (auto* c : clients_)
        if (!c->push(event))
            ++dropped_;
}

sse_client::sse_client(sse_hub& hub, asio::any_io_executor ex)
    : hub_(hub)
    , wake_(ex, asio::steady_timer::time_point::max()) {
    hub_.clients_.insert(this);
}

sse_client::~sse_client() {
    hub_.clients_.erase(this);
}

bool sse_client::push(std::shared_ptr<const std::string> event) {
    if (dropped_ || closed_)
        return true;
    // Dropped when what it has not read yet is at the cap: a browser that reads is never
    // dropped for one large event (a first picture of many targets, a burst of changes).
    if (queued_ >= hub_.cap_) {
        dropped_ = true; // the writer notices and ends the response
        queue_.clear();
        wake_.cancel();
        if (auto f = std::exchange(on_drop, nullptr))
            f();
        return false;
    }
    queued_ += event->size();
    queue_.push_back(std::move(event));
    wake_.cancel_one();
    return true;
}

void sse_client::close() {
    closed_ = true;
    wake_.cancel();
}

asio::awaitable<std::shared_ptr<const std::string>>
sse_client::next(std::chrono::steady_clock::duration heartbeat) {
    static const auto keepalive = std::make_shared<const std::string>(": keep-alive\n\n");
    if (queue_.empty() && !dropped_ && !closed_) {
        wake_.expires_after(heartbeat);
        (void)co_await wake_.async_wait(asio::as_tuple(asio::use_awaitable));
    }
    if (dropped_ || closed_)
        co_return nullptr;
    if (queue_.empty()) {
        queued_ += keepalive->size();
        co_return keepalive;
    }
    auto front = std::move(queue_.front());
    queue_.pop_front();
    co_return front;
}

} // namespace collector
