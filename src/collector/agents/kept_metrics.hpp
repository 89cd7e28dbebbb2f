// The last metrics record of each type on an agent's connection, and of binaries one a
// process (a whole-system run reports the busiest few): every new session of the connection
// starts with them. Agents send the binaries' build-ids only when they change, so a second run
// on the same process, or the next session of a continuous run, would otherwise have none.
#pragma once

#include "protocol/messages.hpp"

#include <map>
#include <string>

namespace collector::agents {

class kept_metrics {
public:
    static constexpr std::size_t max_records = 16; // each ≤ protocol::max_metrics_frame

    // `record`: `parsed` serialised again.
    void keep(const protocol::health_metrics& parsed, const std::string& record) {
        std::string key(protocol::metrics_type(parsed));
        if (const auto* b = std::get_if<protocol::binaries_metrics>(&parsed))
            key += ":" + std::to_string(b->pid);
        if (!records_.count(key) && records_.size() >= max_records)
            if (const auto old = records_.lower_bound("binaries:");
                old != records_.end() && old->first.starts_with("binaries:"))
                records_.erase(old);
        records_[key] = record;
    }
    // A type's record no later session should start with (a flight recorder's, once its run
    // is over).
    void forget(const std::string& type) { records_.erase(type); }
    // By type (and process), for a new session.
    const std::map<std::string, std::string>& records() const noexcept { return records_; }

private:
    std::map<std::string, std::string> records_;
};

} // namespace collector::agents
