#include "collector/agent_binaries.hpp"

#include <algorithm>
#include <fstream>
#include <optional>
#include <string_view>

namespace collector {
namespace fs = std::filesystem;

std::vector<agent_binary> find_agent_binaries(const fs::path& dir) {
    constexpr std::string_view prefix = "perfwire-agent-linux-";
    std::vector<agent_binary> out;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(dir, ec)) {
        const std::string name = e.path().filename().string();
        if (name.rfind(prefix, 0) != 0 || name.find('.') != std::string::npos ||
            !e.is_regular_file(ec))
            continue;
        agent_binary b;
        b.arch = name.substr(prefix.size());
        b.file = name;
        b.path = e.path();
        b.size = e.file_size(ec);
        std::ifstream sum(e.path().string() + ".sha256");
        std::string hash;
        if (sum >> hash && hash.size() == 64 &&
            hash.find_first_not_of("0123456789abcdef") == std::string::npos)
            b.sha256 = hash;
        std::ifstream ver(e.path().string() + ".version");
        std::string version;
        if (ver >> version && version.size() <= 64 &&
            version.find_first_not_of("0123456789abcdefghijklmnopqrstuvwxyz.+-~") ==
                std::string::npos)
            b.version = version;
        out.push_back(std::move(b));
    }
    std::sort(out.begin(), out.end(),
              [](const agent_binary& a, const agent_binary& b) { return a.arch < b.arch; });
    return out;
}

fs::path default_agents_dir() {
    std::error_code ec;
    const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
    if (!ec) {
        fs::path dir = exe.parent_path();
        for (int up = 0; up < 4 && !dir.empty(); ++up, dir = dir.parent_path()) {
            if (!find_agent_binaries(dir / "dist").empty())
                return dir / "dist";
            if (dir == dir.root_path())
                break;
        }
    }
    return "/usr/lib/perfwire/agents";
}

} // namespace collector
