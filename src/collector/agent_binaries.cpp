#include "collector/agent_binaries.hpp"

#include "protocol/digest.hpp"

#include <sys/utsname.h>

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

namespace {

std::optional<agent_binary> served_as(const fs::path& path, const std::string& arch) {
    std::error_code ec;
    if (!fs::is_regular_file(path, ec))
        return std::nullopt;
    std::ifstream in(path, std::ios::binary);
    protocol::sha256 sum;
    char buf[1 << 16];
    std::uint64_t size = 0;
    while (in.read(buf, sizeof buf) || in.gcount() > 0) {
        sum.update(std::string_view(buf, static_cast<std::size_t>(in.gcount())));
        size += static_cast<std::uint64_t>(in.gcount());
    }
    agent_binary b;
    b.arch = arch;
    b.file = "perfwire-agent-linux-" + arch;
    b.sha256 = sum.finish_hex();
    b.size = size;
    b.path = path;
    return b;
}

} // namespace

std::vector<agent_binary> build_tree_agents() {
    std::vector<agent_binary> out;
    std::error_code ec;
    const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
    if (ec)
        return out;
    // build/src/collector/perfwire-collector -> build/src/agent/perfwire-agent
    struct utsname u {};
    if (::uname(&u) == 0)
        if (auto b =
                served_as(exe.parent_path().parent_path() / "agent" / "perfwire-agent", u.machine))
            out.push_back(std::move(*b));
    fs::path dir = exe.parent_path();
    for (int up = 0; up < 5 && !dir.empty(); ++up, dir = dir.parent_path()) {
        if (auto b = served_as(dir / "src" / "agent" / "python" / "perfwire_agent.py", "python")) {
            out.push_back(std::move(*b));
            break;
        }
        if (dir == dir.root_path())
            break;
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
