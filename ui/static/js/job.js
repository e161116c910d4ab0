// A job's page: what the job is, cancel and kill for an admin (actions.js),
// its timeline (timeline.js) and its events, heartbeats collapsed, and its
// output (output.js), kept up to date from the event stream.
import { actions } from './actions.js';
import { all, daemonNow, get } from './api.js';
import { coalesce, h, jobBadge, labels, outcomeBadge, table, time, waiting } from './dom.js';
import { outputPanel } from './output.js';
import { draw, model } from './timeline.js';

export function render(main, id) {
  let jobDoc = null;
  let events = [];
  const head = h('div', {});
  const act = h('div', { id: 'job-actions' });
  let actedOn = ''; // the state the actions were drawn for: redrawn when it moves
  const graph = h('div', { id: 'timeline' });
  const list = h('div', { id: 'events' });
  const output = outputPanel(id);
  main.append(h('h1', {}, 'Job ', h('code', {}, id)), head, act,
    h('h2', {}, 'Timeline'), graph,
    h('div', { class: 'legend' },
      h('span', {}, h('span', { class: 'sw reported' }), 'reported succeeded'),
      h('span', {}, h('span', { class: 'sw bad' }), 'reported failed or killed'),
      h('span', {}, h('span', { class: 'sw off' }), 'reported cancelled'),
      h('span', {}, h('span', { class: 'sw live' }), 'live'),
      h('span', {}, h('span', { class: 'sw expired' }), 'expired or lost ◆'),
      h('span', {}, h('span', { class: 'sw beat' }), 'heartbeat'),
      h('span', {}, h('span', { class: 'sw stale' }), 'stale report ▲')),
    h('h2', {}, 'Events'), list,
    h('h2', {}, 'Output'), output.el);

  function show() {
    if (!jobDoc) return;
    const j = jobDoc;
    const spec = j.spec && j.spec.run ? j.spec.run : JSON.stringify(j.spec);
    head.replaceChildren(h('dl', { class: 'facts' },
      h('dt', {}, 'state'), h('dd', {}, jobBadge(j), ' ', outcomeBadge(j)),
      h('dt', {}, 'kind'), h('dd', {}, j.kind),
      h('dt', {}, 'attempts · leases'), h('dd', {}, `${j.attempts} · ${j.leases}`),
      j.lease ? [h('dt', {}, 'live lease'), h('dd', {}, `${j.lease.lease} on ${j.lease.worker} (${j.lease.state})`)] : null,
      j.reason ? [h('dt', {}, 'reason'), h('dd', {}, j.reason)] : null,
      j.max_requeues ? [h('dt', {}, 'max requeues'), h('dd', {}, j.max_requeues)] : null,
      j.labels ? [h('dt', {}, 'labels'), h('dd', {}, labels(j))] : null,
      j.priority ? [h('dt', {}, 'priority'), h('dd', {}, j.priority)] : null,
      j.not_before ? [h('dt', {}, 'not before'), h('dd', {}, time(j.not_before))] : null,
      waiting(j) ? [h('dt', {}, 'waiting'), h('dd', { class: j.unroutable ? 'error' : null }, waiting(j))] : null,
      j.timing ? [h('dt', {}, 'timing (own)'), h('dd', {}, `renew ${j.timing.renew_seconds}s · grace ${j.timing.grace_seconds}s · toleration ${j.timing.toleration_seconds}s`)] : null,
      j.details ? [h('dt', {}, 'progress'), h('dd', {}, h('code', {}, JSON.stringify(j.details)))] : null,
      j.ref ? [h('dt', {}, 'ref'), h('dd', {}, h('code', {}, j.ref))] : null,
      h('dt', {}, 'spec'), h('dd', {}, h('code', {}, spec)),
      h('dt', {}, 'submitted'), h('dd', {}, time(j.submitted))));
    if (actedOn !== j.state) {
      actedOn = j.state;
      act.replaceChildren(actions(j));
    }
    graph.replaceChildren(events.length ? draw(model(events), daemonNow()) : h('p', { class: 'muted' }, 'No events.'));
    list.replaceChildren(table(['seq', 'time', 'type', 'lease', 'worker', 'detail'], collapse(events).map(row), 'No events.'));
  }

  async function load() {
    try {
      jobDoc = await get(`v1/jobs/${encodeURIComponent(id)}`);
      events = (await all('v1/events', 'events', { job: id })).items;
    } catch (err) {
      main.replaceChildren(h('h1', {}, 'Job ', h('code', {}, id)), h('p', { class: 'error' }, err.message));
      return;
    }
    show();
    output.refresh();
  }

  const refreshJob = coalesce(async () => {
    try { jobDoc = await get(`v1/jobs/${encodeURIComponent(id)}`); } catch { /* shown on the next load */ }
    show();
    output.refresh();
  }, 200);
  // A live lease's band grows with the time.
  const tick = setInterval(() => {
    if (jobDoc?.lease) {
      show();
      output.refresh();
    }
  }, 2000);
  load();
  return {
    onEvent: (e) => {
      if (e.job !== id || events.some((x) => x.seq === e.seq)) return;
      events.push(e);
      refreshJob();
    },
    stop: () => { clearInterval(tick); refreshJob.cancel(); },
  };
}

// collapse merges each run of heartbeats of one lease into one line.
function collapse(events) {
  const out = [];
  for (const e of events) {
    const last = out[out.length - 1];
    if (e.type === 'lease.heartbeat' && !e.details && last && last.type === 'lease.heartbeat' && !last.details && last.lease === e.lease) {
      last.count++;
      last.until = e;
    } else {
      out.push({ ...e, count: 1 });
    }
  }
  return out;
}

function row(e) {
  const detail = [e.outcome, e.revoke && `revoke ${e.revoke}`, e.reason, e.ref && `ref ${e.ref}`,
    e.gap_seconds && `gap ${e.gap_seconds}s`, e.result && `result ${JSON.stringify(e.result)}`,
    e.heartbeats && `${e.heartbeats.count} heartbeats compacted, the first at seq ${e.heartbeats.first_seq}, ${time(e.heartbeats.first_time)}`,
    e.timing && `timing ${e.timing.renew_seconds}/${e.timing.grace_seconds}/${e.timing.toleration_seconds}s`,
    e.details && `progress ${JSON.stringify(e.details)}`,
  ].filter(Boolean).join(' · ');
  const type = e.count > 1 ? `${e.type} ×${e.count}` : e.type;
  const when = e.count > 1 ? `${time(e.time)} … ${time(e.until.time).slice(11)}` : time(e.time);
  return h('tr', { 'data-type': e.type },
    h('td', {}, e.count > 1 ? `${e.seq}…${e.until.seq}` : e.seq), h('td', {}, when), h('td', {}, type),
    h('td', {}, e.lease || ''), h('td', {}, e.worker || ''), h('td', { class: 'wrap' }, detail));
}
