// Cancel and kill, offered to an admin token (api.js, isAdmin) on a job not
// yet ended: a button each, a confirmation that names the job and what will
// happen, then the API's call (POST /v1/jobs/{id}/cancel or /kill). The log
// then tells every page what changed, over the event stream.
import { isAdmin, post } from './api.js';
import { h } from './dom.js';

// What each action does, as the confirmation says it.
const ACTIONS = {
  cancel: 'A queued job is cancelled now; a running one is asked to stop at its next heartbeat, and is not run again.',
  kill: 'A queued job is cancelled now; a running one is killed (its process tree) at its next heartbeat.',
};
const ENDED = new Set(['reported', 'cancelled', 'failed']);

// actions returns an element that holds the job's buttons once the daemon
// says the token may act; empty for an auditor, or a job that ended.
export function actions(j) {
  const el = h('span', { class: 'actions', 'data-job': j.id });
  if (ENDED.has(j.state)) return el;
  isAdmin().then((admin) => {
    el.dataset.admin = admin ? 'yes' : 'no'; // decided: what the page offers is final
    if (admin) el.replaceChildren(...buttons(el, j));
  });
  return el;
}

function buttons(el, j) {
  return Object.keys(ACTIONS).map((what) => h('button', {
    type: 'button', class: `act ${what}`, title: `${what} ${j.id}`,
    onclick: (ev) => { ev.stopPropagation(); confirm(el, j, what); },
  }, what));
}

// confirm replaces the buttons by the question; yes calls the API, no puts
// the buttons back.
function confirm(el, j, what) {
  const back = () => el.replaceChildren(...buttons(el, j));
  el.replaceChildren(h('span', { class: 'confirm', role: 'alertdialog' },
    h('span', { class: 'question' }, `${what[0].toUpperCase()}${what.slice(1)} ${j.id}? `, h('span', { class: 'muted' }, ACTIONS[what])),
    ' ',
    h('button', {
      type: 'button', class: `yes ${what}`,
      onclick: async (ev) => {
        ev.stopPropagation();
        el.replaceChildren(h('span', { class: 'muted' }, `${what}…`));
        try {
          const after = await post(`v1/jobs/${encodeURIComponent(j.id)}/${what}`);
          el.replaceChildren(h('span', { class: 'done' }, after.lease?.revoke ? `${what} asked: at its next heartbeat` : after.state));
        } catch (err) {
          el.replaceChildren(h('span', { class: 'error' }, `${what}: ${err.message}`));
        }
      },
    }, `yes, ${what}`),
    ' ',
    h('button', { type: 'button', class: 'no', onclick: (ev) => { ev.stopPropagation(); back(); } }, 'no')));
}
