// Devices' kernel symbols: up to 96 MiB of text an answer, held a few times over while it is
// read and parsed, so they are asked of one agent at a time (the others wait in the order they
// asked), and parsed once for every device that runs the same kernel. On the I/O thread.
#pragma once

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/steady_timer.hpp>

#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>

namespace collector {
class kernel_symbols;
class stop_registry;
struct app_context;
} // namespace collector

namespace collector::agents {

class kernel_turns {
public:
    // Held while it is one's turn; the next in line is woken when it is let go.
    class turn {
    public:
        explicit turn(kernel_turns* owner)
            : owner_(owner) {}
        turn(turn&& o) noexcept
            : owner_(std::exchange(o.owner_, nullptr)) {}
        turn& operator=(turn&&) = delete;
        ~turn() {
            if (owner_)
                owner_->release();
        }

    private:
        kernel_turns* owner_;
    };

    // Waits for the turn; nullopt when `give_up` says so first (checked whenever a wait ends:
    // at the previous turn's end, every 30 s, and when the collector stops).
    boost::asio::awaitable<std::optional<turn>>
    take(boost::asio::any_io_executor ex, std::function<bool()> give_up, stop_registry& stops);
    bool busy() const noexcept { return busy_; }

private:
    void release();
    bool busy_ = false;
    std::deque<std::weak_ptr<boost::asio::steady_timer>> waiting_;
};

class command_link;

// The agent's answer to `kallsyms`: the table (shared by every session of that kernel), or
// why there is none (the agent refused: no --allow-kallsyms, or its kernel hides the
// addresses; the collector holds too many tables already).
struct kernel_answer {
    std::shared_ptr<const kernel_symbols> table;
    std::string why;
};

// Asks in its turn (the registry's queue); nullopt when the link closed or the collector
// stopped before it came.
boost::asio::awaitable<std::optional<kernel_answer>>
ask_kernel_symbols(app_context& app, std::shared_ptr<command_link> link);

} // namespace collector::agents
