#include "collector/agents/kernel_turns.hpp"

#include "collector/agents/command_link.hpp"
#include "collector/context.hpp"
#include "protocol/use_nothrow.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

namespace collector::agents {

void kernel_turns::release() {
    busy_ = false;
    while (!waiting_.empty()) {
        auto next = waiting_.front().lock();
        waiting_.pop_front();
        if (next) {
            next->cancel();
            return;
        }
    }
}

boost::asio::awaitable<std::optional<kernel_turns::turn>>
kernel_turns::take(boost::asio::any_io_executor ex, std::function<bool()> give_up,
                   stop_registry& stops) {
    while (busy_ && !give_up() && !stops.stopping()) {
        auto wait = std::make_shared<boost::asio::steady_timer>(ex, std::chrono::seconds(30));
        waiting_.push_back(wait);
        const auto stopping = stops.on_stop([wait] { wait->cancel(); });
        co_await wait->async_wait(protocol::use_nothrow);
    }
    if (give_up() || stops.stopping()) {
        if (!busy_)
            release(); // woken for a turn it will not take: the next one's
        co_return std::nullopt;
    }
    busy_ = true;
    co_return turn(this);
}

boost::asio::awaitable<std::optional<kernel_answer>>
ask_kernel_symbols(app_context& app, std::shared_ptr<command_link> link) {
    auto ex = co_await boost::asio::this_coro::executor;
    std::function<bool()> closed = [link] { return link->closed(); }; // (a local: GCC 12)
    auto turn = co_await app.agents.kernel_symbol_turns().take(ex, std::move(closed), app.stops);
    if (!turn)
        co_return std::nullopt;
    kernel_answer out;
    std::string text;
    {
        const auto r = co_await link->command(std::string(protocol::cmd::kallsyms), {});
        const auto* symbols = r.ok ? r.fields.if_contains("symbols") : nullptr;
        if (!r.ok)
            out.why = "the agent did not send them: " + r.error;
        else if (!symbols || !symbols->is_string() ||
                 symbols->as_string().size() > max_kernel_symbols_text)
            out.why = "the agent's answer held no symbols";
        else
            text = std::string(symbols->as_string());
    }
    // Parsed on the pool, once for every device that runs this kernel; the text is not kept.
    if (!text.empty()) {
        auto* tables = &app.symbols.kernels();
        auto parse = [tables, t = std::move(text)]()
            -> boost::asio::awaitable<std::shared_ptr<const kernel_symbols>> {
            co_return tables->get(t);
        };
        out.table =
            co_await boost::asio::co_spawn(app.pool, std::move(parse), boost::asio::use_awaitable);
        if (!out.table)
            out.why = kernel_tables::full;
    }
    co_return out;
}

} // namespace collector::agents
