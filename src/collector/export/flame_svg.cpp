#include "collector/export/exports.hpp"
#include "collector/model/strings.hpp"

#include <cstdio>

namespace collector {

void xml_escape(std::string& out, std::string_view s) {
    for (std::size_t i = 0; i < s.size(); ++i) {
        const char c = s[i];
        // U+FFFE and U+FFFF are not XML characters either: U+FFFD in their place.
        if (c == '\xEF' && s.substr(i + 1, 1) == "\xBF" && i + 2 < s.size() &&
            (s[i + 2] == '\xBE' || s[i + 2] == '\xBF')) {
            out += "\xEF\xBF\xBD";
            i += 2;
            continue;
        }
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

namespace {

constexpr double width = 1200, row_height = 16, margin = 10, min_px = 0.3;
constexpr int max_rows = 512;

std::string colour(std::string_view module) {
    const auto h = hash_bytes(module);
    char buf[40];
    std::snprintf(buf, sizeof buf, "hsl(%u,70%%,%u%%)", static_cast<unsigned>(h % 50),
                  static_cast<unsigned>(55 + (h >> 8) % 15)); // warm hues, by module
    return buf;
}

// Click a frame to zoom into it, "Reset zoom" (or the root) to go back, "Search" to
// highlight the frames whose names match a regex. Reads only the document, so it works
// from a saved file and under a Content-Security-Policy that allows nothing else.
constexpr std::string_view zoom_script = R"js(<script type="text/ecmascript"><![CDATA[
(function () {
  var W = 1200, M = 10, frames = [].slice.call(document.querySelectorAll('g.f'));
  function num(g, k) { return +g.getAttribute('data-' + k); }
  function fit(g, x, w) {
    var r = g.querySelector('rect'), t = g.querySelector('text'), n = g.getAttribute('data-n');
    r.setAttribute('x', x.toFixed(2));
    r.setAttribute('width', Math.max(w - 0.5, 0.1).toFixed(2));
    if (!t) {
      t = document.createElementNS('http://www.w3.org/2000/svg', 'text');
      t.setAttribute('y', +r.getAttribute('y') + 12);
      g.appendChild(t);
    }
    t.setAttribute('x', (x + 3).toFixed(2));
    var fits = Math.floor((w - 6) / 6.6);
    t.textContent = fits < 3 ? '' : n.length <= fits ? n : n.slice(0, fits - 2) + '..';
  }
  function zoom(z) {
    var x0 = num(z, 'x'), w0 = num(z, 'w'), d0 = num(z, 'd'), k = (W - 2 * M) / w0, e = 1e-6;
    frames.forEach(function (g) {
      var x = num(g, 'x'), w = num(g, 'w'), d = num(g, 'd');
      var inside = d >= d0 && x >= x0 - e && x + w <= x0 + w0 + e;
      var under = d < d0 && x <= x0 + e && x + w >= x0 + w0 - e;
      g.style.display = inside || under ? '' : 'none';
      g.style.opacity = under ? '0.6' : '';
      if (inside) fit(g, M + (x - x0) * k, w * k);
      else if (under) fit(g, M, W - 2 * M);
    });
    document.getElementById('reset').style.display = d0 ? '' : 'none';
  }
  function search() {
    var q = prompt('Highlight the frames whose names match (regex):', '');
    if (q === null) return;
    var re; try { re = new RegExp(q); } catch (err) { return; }
    frames.forEach(function (g) {
      g.querySelector('rect').style.fill = q && re.test(g.getAttribute('data-n')) ? '#d946ef' : '';
    });
  }
  document.documentElement.addEventListener('click', function (ev) {
    var t = ev.target;
    if (t.id === 'reset') return zoom(frames[0]);
    if (t.id === 'search') return search();
    while (t && !(t.getAttribute && t.getAttribute('class') === 'f')) t = t.parentNode;
    if (t) zoom(t);
  });
})();
]]></script>
)js";

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

    const double height = (depth_max + 1) * row_height + 3 * row_height + margin;
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
    out += "<text id=\"reset\" x=\"10\" y=\"20\" style=\"cursor:pointer;display:none\">Reset "
           "zoom</text>\n<text id=\"search\" x=\"1190\" y=\"20\" text-anchor=\"end\" "
           "style=\"cursor:pointer\">Search</text>\n";
    for (const auto& b : boxes) {
        const bool root = b.node == profile::root;
        const auto frame = root ? 0 : p.node_frame(b.node);
        const std::string_view name = root ? std::string_view("all") : p.symbol(frame);
        const std::string_view module = root ? std::string_view() : p.module(frame);
        const double y = height - margin - (b.depth + 1) * row_height;
        const double share = total ? 100.0 * static_cast<double>(incl[b.node]) / total : 0.0;
        std::snprintf(buf, sizeof buf,
                      "<g class=\"f\" style=\"cursor:pointer\" data-x=\"%.2f\" data-w=\"%.2f\" "
                      "data-d=\"%d\" data-n=\"",
                      b.x, b.w, b.depth);
        out += buf;
        xml_escape(out, name);
        out += "\"><title>";
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
                      b.x, y, std::max(b.w - 0.5, 0.1), row_height - 1,
                      root ? "hsl(0,0%,80%)" : colour(module).c_str());
        out += buf;
        const auto fits = static_cast<std::size_t>((b.w - 6) / 6.6);
        if (fits >= 3) {
            std::snprintf(buf, sizeof buf, "<text x=\"%.2f\" y=\"%.1f\">", b.x + 3,
                          y + row_height - 4);
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
    out += zoom_script; // after the frames it finds
    out += "</svg>\n";
    return out;
}

} // namespace collector
