// A job's timeline, drawn from its events: one band per lease, from its
// acquire to its end (reported, expired or lost; still open while live),
// its heartbeats as ticks on the band (collapsed: one count, not one row
// each), expiries, losses and stale reports marked on the band of their
// lease, and the job's own moments (queued, revoked, cancelled, failed at
// its cap on requeues) on a row of their own. A band reported is in the
// colour of its outcome. The time axis is broken where nothing happened for
// long (scale.js): leases ten minutes apart are two bands, not two slivers.
import { clock, duration, h } from './dom.js';
import { scale } from './scale.js';

const ENDS = { 'lease.reported': 'reported', 'lease.expired': 'expired', 'lease.lost': 'lost' };

// model folds the events into lease bands and marks.
export function model(events) {
  const leases = new Map();
  const jobMarks = [];
  const band = (e) => {
    if (!leases.has(e.lease)) {
      leases.set(e.lease, { lease: e.lease, worker: e.worker, start: ms(e.time), end: null, end_type: null, beats: [], count: 0, marks: [] });
    }
    return leases.get(e.lease);
  };
  for (const e of events) {
    const t = ms(e.time);
    switch (e.type) {
      case 'lease.acquired': band(e); break;
      case 'lease.running': band(e).running = t; break;
      case 'lease.heartbeat': { const b = band(e); b.beats.push(t); b.count++; break; }
      // Heartbeats compacted into their last: ticks at the first and the last.
      case 'lease.heartbeats': { const b = band(e); b.beats.push(ms(e.heartbeats.first_time), t); b.count += e.heartbeats.count; break; }
      case 'lease.reported': case 'lease.expired': case 'lease.lost': {
        const b = band(e);
        b.end = t;
        b.end_type = ENDS[e.type];
        b.outcome = e.outcome;
        if (e.type !== 'lease.reported') b.marks.push({ t, kind: ENDS[e.type], label: `${e.type} ${e.reason || ''}` });
        break;
      }
      case 'lease.stale_report':
        band(e).marks.push({ t, kind: 'stale', label: `stale report from ${e.worker}: ${e.outcome || ''} ${e.ref || ''}` });
        break;
      case 'lease.revoked':
        jobMarks.push({ t, kind: 'revoked', label: `revoked (${e.revoke})` });
        break;
      case 'lease.queued': case 'lease.cancelled': case 'lease.failed':
        jobMarks.push({ t, kind: e.type.slice(6), label: `${e.type} ${e.reason || ''}` });
        break;
      default:
        if (e.type.startsWith('daemon.')) jobMarks.push({ t, kind: 'daemon', label: e.type });
    }
  }
  return { leases: [...leases.values()], jobMarks };
}

const ms = (iso) => new Date(iso).getTime();

const W = 1000; // the drawing's width in its own units; the SVG scales to the page
const LEFT = 200; // room for the lease labels
const RIGHT = 20;
const ROW = 36;
const LABEL = 27; // the characters of a label line that fit in LEFT

// draw renders the model between the first event and now (or the last event,
// when no lease is live).
export function draw({ leases, jobMarks }, now) {
  // A live band reaches now, or its last heartbeat if that is later: the
  // daemon's now is known to a second, and the band must hold its ticks.
  const end = (l) => l.end ?? Math.max(now, l.start, ...l.beats);
  const times = [...jobMarks.map((m) => m.t), ...leases.flatMap((l) => [l.start, end(l), ...l.beats, ...l.marks.map((m) => m.t)])];
  const sc = scale(times, LEFT, W - RIGHT);
  const x = sc.x;
  const height = ROW * (leases.length + 1) + 30;
  const axisY = height - 8;
  const rows = [];

  rows.push(h('text', { x: 8, y: ROW - 12 }, 'job'));
  for (const m of jobMarks) rows.push(marker(x(m.t), ROW - 16, m));

  leases.forEach((l, i) => {
    const y = ROW * (i + 1) + 4;
    const live = l.end === null;
    const cls = `band ${live ? 'live' : l.end_type}${l.outcome ? ' ' + l.outcome : ''}`;
    const what = `lease ${l.lease} · ${l.worker} · ${l.count} heartbeat${l.count === 1 ? '' : 's'}`;
    rows.push(h('g', { class: 'lease', 'data-lease': l.lease },
      // Two lines, each cut to fit before the bands: the whole in its title.
      h('text', { class: 'label', x: 8, y: y + 11 }, fit(`lease ${l.lease} · ${l.worker}`), h('title', {}, what)),
      h('text', { class: 'label sub', x: 8, y: y + 24 }, fit(`${l.count} heartbeat${l.count === 1 ? '' : 's'}`)),
      h('rect', { class: cls, x: x(l.start), y, width: Math.max(2, x(end(l)) - x(l.start)), height: ROW - 12, rx: 3 },
        h('title', {}, `${what}; ${live ? 'live' : l.end_type + (l.outcome ? ' ' + l.outcome : '')}`)),
      l.beats.map((t) => h('line', { class: 'beat', x1: x(t), x2: x(t), y1: y + 4, y2: y + ROW - 16 })),
      // A stale report sits on the band's top edge, clear of an expiry at the same moment.
      l.marks.map((m) => marker(x(m.t), m.kind === 'stale' ? y - 1 : y + (ROW - 12) / 2, m))));
  });

  const axis = sc.ticks.map((t) => [
    h('line', { class: 'grid', x1: t.x, x2: t.x, y1: 4, y2: axisY - 12 }),
    h('text', { class: 'axis', x: t.x, y: axisY, 'text-anchor': t.anchor }, t.label),
  ]);
  // A break: the time in it said once, where the axis skips it.
  const breaks = sc.breaks.map((b) => h('g', { class: 'break' },
    h('rect', { class: 'gap', x: b.x0, y: 2, width: b.x1 - b.x0, height: axisY - 12 }),
    h('path', { class: 'zigzag', d: zigzag((b.x0 + b.x1) / 2, 2, axisY - 10) }),
    h('text', { class: 'axis gap', x: (b.x0 + b.x1) / 2, y: axisY, 'text-anchor': 'middle' }, `+${duration((b.t1 - b.t0) / 1000)}`),
    h('title', {}, `nothing for ${duration((b.t1 - b.t0) / 1000)}, from ${clock(b.t0)} to ${clock(b.t1)}: not drawn to scale`)));
  return h('svg', { class: 'timeline', viewBox: `0 0 ${W} ${height}`, role: 'img', 'aria-label': 'timeline of the job' }, axis, breaks, rows);
}

// fit cuts a label to what fits left of the bands, with an ellipsis.
const fit = (s) => (s.length <= LABEL ? s : `${s.slice(0, LABEL - 1)}…`);

// zigzag is the mark of a break in the axis, from y0 down to y1 at x.
function zigzag(x, y0, y1) {
  let d = `M${x} ${y0}`;
  for (let y = y0, i = 0; y < y1; y += 6, i++) d += ` L${x + (i % 2 ? -3 : 3)} ${Math.min(y + 6, y1)}`;
  return d;
}

// marker is a diamond for the job's moments and expiries, a triangle for
// stale reports.
function marker(cx, cy, m) {
  const r = 6;
  const points = m.kind === 'stale'
    ? `${cx},${cy - r} ${cx + r},${cy + r} ${cx - r},${cy + r}`
    : `${cx},${cy - r} ${cx + r},${cy} ${cx},${cy + r} ${cx - r},${cy}`;
  return h('polygon', { class: `mark ${m.kind}`, points }, h('title', {}, m.label));
}
