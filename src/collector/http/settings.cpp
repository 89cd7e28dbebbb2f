#include "collector/http/settings.hpp"

#include <boost/json/array.hpp>

#include <algorithm>
#include <filesystem>
#include <system_error>
#include <unistd.h>
#include <vector>

namespace collector {
namespace json = boost::json;
namespace fs = std::filesystem;
namespace {

json::array strings_json(const std::vector<std::string>& v) {
    json::array out;
    for (const auto& s : v)
        out.emplace_back(s);
    return out;
}

// A JSON array of strings, or an error.
bool read_strings(const json::value& v, std::vector<std::string>& out) {
    if (!v.is_array())
        return false;
    std::vector<std::string> r;
    for (const auto& e : v.as_array()) {
        if (!e.is_string())
            return false;
        r.emplace_back(e.as_string());
    }
    out = std::move(r);
    return true;
}

bool inside(const fs::path& root, const fs::path& p) {
    const auto r = root.native(), s = p.native();
    return s == r || (s.size() > r.size() && s.compare(0, r.size(), r) == 0 &&
                      (r.back() == '/' || s[r.size()] == '/'));
}

constexpr std::size_t max_entries = 5000;

// Empty when `path` (absolute) resolves inside `root`; else why not, naming `field`.
std::string outside_root(const std::string& field, const std::string& path,
                         const std::string& root) {
    std::error_code ec;
    const fs::path base = fs::weakly_canonical(root.empty() ? "/" : root, ec);
    if (!fs::path(path).is_absolute())
        return field + " must be absolute paths";
    const fs::path real = fs::weakly_canonical(path, ec);
    if (ec || !inside(base, real))
        return field + ": " + path + " is outside the browse root " + base.string() +
               " (give it on the collector's command line instead)";
    return {};
}

// The same for each of `paths` that is not in `kept`: what the owner set stays allowed.
std::string outside_root(const std::string& field, const std::vector<std::string>& paths,
                         const std::string& root, const std::vector<std::string>& kept) {
    for (const auto& p : paths)
        if (std::find(kept.begin(), kept.end(), p) == kept.end())
            if (auto why = outside_root(field, p, root); !why.empty())
                return why;
    return {};
}

bool executable_file(const fs::path& p) {
    std::error_code ec;
    return fs::is_regular_file(p, ec) && ::access(p.c_str(), X_OK) == 0;
}

} // namespace

std::vector<std::string> find_toolchains(const std::string& path_env, const std::string& given) {
    std::vector<std::string> out{given};
    constexpr std::string_view tool = "addr2line";
    std::size_t from = 0;
    while (from <= path_env.size()) {
        auto to = path_env.find(':', from);
        if (to == std::string::npos)
            to = path_env.size();
        const fs::path dir = path_env.substr(from, to - from);
        from = to + 1;
        std::error_code ec;
        if (dir.empty() || !dir.is_absolute() || !fs::is_directory(dir, ec))
            continue;
        for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
            const std::string name = it->path().filename().string();
            if (name.size() < tool.size() ||
                name.compare(name.size() - tool.size(), tool.size(), tool) != 0)
                continue;
            const std::string prefix = name.substr(0, name.size() - tool.size());
            if (executable_file(it->path()) && executable_file(dir / (prefix + "readelf")))
                out.push_back(prefix);
        }
    }
    std::sort(out.begin(), out.end());
    out.erase(std::unique(out.begin(), out.end()), out.end());
    return out;
}

json::object config_json(const symbol_config& c, const config_limits& limits) {
    json::array map;
    for (const auto& [from, to] : c.path_map)
        map.push_back(json::object{{"from", from}, {"to", to}});
    return {{"binaries", strings_json(c.binaries)},
            {"source_dirs", strings_json(c.source_dirs)},
            {"debug_dirs", strings_json(c.debug_dirs)},
            {"resymbolize", strings_json(c.resymbolize)},
            {"debuginfod_urls", limits.debuginfod_urls},
            {"path_map", std::move(map)},
            {"toolchain_prefix", c.toolchain_prefix},
            {"sysroot", c.sysroot},
            {"inline", c.inline_frames},
            {"browse_root", limits.browse_root},
            {"toolchains", strings_json(limits.toolchains)}};
}

namespace {

failure bad_config(std::string why) {
    return {"bad_config", std::move(why)};
}

} // namespace

