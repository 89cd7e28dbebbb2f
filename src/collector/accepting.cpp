#include "collector/accepting.hpp"

#include "collector/log.hpp"
#include "protocol/use_nothrow.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

namespace collector {
namespace asio = boost::asio;
using asio::ip::tcp;

budgeted_acceptor::budgeted_acceptor(tcp::acceptor& acceptor, connection_budget& budget,
                                     connection_budget::kind kind, std::string name)
    : acceptor_(acceptor)
    , budget_(budget)
    , kind_(kind)
    , name_(std::move(name)) {}

asio::awaitable<std::optional<std::pair<tcp::socket, connection_budget::slot>>>
budgeted_acceptor::next(const screen& look) {
    using protocol::use_nothrow;
    for (;;) {
        auto [ec, socket] = co_await acceptor_.async_accept(use_nothrow);
        if (ec) {
            if (ec == asio::error::operation_aborted || !acceptor_.is_open())
                co_return std::nullopt;
            std::string line;
            const auto wait = backoff_.failed(ec.message(), line);
            if (!line.empty())
                log(name_ + " listener", line);
            asio::steady_timer pause(co_await asio::this_coro::executor, wait);
            co_await pause.async_wait(use_nothrow);
            if (!acceptor_.is_open())
                co_return std::nullopt;
            continue;
        }
        if (const auto line = backoff_.succeeded(); !line.empty())
            log(name_ + " listener", line);
        auto w = connection_budget::when_full::refuse;
        if (look) {
            const auto verdict = look(socket);
            if (!verdict) {
                boost::system::error_code ignored;
                socket.close(ignored);
                continue;
            }
            w = *verdict;
        }
        auto slot = budget_.take(kind_, w);
        if (!slot) {
            const auto now = std::chrono::steady_clock::now();
            ++refused_;
            if (!cap_told_ && (!cap_said_ || now - *cap_said_ >= cap_quiet)) {
                cap_said_ = now;
                cap_told_ = true;
                const auto& caps = budget_.limits();
                const bool unproven =
                    kind_ == connection_budget::kind::agent && budget_.open(kind_) < caps.agents;
                log(name_ + " listener",
                    kind_ == connection_budget::kind::http
                        ? "at the cap of " + std::to_string(caps.http) +
                              " HTTP connections (--max-http-connections): new ones are closed "
                              "until some end"
                    : unproven ? "at the cap of " + std::to_string(caps.unproven_agents) +
                                     " agent connections without a valid hello yet (an eighth of "
                                     "--max-agent-connections): new ones are closed until some say "
                                     "hello or end"
                               : "at the cap of " + std::to_string(caps.agents) +
                                     " agent connections (--max-agent-connections): new ones are "
                                     "closed until some end");
            }
            boost::system::error_code ignored;
            socket.close(ignored);
            continue;
        }
        if (cap_told_) { // (refused since the last line, whether told or not)
            log(name_ + " listener", "accepting again; " + std::to_string(refused_) +
                                         " connection" + (refused_ == 1 ? "" : "s") +
                                         " closed at the cap");
            refused_ = 0;
            cap_told_ = false;
        }
        co_return std::make_pair(std::move(socket), std::move(*slot));
    }
}

} // namespace collector
