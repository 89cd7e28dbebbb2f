#include "protocol/descriptors.hpp"

#include <algorithm>
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace protocol {

void close_on_exec_from_3() noexcept {
#if defined(SYS_close_range)
    if (::syscall(SYS_close_range, 3U, ~0U, 4U /* CLOSE_RANGE_CLOEXEC, Linux 5.11 */) == 0)
        return;
#endif
    rlimit lim{};
    const rlim_t top = ::getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur != RLIM_INFINITY
                           ? std::min<rlim_t>(lim.rlim_cur, 1 << 20)
                           : 65536;
    for (int fd = 3; fd < static_cast<int>(top); ++fd)
        ::fcntl(fd, F_SETFD, FD_CLOEXEC);
}

} // namespace protocol
