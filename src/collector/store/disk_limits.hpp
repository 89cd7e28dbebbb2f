// What the sessions folder may take of its disk (--disk-budget, --disk-floor-mb,
// --session-disk-mb). A chunk past any bound is not written: the live session keeps it in
// memory (as on a full disk) and says why (store/session_store.hpp, disk_category()).
#pragma once

#include <cstdint>

namespace collector {

struct disk_limits {
    std::uint64_t budget = 0;      // bytes the folder may hold in all (0: no bound)
    std::uint64_t floor = 0;       // bytes its filesystem keeps free
    std::uint64_t per_session = 0; // bytes one session's chunks may take (0: no bound)
};

} // namespace collector
