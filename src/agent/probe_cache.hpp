// What the perf probe found, kept on the device (--state-dir) for the agent's next start: a
// probe takes seconds (2.4 s on an idle 2-core machine, 8–10 s on a loaded one) and its
// findings hold as long as the same perf runs on the same kernel with the same
// perf_event_paranoid, so an agent started with --pid records at once. Kept only when they
// hold for any process (the target ran during the probe) or for the whole system, as the
// probe memory of one run keeps them (probe_memory).
#pragma once

#include "agent/probe.hpp"

#include <optional>
#include <string>

namespace agent {

// The default --state-dir: /var/lib/perfwire-agent for root, else
// $XDG_STATE_HOME/perfwire-agent (~/.local/state/perfwire-agent); "" when none is known.
std::string default_state_dir();

// What makes a probe's findings hold: the perf executable (found on PATH as it is run: its
// path, device, inode, size and change time), the kernel release, perf_event_paranoid and
// the user. "" when perf is not found (then nothing is kept or recalled).
std::string probe_fingerprint(const std::string& perf);

// The findings kept in `dir` for `fingerprint` that hold for `pid`; none when there are none,
// they are of another perf, kernel or setting, or the file is not whole.
std::optional<capabilities> recall_probe(const std::string& dir, const std::string& fingerprint,
                                         std::optional<int> pid);
// Keeps `caps` (found for `pid`) in `dir` when they hold beyond that one process, written
// whole or not at all (a temporary file renamed). False when nothing was kept.
bool keep_probe(const std::string& dir, const std::string& fingerprint, const capabilities& caps,
                std::optional<int> pid);

// The findings read back from capabilities::to_json (with `judged`); none when malformed.
std::optional<capabilities> capabilities_from_json(const boost::json::object& o);

} // namespace agent
