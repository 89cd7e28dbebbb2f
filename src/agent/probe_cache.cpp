#include "agent/probe_cache.hpp"

#include "agent/perf_commands.hpp"
#include "agent/procfs.hpp"

#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>

#include <algorithm>
#include <cstdlib>
#include <fcntl.h>
#include <filesystem>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <unistd.h>

namespace agent {
namespace json = boost::json;
namespace fs = std::filesystem;

namespace {

constexpr const char* file_name = "probe.json";
constexpr std::size_t max_file = 1 << 20;

// `perf` as exec finds it: a path as given, else the first executable of that name on PATH.
std::string resolve(const std::string& perf) {
    if (perf.find('/') != std::string::npos)
        return perf;
    const char* path = std::getenv("PATH");
    std::string_view dirs = path ? path : "/usr/local/bin:/usr/bin:/bin";
    while (!dirs.empty()) {
        const auto colon = dirs.find(':');
        const std::string dir(dirs.substr(0, colon));
        dirs = colon == std::string_view::npos ? std::string_view() : dirs.substr(colon + 1);
        const std::string candidate = (dir.empty() ? "." : dir) + "/" + perf;
        if (::access(candidate.c_str(), X_OK) == 0)
            return candidate;
    }
    return {};
}

std::vector<std::string> strings_of(const json::value* v) {
    std::vector<std::string> out;
    if (v && v->is_array())
        for (const auto& s : v->get_array())
            if (s.is_string())
                out.emplace_back(s.get_string());
    return out;
}

std::map<std::string, std::string> map_of(const json::value* v) {
    std::map<std::string, std::string> out;
    if (v && v->is_object())
        for (const auto& [k, s] : v->get_object())
            if (s.is_string())
                out.emplace(std::string(k), std::string(s.get_string()));
    return out;
}

} // namespace

std::string default_state_dir() {
    if (::geteuid() == 0)
        return "/var/lib/perfwire-agent";
    if (const char* xdg = std::getenv("XDG_STATE_HOME"); xdg && *xdg == '/')
        return std::string(xdg) + "/perfwire-agent";
    if (const char* home = std::getenv("HOME"); home && *home == '/')
        return std::string(home) + "/.local/state/perfwire-agent";
    return {};
}

std::string probe_fingerprint(const std::string& perf) {
    const auto path = resolve(perf);
    struct stat st {};
    if (path.empty() || ::stat(path.c_str(), &st) != 0)
        return {};
    struct utsname u {};
    ::uname(&u);
    const auto paranoid = procfs::read_file("/proc/sys/kernel/perf_event_paranoid");
    return path + "|" + std::to_string(st.st_dev) + ":" + std::to_string(st.st_ino) + ":" +
           std::to_string(st.st_size) + ":" + std::to_string(st.st_ctim.tv_sec) + "." +
           std::to_string(st.st_ctim.tv_nsec) + "|" + u.release + "|" +
           (paranoid ? std::to_string(std::atoi(paranoid->c_str())) : "?") + "|" +
           std::to_string(::geteuid());
}

std::optional<capabilities> capabilities_from_json(const json::object& o) {
    const auto* events = o.if_contains("record_events");
    if (!events || !events->is_array())
        return std::nullopt;
    capabilities c;
    c.record_events = strings_of(events);
    c.stat_only_events = strings_of(o.if_contains("stat_only_events"));
    if (const auto* m = o.if_contains("callgraph_method"); m && m->is_string())
        c.callgraph = m->get_string();
    c.callgraph_modes = strings_of(o.if_contains("callgraph_modes"));
    // What perf is run with comes from the file: only the events and modes a probe of this
    // agent tries (perf takes a file name as an event and compiles it: never a stranger's).
    const auto one_of = [](const std::vector<std::string>& known, const std::string& s) {
        return std::find(known.begin(), known.end(), s) != known.end();
    };
    const auto known_event = [&](const std::string& e) {
        return one_of(candidate_events, e) || one_of(software_clocks, e) ||
               one_of(sampling_preference, e);
    };
    for (const auto* list : {&c.record_events, &c.stat_only_events})
        if (!std::all_of(list->begin(), list->end(), known_event))
            return std::nullopt;
    if ((!c.callgraph.empty() && !one_of(callgraph_modes, c.callgraph)) ||
        !std::all_of(c.callgraph_modes.begin(), c.callgraph_modes.end(),
                     [&](const std::string& m) { return one_of(callgraph_modes, m); }))
        return std::nullopt;
    const auto flag = [&](const char* key, bool otherwise) {
        const auto* v = o.if_contains(key);
        return v && v->is_bool() ? v->get_bool() : otherwise;
    };
    c.script_fields = flag("script_fields", true);
    c.pipe_mode = flag("pipe_mode", true);
    c.judged = flag("judged", false);
    if (const auto* p = o.if_contains("perf_event_paranoid"); p && p->is_int64())
        c.perf_event_paranoid = static_cast<int>(p->get_int64());
    if (const auto* v = o.if_contains("perf_version"); v && v->is_string())
        c.perf_version = v->get_string();
    c.warnings = strings_of(o.if_contains("warnings"));
    c.cannot = strings_of(o.if_contains("cannot"));
    c.rejected_events = map_of(o.if_contains("rejected_events"));
    c.unusable_callgraph = map_of(o.if_contains("unusable_callgraph"));
    if (const auto* v = o.if_contains("pipe_problem"); v && v->is_string())
        c.pipe_problem = v->get_string();
    if (const auto* v = o.if_contains("probe_seconds"); v && v->is_number())
        c.probe_seconds = v->to_number<double>();
    return c;
}

std::optional<capabilities> recall_probe(const std::string& dir, const std::string& fingerprint,
                                         std::optional<int> pid) {
    if (dir.empty() || fingerprint.empty())
        return std::nullopt;
    std::error_code size_ec;
    const auto path = dir + "/" + file_name;
    if (fs::file_size(path, size_ec) > max_file || size_ec)
        return std::nullopt;
    const auto text = procfs::read_file(path);
    if (!text)
        return std::nullopt;
    boost::system::error_code ec;
    const auto v = json::parse(*text, ec);
    if (ec || !v.is_object())
        return std::nullopt;
    const auto& o = v.get_object();
    const auto* print = o.if_contains("fingerprint");
    const auto* caps = o.if_contains("capabilities");
    if (!print || !print->is_string() || print->get_string() != fingerprint || !caps ||
        !caps->is_object())
        return std::nullopt;
    auto c = capabilities_from_json(caps->get_object());
    // Findings for one process only hold for it: kept only when they hold for any (judged) or
    // were of the whole system, and taken for the whole system only from a probe of it.
    const auto* whole = o.if_contains("whole_system");
    const bool of_system = whole && whole->is_bool() && whole->get_bool();
    if (!c || (!c->judged && !(of_system && !pid)))
        return std::nullopt;
    return c;
}

bool keep_probe(const std::string& dir, const std::string& fingerprint, const capabilities& caps,
                std::optional<int> pid) {
    if (dir.empty() || fingerprint.empty() || (!caps.judged && pid))
        return false;
    // Made private when this agent makes it; one that exists keeps its mode (--state-dir /tmp
    // stays /tmp).
    std::error_code ec;
    if (!fs::exists(dir, ec)) {
        fs::create_directories(dir, ec);
        if (ec)
            return false;
        ::chmod(dir.c_str(), 0700);
    }
    auto o = caps.to_json();
    o.erase("tried"); // what ran then: said by the probe that ran it
    o["judged"] = caps.judged;
    json::object extra;
    for (const auto& [mode, why] : caps.unusable_callgraph)
        extra[mode] = why;
    o["unusable_callgraph"] = std::move(extra);
    o["pipe_problem"] = caps.pipe_problem;
    const std::string text = json::serialize(json::object{
        {"fingerprint", fingerprint}, {"whole_system", !pid}, {"capabilities", std::move(o)}});
    // (Agents starting together each write a file of their own, then one takes the name.)
    const std::string path = dir + "/" + file_name, temp = path + "." + std::to_string(::getpid());
    // A new file of its own: never through a link or into a file someone planted there.
    ::unlink(temp.c_str());
    const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0)
        return false;
    const bool whole = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
    const bool closed = ::close(fd) == 0;
    if (!whole || !closed || ::rename(temp.c_str(), path.c_str()) != 0) {
        ::unlink(temp.c_str());
        return false;
    }
    return true;
}

} // namespace agent
