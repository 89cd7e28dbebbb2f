// What a program the agent or the collector starts may inherit: its standard descriptors and
// nothing else. Asio opens sockets without close-on-exec, so without this a child (perf,
// addr2line, readelf, a re-executed agent) would hold every connection and listener open at
// the moment it was forked: a connection the parent closes then stays open to its peer, which
// goes on sending into it, and a listener stays bound after the parent is gone.
#pragma once

namespace protocol {

// Marks every descriptor from 3 up close-on-exec. Only system calls: safe between fork and
// exec.
void close_on_exec_from_3() noexcept;

} // namespace protocol
