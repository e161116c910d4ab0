// The workers the daemon knows (GET /v1/workers): reachable or not, their
// live leases, when they last spoke and, for a reachable worker holding
// leases, the time left before grace makes it unreachable (later by any
// absence of the daemon's since: absence.js).
import { absenceAfter } from './absence.js';
import { all, daemonNow } from './api.js';
import { ago, badge, coalesce, duration, h, table, time } from './dom.js';

export function render(main) {
  const body = h('div', { id: 'workers' });
  main.append(h('h1', {}, 'Workers'), body);

  async function load() {
    let res;
    try {
      res = await all('v1/workers', 'workers');
    } catch (err) {
      body.replaceChildren(h('p', { class: 'error' }, err.message));
      return;
    }
    const grace = res.doc.grace_seconds;
    const held = res.items.filter((w) => w.reachable && w.live_leases > 0);
    let absence = () => 0;
    try {
      if (held.length) absence = await absenceAfter(Math.min(...held.map((w) => new Date(w.seen).getTime())));
    } catch { /* the time left then errs early */ }
    const now = daemonNow();
    const rows = res.items.map((w) => {
      const seen = new Date(w.seen).getTime();
      const left = (seen + absence(seen) + grace * 1000 - now) / 1000;
      return h('tr', { 'data-worker': w.id },
        h('td', {}, h('a', { href: `#/stale?worker=${encodeURIComponent(w.id)}`, title: 'its stale reports' }, w.id)),
        h('td', {}, badge(w.reachable ? 'yes' : 'no')),
        h('td', {}, w.live_leases),
        h('td', {}, time(w.seen), h('span', { class: 'muted' }, ` (${ago(seen)})`)),
        h('td', {}, w.reachable && w.live_leases > 0 ? duration(Math.max(0, left)) : ''));
    });
    body.replaceChildren(table(['worker', 'reachable', 'live leases', 'last seen', 'to grace'], rows, 'No worker has spoken yet.'));
  }

  const reload = coalesce(load, 200);
  const ticker = setInterval(load, 5000); // "ago" and "to grace" move with the time
  load();
  return {
    onEvent: (e) => { if (e.worker || e.type.startsWith('daemon.')) reload(); },
    stop: () => { clearInterval(ticker); reload.cancel(); },
  };
}
