// The timeline's time axis: linear, but broken where nothing happened for
// long, so that leases minutes apart are drawn at a readable width rather
// than squashed to slivers; and its ticks, at round times, labelled in
// 24-hour time to the precision their step needs, never twice the same.
import { clock } from './dom.js';

// A gap between two moments is broken when it is at least this long and a
// fifth of the whole span or more.
const LONG = 30 * 1000;
const BREAK = 44; // the width of a break, in the drawing's units
const MIN = 40; // the least width of a stretch between breaks
const TICK = 110; // about one tick per this width
const STEPS = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1e3, 2e3, 5e3, 1e4, 15e3, 3e4, 6e4, 12e4, 3e5, 6e5, 9e5, 18e5,
  36e5, 72e5, 108e5, 216e5, 432e5, 864e5];

// scale maps the times (ms) onto xa..xb: x(t), the ticks ({x, label,
// anchor}) and the breaks ({x0, x1, t0, t1}).
export function scale(times, xa, xb) {
  const ts = [...new Set(times)].sort((a, b) => a - b);
  if (ts.length === 0) ts.push(0);
  if (ts.length === 1 || ts[ts.length - 1] - ts[0] < 1) ts.push(ts[0] + 1000);
  const span = ts[ts.length - 1] - ts[0];

  // The stretches between long gaps.
  const parts = [{ a: ts[0], b: ts[0] }];
  for (let i = 1; i < ts.length; i++) {
    const d = ts[i] - ts[i - 1];
    if (d >= LONG && d >= span / 5) parts.push({ a: ts[i], b: ts[i] });
    else parts[parts.length - 1].b = ts[i];
  }
  // Widths: by duration, each at least MIN.
  const avail = xb - xa - BREAK * (parts.length - 1);
  const total = parts.reduce((s, p) => s + (p.b - p.a), 0);
  const small = parts.filter((p) => total === 0 || (avail * (p.b - p.a)) / total < MIN);
  const rest = total - small.reduce((s, p) => s + (p.b - p.a), 0);
  let x = xa;
  for (const p of parts) {
    const w = small.includes(p) ? (small.length === parts.length ? avail / parts.length : MIN)
      : ((avail - MIN * small.length) * (p.b - p.a)) / rest;
    p.x0 = x;
    p.x1 = x + w;
    x = p.x1 + BREAK;
  }

  const at = (t) => {
    const p = parts.find((q) => t <= q.b) || parts[parts.length - 1];
    if (t <= p.a || p.b === p.a) return p.b === p.a ? (p.x0 + p.x1) / 2 : p.x0;
    return p.x0 + ((Math.min(t, p.b) - p.a) / (p.b - p.a)) * (p.x1 - p.x0);
  };

  const ticks = [];
  for (const p of parts) {
    const want = Math.max(1, Math.floor((p.x1 - p.x0) / TICK));
    const step = STEPS.find((s) => s >= (p.b - p.a) / want) || STEPS[STEPS.length - 1];
    const digits = step >= 1000 ? 0 : step >= 100 ? 1 : step >= 10 ? 2 : 3;
    const seconds = step < 6e4;
    const first = Math.ceil(p.a / step) * step;
    const list = [];
    for (let t = first; t <= p.b; t += step) list.push(t);
    // A stretch with no round time in it (a moment) is labelled at its start.
    if (list.length === 0) list.push(p.a);
    for (const t of list) ticks.push({ x: at(t), label: clock(t, p.b === p.a ? 0 : digits, seconds || p.b === p.a) });
  }
  // Never the same label twice, nor two labels on top of each other.
  const kept = [];
  for (const t of ticks) {
    const last = kept[kept.length - 1];
    if (last && (last.label === t.label || t.x - last.x < 70)) continue;
    t.anchor = t.x - xa < 30 ? 'start' : xb - t.x < 30 ? 'end' : 'middle';
    kept.push(t);
  }
  const breaks = parts.slice(1).map((p, i) => ({ x0: parts[i].x1, x1: p.x0, t0: parts[i].b, t1: p.a }));
  return { x: at, ticks: kept, breaks };
}
