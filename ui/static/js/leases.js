// The live leases, each with the time left before its holder would be
// unreachable (grace) and before it expires (toleration), counted from when
// the daemon last heard of it, on the daemon's clock, later by any absence
// of the daemon's since (absence.js). The daemon's timing comes with its
// workers (GET /v1/workers).
import { absenceAfter } from './absence.js';
import { all, daemonNow, get } from './api.js';
import { ago, badge, coalesce, duration, h, jobLink, table, time } from './dom.js';

export function render(main) {
  const body = h('div', { id: 'leases' });
  main.append(h('h1', {}, 'Live leases'), h('p', { class: 'muted', id: 'timing' }), body);
  let leases = [];
  let timing = null;
  let absence = () => 0;

  // left is a countdown cell, rewritten every second by tick.
  const left = (deadline) => h('td', { class: 'left', 'data-deadline': deadline });

  function show() {
    const rows = leases.map((l) => {
      const heard = new Date(l.heard).getTime();
      const from = heard + absence(heard); // where the deadlines count from
      return h('tr', { 'data-lease': l.lease },
        h('td', {}, l.lease), h('td', {}, jobLink(l.job)), h('td', {}, l.kind), h('td', {}, l.worker),
        h('td', {}, badge(l.state), l.revoke ? ` ${l.revoke}` : ''), h('td', {}, time(l.acquired)),
        h('td', { class: 'heard', 'data-since': heard }),
        left(from + timing.grace_seconds * 1000), left(from + timing.toleration_seconds * 1000));
    });
    body.replaceChildren(table(['lease', 'job', 'kind', 'worker', 'state', 'acquired', 'heard', 'to grace', 'to toleration'],
      rows, 'No live lease.'));
    tick();
  }

  function tick() {
    const now = daemonNow();
    for (const td of body.querySelectorAll('td.heard')) td.textContent = ago(Number(td.dataset.since));
    for (const td of body.querySelectorAll('td.left')) {
      const s = (td.dataset.deadline - now) / 1000;
      td.textContent = s > 0 ? duration(s) : `past ${duration(-s)}`;
      td.classList.toggle('past', s <= 0);
      td.classList.toggle('near', s > 0 && s < 2 * timing.renew_seconds);
    }
  }

  async function load() {
    try {
      const w = await get('v1/workers', { limit: 1 });
      timing = { renew_seconds: w.renew_seconds, grace_seconds: w.grace_seconds, toleration_seconds: w.toleration_seconds };
      leases = (await all('v1/leases', 'leases')).items;
      if (leases.length) absence = await absenceAfter(Math.min(...leases.map((l) => new Date(l.heard).getTime())));
    } catch (err) {
      body.replaceChildren(h('p', { class: 'error' }, err.message));
      return;
    }
    main.querySelector('#timing').textContent =
      `renew ${timing.renew_seconds}s · grace ${timing.grace_seconds}s · toleration ${timing.toleration_seconds}s, from the last word heard`;
    show();
  }

  // Every heartbeat moves a lease's heard: a reload a second at most.
  const reload = coalesce(load, 1000);
  const ticker = setInterval(() => timing && tick(), 1000);
  load();
  return {
    onEvent: (e) => { if (e.lease || e.type.startsWith('daemon.')) reload(); },
    stop: () => { clearInterval(ticker); reload.cancel(); },
  };
}
