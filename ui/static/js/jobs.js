// The jobs page: the jobs by id, filtered by state, kind and outcome, a page
// at a time, coloured by how they went (dom.js, tone); the page on screen is
// read again when the log says a job changed.
import { page } from './api.js';
import { coalesce, h, hashQuery, jobBadge, jobLink, outcomeBadge, setHashQuery, table, time, waiting } from './dom.js';

const STATES = ['queued', 'acquired', 'running', 'reported', 'failed', 'cancelled', 'expired'];
const KINDS = ['run', 'evaluation'];
// What a job was reported to come to: a job reported failed is in state
// reported; state failed is a job whose worker was lost.
const OUTCOMES = ['succeeded', 'failed', 'cancelled', 'killed'];
const LIMIT = 50;

export function render(main) {
  const q = hashQuery();
  const filters = { state: q.get('state') || '', kind: q.get('kind') || '', outcome: q.get('outcome') || '' };
  let cursors = [undefined]; // the after of every page up to the one on screen
  let seen = null; // ids of the last page shown, to mark the new ones

  const select = (name, values) => h('select', {
    name,
    onchange: (ev) => {
      filters[name] = ev.target.value;
      setHashQuery(filters);
      cursors = [undefined];
      seen = null;
      load();
    },
  }, h('option', { value: '' }, 'any'), values.map((v) => h('option', { value: v, selected: v === filters[name] }, v)));

  const body = h('div', { id: 'jobs' });
  main.append(
    h('h1', {}, 'Jobs'),
    h('form', { class: 'filters', onsubmit: (ev) => ev.preventDefault() },
      h('label', {}, 'state', select('state', STATES)),
      h('label', {}, 'kind', select('kind', KINDS)),
      h('label', {}, 'outcome', select('outcome', OUTCOMES))),
    body);

  async function load() {
    const after = cursors[cursors.length - 1];
    let p;
    try {
      p = await page('v1/jobs', 'jobs', filters, LIMIT, after);
    } catch (err) {
      body.replaceChildren(h('p', { class: 'error' }, err.message));
      return;
    }
    const rows = p.items.map((j) => h('tr', { 'data-job': j.id, class: seen && !seen.has(j.id) ? 'fresh' : null },
      h('td', {}, jobLink(j.id)), h('td', {}, j.kind), h('td', {}, jobBadge(j)),
      h('td', {}, j.lease ? j.lease.worker : ''), h('td', {}, outcomeBadge(j)),
      h('td', {}, j.attempts), h('td', {}, j.leases), h('td', {}, time(j.updated)),
      h('td', { class: 'wrap' }, j.reason || waiting(j))));
    seen = new Set(p.items.map((j) => j.id));
    const pager = h('div', { class: 'pager' },
      h('button', { class: 'prev', disabled: cursors.length === 1, onclick: () => { cursors.pop(); seen = null; load(); } }, '← previous'),
      h('span', { class: 'muted' }, `page ${cursors.length}`),
      h('button', { class: 'next', disabled: p.next === undefined, onclick: () => { cursors.push(p.next); seen = null; load(); } }, 'next →'));
    body.replaceChildren(
      table(['id', 'kind', 'state', 'worker', 'outcome', 'attempts', 'leases', 'updated', 'reason'], rows, 'No job matches.'),
      pager);
  }

  const reload = coalesce(load, 200);
  load();
  return {
    // A heartbeat changes no column of the list.
    onEvent: (e) => { if (e.job && e.type !== 'lease.heartbeat') reload(); },
    stop: () => reload.cancel(),
  };
}