result<> update_config(symbol_config& c, const json::object& body, const config_limits& limits) {
    symbol_config next = c;
    if (const auto* v = body.if_contains("binaries"); v && !read_strings(*v, next.binaries))
        return bad_config("binaries must be an array of strings");
    if (const auto* v = body.if_contains("source_dirs"); v && !read_strings(*v, next.source_dirs))
        return bad_config("source_dirs must be an array of strings");
    if (const auto* v = body.if_contains("debug_dirs"); v && !read_strings(*v, next.debug_dirs))
        return bad_config("debug_dirs must be an array of strings");
    // Device paths: names to match modules by, never opened as given.
    if (const auto* v = body.if_contains("resymbolize");
        v && (!read_strings(*v, next.resymbolize) || next.resymbolize.size() > 1024))
        return bad_config("resymbolize must be an array of at most 1024 module paths");
    if (const auto* v = body.if_contains("path_map")) {
        if (!v->is_array())
            return bad_config("path_map must be an array of {from, to}");
        next.path_map.clear();
        for (const auto& e : v->as_array()) {
            const auto* o = e.if_object();
            const auto* from = o ? o->if_contains("from") : nullptr;
            const auto* to = o ? o->if_contains("to") : nullptr;
            if (!from || !to || !from->is_string() || !to->is_string() || from->as_string().empty())
                return bad_config("path_map must be an array of {from, to} with a non-empty from");
            next.path_map.emplace_back(from->as_string(), to->as_string());
        }
    }
    if (const auto* v = body.if_contains("toolchain_prefix")) {
        if (!v->is_string())
            return bad_config("toolchain_prefix must be a string");
        const std::string p(v->as_string());
        // The prefix names programs to run: only one of those the owner made available.
        if (std::find(limits.toolchains.begin(), limits.toolchains.end(), p) ==
            limits.toolchains.end()) {
            std::string known;
            for (const auto& t : limits.toolchains)
                known += (known.empty() ? "" : ", ") + (t.empty() ? std::string("\"\"") : t);
            return bad_config(
                "toolchain_prefix must be one of the toolchains the collector found: " + known);
        }
        next.toolchain_prefix = p;
    }
    if (const auto* v = body.if_contains("sysroot")) {
        if (!v->is_string())
            return bad_config("sysroot must be a string");
        next.sysroot = std::string(v->as_string());
        if (!next.sysroot.empty() && next.sysroot != c.sysroot)
            if (auto why = outside_root("sysroot", next.sysroot, limits.browse_root); !why.empty())
                return bad_config(why);
    }
    if (auto why = outside_root("binaries", next.binaries, limits.browse_root, c.binaries);
        !why.empty())
        return bad_config(why);
    if (auto why = outside_root("source_dirs", next.source_dirs, limits.browse_root, c.source_dirs);
        !why.empty())
        return bad_config(why);
    if (auto why = outside_root("debug_dirs", next.debug_dirs, limits.browse_root, c.debug_dirs);
        !why.empty())
        return bad_config(why);
    std::vector<std::string> targets, kept_targets;
    for (const auto& m : next.path_map)
        targets.push_back(m.second);
    for (const auto& m : c.path_map)
        kept_targets.push_back(m.second);
    if (auto why = outside_root("path_map targets", targets, limits.browse_root, kept_targets);
        !why.empty())
        return bad_config(why);
    if (const auto* v = body.if_contains("inline")) {
        if (!v->is_bool())
            return bad_config("inline must be true or false");
        next.inline_frames = v->as_bool();
    }
    c = std::move(next);
    return {};
}

browse_result browse(const std::string& root, const std::string& path) {
    browse_result r;
    std::error_code ec;
    const fs::path base = fs::weakly_canonical(root.empty() ? "/" : root, ec);
    if (ec) {
        r.status = 404;
        r.body = {{"code", "no_root"}, {"message", "the browse root does not exist"}};
        return r;
    }
    const fs::path asked = path.empty()                   ? base
                           : fs::path(path).is_absolute() ? fs::path(path)
                                                          : base / path;
    const fs::path target = fs::weakly_canonical(asked, ec);
    if (ec || !inside(base, target)) {
        r.status = 403;
        r.body = {{"code", "outside_root"},
                  {"message", "the path is outside the browse root " + base.string()}};
        return r;
    }
    if (!fs::exists(target, ec)) {
        r.status = 404;
        r.body = {{"code", "not_found"}, {"message", "no such folder " + target.string()}};
        return r;
    }
    if (!fs::is_directory(target, ec)) {
        r.status = 400;
        r.body = {{"code", "not_a_folder"}, {"message", target.string() + " is not a folder"}};
        return r;
    }
    struct entry {
        std::string name, type;
        std::uintmax_t size = 0;
        bool executable = false;
    };
    std::vector<entry> entries;
    bool truncated = false;
    for (fs::directory_iterator it(target, fs::directory_options::skip_permission_denied, ec), end;
         !ec && it != end; it.increment(ec)) {
        if (entries.size() == max_entries) {
            truncated = true;
            break;
        }
        std::error_code e2;
        entry en{it->path().filename().string(), "other"};
        // A link that leads out of the root is listed as a link, nothing about its target.
        if (it->is_symlink(e2) && !inside(base, fs::weakly_canonical(it->path(), e2))) {
            en.type = "link";
            entries.push_back(std::move(en));
            continue;
        }
        const auto st = it->status(e2); // follows links: a link to a folder is a folder
        if (fs::is_directory(st))
            en.type = "dir";
        else if (fs::is_regular_file(st)) {
            en.type = "file";
            en.size = it->file_size(e2);
            en.executable = (st.permissions() & fs::perms::owner_exec) != fs::perms::none;
        }
        entries.push_back(std::move(en));
    }
    std::sort(entries.begin(), entries.end(), [](const entry& a, const entry& b) {
        return (a.type == "dir") != (b.type == "dir") ? a.type == "dir" : a.name < b.name;
    });
    json::array list;
    for (const auto& e : entries)
        list.push_back(json::object{
            {"name", e.name}, {"type", e.type}, {"size", e.size}, {"executable", e.executable}});
    r.body = {{"root", base.string()},
              {"path", target.string()},
              {"parent",
               target == base ? json::value(nullptr) : json::value(target.parent_path().string())},
              {"entries", std::move(list)},
              {"truncated", truncated}};
    return r;
}

} // namespace collector
