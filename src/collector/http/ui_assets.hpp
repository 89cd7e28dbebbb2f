// The browser UI: embedded at build time (cmake/embed_ui.cmake), or read from --ui-dir for
// development. Paths never leave the UI folder.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace collector {

struct ui_asset {
    std::string_view path; // "/index.html"
    std::string_view content;
};

const std::vector<ui_asset>& embedded_ui();

struct ui_file {
    std::string content;
    std::string_view mime;
    std::string etag;
};

std::string_view mime_type(std::string_view path) noexcept;

// The file for a request path ("/" is index.html), from `ui_dir` when given, else embedded.
std::optional<ui_file> find_ui_file(std::string_view request_path,
                                    const std::optional<std::string>& ui_dir);

} // namespace collector
