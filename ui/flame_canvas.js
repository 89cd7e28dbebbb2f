// A flame graph's tree painted on a canvas: one row a depth, each frame as wide as its share of
// the frame at the top, frames under half a pixel left out; a hue per module (the name's own
// shade within it) or, against a baseline, red where a frame grew, blue where it shrank, grey
// where it stayed. Shared by a session's flame graph and the Fleet view.
import { esc, moduleColour, moduleHue, nameShade, visible } from './format.js';

export const ROW_H = 18;

// A frame's fill: by its change against a baseline (points of the total) when it has one.
export function frameFill(n) {
  const d = n.delta_pct;
  if (d != null) return Math.abs(d) < 0.05 ? 'hsl(0,0%,78%)' : `hsl(${d > 0 ? 0 : 220},${Math.min(90, 30 + Math.abs(d) * 6)}%,62%)`;
  const shade = nameShade(n.name);
  return `hsl(${(moduleHue(n.module || '') + shade - 11 + 360) % 360},${55 + shade}%,${52 + (shade % 5) * 3}%)`;
}

// Paints `root` and its children on `canvas` (sized to them); `match`: a regex whose frames
// are highlighted; `rootLabel`: the top frame's text. The boxes drawn ({n, x, y, w}).
export function paintFlame(canvas, root, { match = null, rootLabel = null } = {}) {
  const width = canvas.clientWidth || 800;
  const boxes = [];
  const walk = (n, x, depth, scale) => {
    boxes.push({ n, x, y: depth * ROW_H, w: n.value * scale });
    let cx = x;
    for (const c of n.children || []) { if (c.value * scale >= 0.5) walk(c, cx, depth + 1, scale); cx += c.value * scale; }
  };
  walk(root, 0, 0, root.value ? width / root.value : 0);
  const depth = Math.max(...boxes.map((b) => b.y)) / ROW_H + 1;
  canvas.width = width * devicePixelRatio; canvas.height = depth * ROW_H * devicePixelRatio;
  canvas.style.height = depth * ROW_H + 'px';
  canvas.dataset.boxes = boxes.length; // what was drawn, for a reader that waits on it
  const g = canvas.getContext('2d'); g.scale(devicePixelRatio, devicePixelRatio);
  g.font = '11px ui-monospace, monospace';
  for (const b of boxes) {
    g.fillStyle = match && match.test(b.n.name) ? '#d946ef' : frameFill(b.n);
    g.fillRect(b.x, b.y, Math.max(b.w - 1, 0.5), ROW_H - 1);
    if (b.w > 40) {
      // As many characters as fit the box (the font's own width, not a guess).
      const label = b.y === 0 && rootLabel ? rootLabel : visible(b.n.name);
      const fit = Math.max(0, Math.floor((b.w - 6) / g.measureText('M').width));
      g.fillStyle = '#111'; g.fillText(label.length > fit ? label.slice(0, Math.max(0, fit - 1)) + '…' : label, b.x + 3, b.y + 13);
    }
  }
  return boxes;
}

// The legend under a graph: the change's colours against a baseline, else the widest modules'.
export function flameLegend(boxes, compared) {
  if (compared) return '<span class="swatch" style="background:hsl(0,70%,62%)"></span> grew · <span class="swatch" style="background:hsl(220,70%,62%)"></span> shrank · <span class="swatch" style="background:hsl(0,0%,78%)"></span> unchanged vs the baseline';
  const modules = new Map();
  for (const b of boxes) if (b.n.module) modules.set(b.n.module, (modules.get(b.n.module) || 0) + b.w);
  return [...modules].sort((a, b) => b[1] - a[1]).slice(0, 6).map(([m]) => `<span class="swatch" style="background:${moduleColour(m)}"></span> ${esc(m.split('/').pop())}`).join(' · ');
}

// The frame under a pointer event, among the boxes painted on `canvas`.
export function boxAt(canvas, boxes, e) {
  const r = canvas.getBoundingClientRect(), x = e.clientX - r.left, y = e.clientY - r.top;
  return boxes.find((b) => x >= b.x && x < b.x + b.w && y >= b.y && y < b.y + ROW_H);
}
