// The agents this collector serves: each connection's target id and link, and what they share
// (the turn for sending something large). Lives in the app context, on the I/O thread. No
// Asio here: widely included.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace collector {
class agent_link;
}

namespace collector::agents {

class kernel_turns;
class run_book;

class registry {
public:
    registry();
    ~registry();
    registry(const registry&) = delete;
    registry& operator=(const registry&) = delete;

    // A new target id: "t1", "t2", … never given twice by one collector.
    std::string next_id();
    // A connection, listed from its accept (or dial) until its link ends.
    void add(const std::string& id, std::weak_ptr<agent_link> link);
    void remove(std::string_view id);
    // The link of a connection that is still open; null otherwise.
    std::shared_ptr<agent_link> find(std::string_view id) const;
    // The connected agents that said hello, in the order of their ids as strings ("t10" <
    // "t9").
    std::vector<std::shared_ptr<agent_link>> introduced() const;
    // Devices' kernel symbols (up to 96 MiB of text an answer) are asked of one agent at a
    // time.
    kernel_turns& kernel_symbol_turns() noexcept { return *turns_; }
    // Runs that outlive their links (runs.hpp).
    run_book& runs() noexcept { return *runs_; }
    const run_book& runs() const noexcept { return *runs_; }

private:
    std::map<std::string, std::weak_ptr<agent_link>, std::less<>> links_;
    std::uint64_t next_ = 1;
    std::unique_ptr<kernel_turns> turns_;
    std::unique_ptr<run_book> runs_;
};

} // namespace collector::agents
