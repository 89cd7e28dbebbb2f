#include "collector/agents/registry.hpp"

#include "collector/agents/agent_link.hpp"
#include "collector/agents/kernel_turns.hpp"
#include "collector/agents/runs.hpp"

namespace collector::agents {

registry::registry()
    : turns_(std::make_unique<kernel_turns>())
    , runs_(std::make_unique<run_book>()) {}

registry::~registry() = default;

std::string registry::next_id() {
    return "t" + std::to_string(next_++);
}

void registry::add(const std::string& id, std::weak_ptr<agent_link> link) {
    links_[id] = std::move(link);
}

void registry::remove(std::string_view id) {
    if (const auto it = links_.find(id); it != links_.end())
        links_.erase(it);
}

std::shared_ptr<agent_link> registry::find(std::string_view id) const {
    const auto it = links_.find(id);
    return it == links_.end() ? nullptr : it->second.lock();
}

std::vector<std::shared_ptr<agent_link>> registry::introduced() const {
    std::vector<std::shared_ptr<agent_link>> out;
    for (const auto& [id, weak] : links_)
        if (auto link = weak.lock(); link && link->introduced())
            out.push_back(std::move(link));
    return out;
}

} // namespace collector::agents
