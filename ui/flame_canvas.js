// A flame graph's tree painted on a canvas: one row a depth, each frame as wide as its share of
// the frame at the top, frames under half a pixel left out. Colours: a hue per module (the
// heaviest modules told apart, the name's own shade within one) or, against a baseline, the
// change (format.js diffColour: grey within the noise, red grew, blue shrank, deeper as the
// change is larger). The top frame, the whole, is neutral. Shared by a session's flame graph,
// its sandwich and the Fleet view.
import { beyondNoise, diffColour, esc, largestChange, moduleHue, nameShade, pct, visible } from './format.js';

export const ROW_H = 18;
const ROOT_FILL = 'hsl(0,0%,72%)';

// A frame's fill: its module's hue (the name's own shade within it) or, compared, its change
// up to `scale`.
export function frameFill(n, { scale, compared }) {
  if (compared) return n.delta_pct == null ? ROOT_FILL : diffColour(n.delta_pct, n.noise_pct, scale);
  const shade = nameShade(n.name);
  return `hsl(${(moduleHue(n.module) + shade - 11 + 360) % 360},${55 + shade}%,${52 + (shade % 5) * 3}%)`;
}
const DIM_FILL = 'hsl(0,0%,91%)';

// Paints `root` and its children on `canvas` (sized to them); `match`: a regex whose frames
// are highlighted, the others dimmed; `rootLabel`: the top frame's text; `dim`: frames above
// the one zoomed into, drawn greyed above it (their names kept) so where it sits stays in view.
// Compared with a baseline (`total`: the view's whole weight), a frame is as wide as its share
// here and its share there together, so what vanished (value 0) keeps its place. The boxes
// drawn ({n, x, y, w}), with the colouring they were drawn in (boxes.colours).
export function paintFlame(canvas, root, { match = null, rootLabel = null, dim = [], total = 0 } = {}) {
  const width = canvas.clientWidth || 800;
  const boxes = [];
  const top = dim.length;
  const compared = root.delta_pct != null || (root.children || []).some((c) => c.delta_pct != null);
  const weigh = compared ? (n) => 100 * n.value / (total || 1) + (n.baseline_pct || 0) : (n) => n.value;
  dim.forEach((n, i) => boxes.push({ n, x: 0, y: i * ROW_H, w: width, dimmed: true }));
  const walk = (n, x, depth, scale) => {
    boxes.push({ n, x, y: depth * ROW_H, w: weigh(n) * scale });
    let cx = x;
    for (const c of n.children || []) { const w = weigh(c) * scale; if (w >= 0.5) walk(c, cx, depth + 1, scale); cx += w; }
  };
  const whole = weigh(root);
  walk(root, 0, top, whole ? width / whole : 0);
  const depth = Math.max(...boxes.map((b) => b.y)) / ROW_H + 1;
  canvas.width = width * devicePixelRatio; canvas.height = depth * ROW_H * devicePixelRatio;
  canvas.style.height = depth * ROW_H + 'px';
  canvas.dataset.boxes = boxes.length; // what was drawn, for a reader that waits on it
  const colours = { compared, scale: compared ? largestChange(boxes.filter((b) => b.y > 0).map((b) => [b.n.delta_pct, b.n.noise_pct])) : 0 };
  const g = canvas.getContext('2d'); g.scale(devicePixelRatio, devicePixelRatio);
  g.font = '11px ui-monospace, monospace';
  for (const b of boxes) {
    const faded = b.dimmed || (match && b.y > 0 && !match.test(b.n.name));
    g.fillStyle = faded ? DIM_FILL : b.y === 0 ? ROOT_FILL : match ? '#d946ef' : frameFill(b.n, colours);
    g.fillRect(b.x, b.y, Math.max(b.w - 1, 0.5), ROW_H - 1);
    if (b.w > 40) {
      // As many characters as fit the box (the font's own width, not a guess).
      const label = b.y === 0 && rootLabel ? rootLabel : visible(b.n.name);
      const fit = Math.max(0, Math.floor((b.w - 6) / g.measureText('M').width));
      g.fillStyle = faded ? '#777' : '#111';
      g.fillText(label.length > fit ? label.slice(0, Math.max(0, fit - 1)) + '…' : label, b.x + 3, b.y + 13);
    }
  }
  boxes.colours = colours;
  return boxes;
}

// The legend under a graph: against a baseline, the colour scale from the largest shrink to
// the largest growth, with the noise band between; else the widest modules' colours.
export function flameLegend(boxes) {
  const { compared, scale } = boxes.colours || {};
  if (compared) {
    const s = scale ? scale.toFixed(scale < 1 ? 2 : 1) : '0';
    const step = (t) => `<span class="swatch" style="background:${diffColour(t * (scale || 1), 0, scale || 1)}"></span>`;
    return `<span title="the change of each frame's share of the total, in points">shrank ${step(-1)}${step(-0.5)}${step(-0.15)} −${s} … `
      + `<span class="swatch" style="background:${diffColour(0, 1, 1)}"></span> within the noise (the 95 % band of sampling from both sessions' counts) … `
      + `+${s} ${step(0.15)}${step(0.5)}${step(1)} grew</span> · points vs the baseline`;
  }
  const widths = new Map();
  for (const b of boxes) if (b.y > 0 && !b.dimmed && b.n.module) widths.set(b.n.module, (widths.get(b.n.module) || 0) + b.w);
  return [...widths].sort((a, b) => b[1] - a[1]).slice(0, 6)
    .map(([m]) => `<span class="swatch" style="background:hsl(${moduleHue(m)},65%,60%)"></span> ${esc(m.split('/').pop())}`).join(' · ');
}

// What a frame's share was in the baseline and what it is here, in a tooltip.
export function diffNote(n, total) {
  if (n.delta_pct == null) return '';
  const now = 100 * n.value / (total || 1);
  const what = !n.value ? ': <b>gone</b> here' : !n.baseline_pct ? ': <b>new</b> here' : '';
  return `<br>baseline ${pct(n.baseline_pct)} % → ${pct(now)} % (${n.delta_pct > 0 ? '+' : ''}${pct(n.delta_pct)} points${beyondNoise(n.delta_pct, n.noise_pct) ? '' : ', within the noise'})${what}`;
}

// The frame under a pointer event, among the boxes painted on `canvas`.
export function boxAt(canvas, boxes, e) {
  const r = canvas.getBoundingClientRect(), x = e.clientX - r.left, y = e.clientY - r.top;
  return boxes.find((b) => x >= b.x && x < b.x + b.w && y >= b.y && y < b.y + ROW_H);
}
