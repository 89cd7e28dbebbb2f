#include "collector/export/exports.hpp"
#include "collector/model/strings.hpp"

#include <cstdio>

namespace collector {
namespace {

constexpr double width = 1200, row = 16, margin = 10, min_px = 0.3;
constexpr int max_rows = 512;

void xml_escape(std::string& out, std::string_view s) {
    for (char c : s) {
        switch (c) {
        case '&':
            out += "&amp;";
            break;
        case '<':
            out += "&lt;";
            break;
        case '>':
            out += "&gt;";
            break;
        case '"':
            out += "&quot;";
            break;
        default:
            // Control characters are not allowed in XML 1.0.
            if (static_cast<unsigned char>(c) >= 0x20 || c == '\t')
                out += c;
        }
    }
}

std::string colour(std::string_view module) {
    const auto h = hash_bytes(module);
    char buf[40];
    std::snprintf(buf, sizeof buf, "hsl(%u,70%%,%u%%)", static_cast<unsigned>(h % 50),
                  static_cast<unsigned>(55 + (h >> 8) % 15)); // warm hues, by module
    return buf;
}

} // namespace

std::string flame_svg(const profile& p, const view_filter& f, const std::string& title) {
    const auto incl = inclusive_weights(p, node_self_weights(p, f));
    const auto kids = children_of(p);
    const std::uint64_t total = incl.empty() ? 0 : incl[profile::root];

    struct box {
        std::uint32_t node;
        int depth;
        double x, w;
    };
    std::vector<box> boxes;
    int depth_max = 0;
    std::vector<box> todo{{profile::root, 0, margin, width - 2 * margin}};
    while (!todo.empty()) {
        const box b = todo.back();
        todo.pop_back();
        boxes.push_back(b);
        depth_max = std::max(depth_max, b.depth);
        if (b.depth + 1 >= max_rows || !incl[b.node])
            continue;
        double x = b.x;
        for (std::uint32_t i = kids.offset[b.node]; i < kids.offset[b.node + 1]; ++i) {
            const auto c = kids.child[i];
            const double w = b.w * static_cast<double>(incl[c]) / static_cast<double>(incl[b.node]);
            if (w >= min_px)
                todo.push_back({c, b.depth + 1, x, w});
            x += w;
        }
    }

    const double height = (depth_max + 1) * row + 3 * row + margin;
    std::string out;
    out.reserve(boxes.size() * 200 + 1024);
    char buf[256];
    std::snprintf(buf, sizeof buf,
                  "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
                  "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
                  "viewBox=\"0 0 %.0f %.0f\" font-family=\"monospace\" font-size=\"11\">\n"
                  "<rect width=\"100%%\" height=\"100%%\" fill=\"#fdfaf5\"/>\n",
                  width, height, width, height);
    out += buf;
    out += "<text x=\"600\" y=\"20\" text-anchor=\"middle\" font-size=\"15\">";
    xml_escape(out, title);
    out += "</text>\n";
    for (const auto& b : boxes) {
        const bool root = b.node == profile::root;
        const auto frame = root ? 0 : p.node_frame(b.node);
        const std::string_view name = root ? std::string_view("all") : p.symbol(frame);
        const std::string_view module = root ? std::string_view() : p.module(frame);
        const double y = height - margin - (b.depth + 1) * row;
        const double share = total ? 100.0 * static_cast<double>(incl[b.node]) / total : 0.0;
        out += "<g><title>";
        xml_escape(out, name);
        if (!module.empty()) {
            out += " (";
            xml_escape(out, module);
            out += ")";
        }
        std::snprintf(buf, sizeof buf, " — %llu (%.2f%%)</title>",
                      static_cast<unsigned long long>(incl[b.node]), share);
        out += buf;
        std::snprintf(buf, sizeof buf,
                      "<rect x=\"%.2f\" y=\"%.1f\" width=\"%.2f\" height=\"%.1f\" fill=\"%s\" "
                      "rx=\"1\"/>",
                      b.x, y, std::max(b.w - 0.5, 0.1), row - 1,
                      root ? "hsl(0,0%,80%)" : colour(module).c_str());
        out += buf;
        const auto fits = static_cast<std::size_t>((b.w - 6) / 6.6);
        if (fits >= 3) {
            std::snprintf(buf, sizeof buf, "<text x=\"%.2f\" y=\"%.1f\">", b.x + 3, y + row - 4);
            out += buf;
            if (name.size() <= fits) {
                xml_escape(out, name);
            } else {
                std::size_t cut = fits - 2; // not inside a UTF-8 sequence
                while (cut > 0 && (static_cast<unsigned char>(name[cut]) & 0xC0) == 0x80)
                    --cut;
                xml_escape(out, name.substr(0, cut));
                out += "..";
            }
            out += "</text>";
        }
        out += "</g>\n";
    }
    out += "</svg>\n";
    return out;
}

} // namespace collector
