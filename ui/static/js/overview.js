// The first page: the daemon at a glance (GET /v1/overview) — the jobs by
// state and by outcome, each a link to the jobs it counts; the queue's depth
// and how long its head has waited; the workers up and down; the last
// hour's jobs reported and leases expired, a minute a bar; the latest
// failures and stale reports. Read again when the log moves, and every few
// seconds for the ages.
import { get } from './api.js';
import { clock, coalesce, duration, h, jobLink, table, time } from './dom.js';

const STATES = ['queued', 'acquired', 'running', 'expired', 'reported', 'failed', 'cancelled'];
const OUTCOMES = ['succeeded', 'failed', 'killed', 'cancelled'];
// The tone of each count, as the jobs are coloured (dom.js, tone).
// reported holds jobs reported failed as well as succeeded: no colour of its own.
const STATE_TONE = { queued: 'waiting', expired: 'waiting', acquired: 'live', running: 'live', reported: '', failed: 'lost', cancelled: 'off' };
const OUTCOME_TONE = { succeeded: 'ok', failed: 'bad', killed: 'bad', cancelled: 'off' };

export function render(main) {
  const body = h('div', { id: 'overview' });
  main.append(h('h1', {}, 'Overview'), body);

  async function load() {
    let o;
    try {
      o = await get('v1/overview');
    } catch (err) {
      body.replaceChildren(h('p', { class: 'error' }, err.message));
      return;
    }
    const now = new Date(o.time).getTime();
    const count = (n, label, href, tone, key) => h('a', { class: 'count', href, 'data-tone': tone, 'data-count': key },
      h('span', { class: 'n' }, n), h('span', { class: 'what' }, label));
    const q = o.queue;
    body.replaceChildren(
      h('section', { class: 'cards' },
        h('div', { class: 'card', id: 'by-state' }, h('h2', {}, 'Jobs by state'),
          h('div', { class: 'counts' }, STATES.map((s) => count(o.jobs[s] ?? 0, s, `#/jobs?state=${s}`, STATE_TONE[s], s)))),
        h('div', { class: 'card', id: 'by-outcome' }, h('h2', {}, 'Reported, by outcome'),
          h('div', { class: 'counts' }, OUTCOMES.map((x) => count(o.reported[x] ?? 0, x, `#/jobs?outcome=${x}`, OUTCOME_TONE[x], x)))),
        h('div', { class: 'card', id: 'queue' }, h('h2', {}, 'Queue'),
          h('div', { class: 'counts' }, count(q.depth, 'queued', '#/jobs?state=queued', 'waiting', 'depth'),
            h('span', { class: 'count', 'data-count': 'age' },
              h('span', { class: 'n' }, q.oldest ? duration(Math.max(0, now - new Date(q.oldest).getTime()) / 1000) : '—'),
              h('span', { class: 'what' }, q.oldest ? ['oldest waiting: ', jobLink(q.job)] : 'none waiting')))),
        h('div', { class: 'card', id: 'workers-up' }, h('h2', {}, 'Workers'),
          h('div', { class: 'counts' }, count(o.workers.reachable, 'up', '#/workers', 'ok', 'up'),
            count(o.workers.unreachable, 'down (unreachable)', '#/workers', o.workers.unreachable ? 'bad' : 'off', 'down')))),
      h('section', { class: 'cards' },
        h('div', { class: 'card wide', id: 'chart-reported' }, h('h2', {}, 'Jobs reported, per second (a minute a bar)'),
          chart(o.minutes.start, o.minutes.reported.map((n) => (n === null ? null : n / 60)), 'reported', (v) => `${v.toFixed(2)}/s`)),
        h('div', { class: 'card wide', id: 'chart-expired' }, h('h2', {}, 'Leases expired, per minute'),
          chart(o.minutes.start, o.minutes.expired, 'expired', (v) => `${v}`))),
      h('h2', {}, 'Latest failures'),
      h('div', { id: 'failures' }, table(['time', 'job', 'what', 'worker', 'reason'], o.failures.map((e) => h('tr', { 'data-seq': e.seq },
        h('td', {}, time(e.time)), h('td', {}, jobLink(e.job)),
        h('td', {}, h('span', { class: 'badge', 'data-tone': e.type === 'lease.reported' ? 'bad' : 'lost' }, failure(e))),
        h('td', {}, e.worker || ''), h('td', { class: 'wrap' }, e.reason || ''))), 'No failure yet.')),
      h('h2', {}, h('a', { href: '#/stale' }, 'Latest stale reports')),
      h('div', { id: 'latest-stale' }, table(['time', 'job', 'lease', 'worker', 'outcome', 'ref'], o.stale.map((e) => h('tr', { 'data-seq': e.seq },
        h('td', {}, time(e.time)), h('td', {}, jobLink(e.job)), h('td', {}, e.lease), h('td', {}, e.worker),
        h('td', {}, e.outcome || ''), h('td', {}, e.ref ? h('code', {}, e.ref) : ''))), 'No stale report.')));
  }

  // Once every 3 s at most: an overview reads the log's indexes.
  const reload = coalesce(load, 3000);
  const ticker = setInterval(load, 10000); // the queue's age and the minutes move with the time
  load();
  return {
    // Heartbeats change no count here.
    onEvent: (e) => { if (e.type !== 'lease.heartbeat') reload(); },
    stop: () => { clearInterval(ticker); reload.cancel(); },
  };
}

// failure names what went wrong in an event of the overview's failures.
function failure(e) {
  switch (e.type) {
    case 'lease.reported': return `reported ${e.outcome}`;
    case 'lease.expired': return 'lease expired';
    case 'lease.failed': return 'failed at its cap';
    default: return e.type;
  }
}

// chart draws a small bar chart of per-minute values from start (ISO), a
// null minute (not read: the overview's read is bounded) hatched.
function chart(start, values, cls, fmt) {
  const W = 600;
  const H = 90;
  const top = 14;
  const base = H - 18;
  const t0 = new Date(start).getTime();
  const max = Math.max(0, ...values.filter((v) => v !== null));
  const bw = W / values.length;
  const bars = values.map((v, i) => {
    const when = `${clock(t0 + i * 60000, 0, false)}–${clock(t0 + (i + 1) * 60000, 0, false)}`;
    if (v === null) {
      return h('rect', { class: 'bar unknown', x: i * bw + 1, y: top, width: bw - 2, height: base - top }, h('title', {}, `${when}: not read`));
    }
    const bh = max === 0 ? 0 : ((base - top) * v) / max;
    return h('rect', { class: `bar ${cls}`, x: i * bw + 1, y: base - Math.max(bh, v > 0 ? 1 : 0), width: bw - 2, height: Math.max(bh, v > 0 ? 1 : 0), 'data-value': v },
      h('title', {}, `${when}: ${fmt(v)}`));
  });
  return h('svg', { class: `chart ${cls}`, viewBox: `0 0 ${W} ${H}`, role: 'img', 'aria-label': `${cls} per minute, the last hour` },
    h('line', { class: 'base', x1: 0, x2: W, y1: base, y2: base }),
    bars,
    h('text', { class: 'axis', x: 0, y: H - 4, 'text-anchor': 'start' }, clock(t0, 0, false)),
    h('text', { class: 'axis', x: W, y: H - 4, 'text-anchor': 'end' }, clock(t0 + values.length * 60000, 0, false)),
    h('text', { class: 'axis max', x: W, y: 10, 'text-anchor': 'end' }, `max ${fmt(max)}`));
}
