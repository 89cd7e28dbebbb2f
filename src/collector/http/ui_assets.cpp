#include "collector/http/ui_assets.hpp"

#include "collector/model/strings.hpp"

#include <filesystem>
#include <fstream>
#include <sstream>

namespace collector {
namespace fs = std::filesystem;

std::string_view mime_type(std::string_view path) noexcept {
    const auto dot = path.rfind('.');
    const auto ext = dot == std::string_view::npos ? std::string_view() : path.substr(dot);
    if (ext == ".html")
        return "text/html; charset=utf-8";
    if (ext == ".js" || ext == ".mjs")
        return "text/javascript; charset=utf-8";
    if (ext == ".css")
        return "text/css; charset=utf-8";
    if (ext == ".svg")
        return "image/svg+xml";
    if (ext == ".png")
        return "image/png";
    if (ext == ".json")
        return "application/json";
    if (ext == ".ico")
        return "image/x-icon";
    return "application/octet-stream";
}

std::optional<ui_file> find_ui_file(std::string_view request_path,
                                    const std::optional<std::string>& ui_dir) {
    std::string path(request_path.substr(0, request_path.find('?')));
    if (path.empty() || path == "/")
        path = "/index.html";
    if (path.find("..") != std::string::npos || path.find('\0') != std::string::npos)
        return std::nullopt;
    ui_file f;
    if (ui_dir) {
        std::error_code ec;
        const fs::path root = fs::weakly_canonical(*ui_dir, ec);
        const fs::path file = fs::weakly_canonical(root / path.substr(1), ec);
        const auto rel = file.lexically_relative(root);
        if (ec || rel.empty() || *rel.begin() == "..")
            return std::nullopt;
        std::ifstream in(file, std::ios::binary);
        if (!in || fs::is_directory(file))
            return std::nullopt;
        std::stringstream ss;
        ss << in.rdbuf();
        f.content = ss.str();
    } else {
        bool found = false;
        for (const auto& a : embedded_ui())
            if (a.path == path) {
                f.content = std::string(a.content);
                found = true;
                break;
            }
        if (!found)
            return std::nullopt;
    }
    f.mime = mime_type(path);
    char tag[24];
    std::snprintf(tag, sizeof tag, "\"%016llx\"",
                  static_cast<unsigned long long>(hash_bytes(f.content)));
    f.etag = tag;
    return f;
}

} // namespace collector
