// The agent executables this collector can hand out (scripts/build-agents.sh writes them to
// dist/): perfwire-agent-linux-<arch>, each with a <file>.sha256 beside it. Listed at
// GET /api/agent-binaries and served for download, so a device reaches its agent from the
// collector alone. Only files found here at start are ever served.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace collector {

struct agent_binary {
    std::string arch;    // x86_64, aarch64, armv7, s390x, …
    std::string file;    // perfwire-agent-linux-<arch>
    std::string sha256;  // from <file>.sha256; empty if missing
    std::string version; // from <file>.version; empty if missing (then never pushed)
    std::uint64_t size = 0;
    std::filesystem::path path;
};

// The agents in `dir`, by architecture.
std::vector<agent_binary> find_agent_binaries(const std::filesystem::path& dir);

// With no --agents-dir and no dist/ found: the agents of the build tree the collector runs
// from — its own build's perfwire-agent (for this machine's architecture, dynamically linked as
// the collector is: for a device like this machine) and the source tree's Python agent — so a
// checkout that was only built still offers an agent. Never pushed as updates (no version).
std::vector<agent_binary> build_tree_agents();

// Where the agents are when --agents-dir is not given: a dist/ beside the collector or up to
// three folders above it (a build tree), else the installed /usr/lib/perfwire/agents.
std::filesystem::path default_agents_dir();

} // namespace collector
