// The stale-report ledger: every lease.stale_report, filtered by job, worker
// and time, a page at a time, newest events arriving live on the first page.
import { page } from './api.js';
import { coalesce, h, hashQuery, jobLink, setHashQuery, table, time } from './dom.js';

const LIMIT = 50;

export function render(main) {
  const q = hashQuery();
  const filters = { job: q.get('job') || '', worker: q.get('worker') || '', since: q.get('since') || '', until: q.get('until') || '' };
  let cursors = [undefined];

  // A datetime-local input has no zone: it is the browser's local time.
  const iso = (v) => (v ? new Date(v).toISOString() : '');
  const field = (name, type) => h('label', {}, name, h('input', {
    name, type, value: filters[name],
    onchange: (ev) => {
      filters[name] = ev.target.value.trim();
      setHashQuery(filters);
      cursors = [undefined];
      load();
    },
  }));
  const body = h('div', { id: 'stale' });
  main.append(h('h1', {}, 'Stale reports'),
    h('p', { class: 'muted' }, 'Reports that came after their lease had expired: refused, and kept for auditors.'),
    h('form', { class: 'filters', onsubmit: (ev) => ev.preventDefault() },
      field('job', 'text'), field('worker', 'text'), field('since', 'datetime-local'), field('until', 'datetime-local')),
    body);

  async function load() {
    let p;
    const params = { type: 'lease.stale_report', job: filters.job, worker: filters.worker, since: iso(filters.since), until: iso(filters.until) };
    try {
      p = await page('v1/events', 'events', params, LIMIT, cursors[cursors.length - 1]);
    } catch (err) {
      body.replaceChildren(h('p', { class: 'error' }, err.message));
      return;
    }
    const rows = p.items.map((e) => h('tr', { 'data-seq': e.seq },
      h('td', {}, e.seq), h('td', {}, time(e.time)), h('td', {}, jobLink(e.job)), h('td', {}, e.lease),
      h('td', {}, e.worker), h('td', {}, e.outcome || ''), h('td', {}, e.ref ? h('code', {}, e.ref) : ''),
      h('td', { class: 'wrap' }, e.reason || '')));
    body.replaceChildren(
      table(['seq', 'time', 'job', 'lease', 'worker', 'outcome', 'ref', 'reason'], rows, 'No stale report matches.'),
      h('div', { class: 'pager' },
        h('button', { class: 'prev', disabled: cursors.length === 1, onclick: () => { cursors.pop(); load(); } }, '← previous'),
        h('span', { class: 'muted' }, `page ${cursors.length}`),
        h('button', { class: 'next', disabled: p.next === undefined, onclick: () => { cursors.push(p.next); load(); } }, 'next →')));
  }

  const reload = coalesce(load, 200);
  load();
  return {
    onEvent: (e) => { if (e.type === 'lease.stale_report') reload(); },
    stop: () => reload.cancel(),
  };
}
