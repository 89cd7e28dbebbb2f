#include "protocol/off_cpu.hpp"

namespace protocol {

std::string_view wait_kind(std::string_view prev_state) noexcept {
    if (prev_state == "S")
        return "[sleeping]";
    if (prev_state == "D")
        return "[uninterruptible: I/O]";
    if (!prev_state.empty() && prev_state.front() == 'R')
        return "[preempted]";
    if (prev_state.empty())
        return "[off-cpu]";
    if (prev_state.find('D') != std::string_view::npos)
        return "[uninterruptible: I/O]";
    if (prev_state.find('S') != std::string_view::npos)
        return "[sleeping]";
    if (prev_state.find_first_of("Tt") != std::string_view::npos)
        return "[stopped]";
    return "[off-cpu: other]";
}

std::string_view switch_prev_state(std::string_view args) noexcept {
    // prev_comm may hold anything a thread name can, " prev_state=" too: the one followed by
    // state letters and " ==> " is perf's.
    constexpr std::string_view key = " prev_state=";
    for (auto at = args.find(key); at != std::string_view::npos; at = args.find(key, at + 1)) {
        const auto v = args.substr(at + key.size());
        const auto end = v.find(' ');
        const auto state = v.substr(0, end);
        if (end != std::string_view::npos && v.substr(end).rfind(" ==> ", 0) == 0 &&
            !state.empty() && state.size() <= 8 &&
            state.find_first_not_of("RSDTtXZPIKWNn+|") == std::string_view::npos)
            return state;
    }
    return {};
}

} // namespace protocol
