// The jobs page: the newest submitted first (or by id), searched by id
// prefix, filtered by state, kind and outcome, a page at a time, coloured by
// how they went (dom.js, tone), with cancel and kill for an admin
// (actions.js); the page on screen is read again when the log says a job
// changed.
import { page } from './api.js';
import { actions } from './actions.js';
import { coalesce, h, hashQuery, jobBadge, jobLink, outcomeBadge, setHashQuery, table, time, waiting } from './dom.js';

const STATES = ['queued', 'acquired', 'running', 'reported', 'failed', 'cancelled', 'expired'];
const KINDS = ['run', 'evaluation'];
// What a job was reported to come to: a job reported failed is in state
// reported; state failed is a job whose worker was lost.
const OUTCOMES = ['succeeded', 'failed', 'cancelled', 'killed'];
// The API's orders (GET /v1/jobs?order=): newest submission first, or by id.
const ORDERS = { newest: 'newest first', id: 'by id' };
const LIMIT = 50;

export function render(main) {
  const q = hashQuery();
  const filters = {
    state: q.get('state') || '', kind: q.get('kind') || '', outcome: q.get('outcome') || '',
    prefix: q.get('prefix') || '', order: q.get('order') || '',
  };
  let cursors = [undefined]; // the after of every page up to the one on screen
  let seen = null; // ids of the last page shown, to mark the new ones

  const changed = (name, value) => {
    filters[name] = value;
    setHashQuery(filters);
    cursors = [undefined];
    seen = null;
    reload.cancel();
    load();
  };
  const select = (name, values, any = 'any') => h('select', { name, onchange: (ev) => changed(name, ev.target.value) },
    any === null ? null : h('option', { value: '' }, any),
    Object.entries(values).map(([v, label]) => h('option', { value: v, selected: v === filters[name] }, label)));
  const pairs = (xs) => Object.fromEntries(xs.map((x) => [x, x]));
  // The search asks as it is typed, once the typing pauses.
  const search = coalesce(() => changed('prefix', prefixInput.value.trim()), 250);
  const prefixInput = h('input', {
    name: 'prefix', type: 'search', value: filters.prefix, placeholder: 'id starts with…', autocomplete: 'off',
    oninput: () => search(),
  });

  const body = h('div', { id: 'jobs' });
  main.append(
    h('h1', {}, 'Jobs'),
    h('form', { class: 'filters', onsubmit: (ev) => { ev.preventDefault(); search.cancel(); changed('prefix', prefixInput.value.trim()); } },
      h('label', {}, 'search', prefixInput),
      h('label', {}, 'state', select('state', pairs(STATES))),
      h('label', {}, 'kind', select('kind', pairs(KINDS))),
      h('label', {}, 'outcome', select('outcome', pairs(OUTCOMES))),
      h('label', {}, 'order', select('order', { '': ORDERS.newest, id: ORDERS.id }, null))),
    body);

  async function load() {
    const after = cursors[cursors.length - 1];
    let p;
    try {
      p = await page('v1/jobs', 'jobs', { ...filters, order: filters.order || 'newest' }, LIMIT, after);
    } catch (err) {
      body.replaceChildren(h('p', { class: 'error' }, err.message));
      return;
    }
    const rows = p.items.map((j) => h('tr', { 'data-job': j.id, class: seen && !seen.has(j.id) ? 'fresh' : null },
      h('td', {}, jobLink(j.id)), h('td', {}, j.kind), h('td', {}, jobBadge(j)),
      h('td', {}, j.lease ? j.lease.worker : ''), h('td', {}, outcomeBadge(j)),
      h('td', {}, j.attempts), h('td', {}, j.leases), h('td', {}, time(j.submitted)), h('td', {}, time(j.updated)),
      h('td', { class: 'wrap' }, j.reason || waiting(j)), h('td', {}, actions(j))));
    seen = new Set(p.items.map((j) => j.id));
    const pager = h('div', { class: 'pager' },
      h('button', { class: 'prev', disabled: cursors.length === 1, onclick: () => { cursors.pop(); seen = null; load(); } }, '← previous'),
      h('span', { class: 'muted' }, `page ${cursors.length}`),
      h('button', { class: 'next', disabled: p.next === undefined, onclick: () => { cursors.push(p.next); seen = null; load(); } }, 'next →'));
    body.replaceChildren(
      table(['id', 'kind', 'state', 'worker', 'outcome', 'attempts', 'leases', 'submitted', 'updated', 'reason', ''], rows, 'No job matches.'),
      pager);
  }

  const reload = coalesce(load, 200);
  load();
  return {
    // A heartbeat changes no column of the list.
    onEvent: (e) => { if (e.job && e.type !== 'lease.heartbeat') reload(); },
    stop: () => { reload.cancel(); search.cancel(); },
  };
}
