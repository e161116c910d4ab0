// The dashboard's shell: the token, the router (the fragment names the page:
// #/overview, the first, #/jobs, #/job/ID, #/leases, #/workers, #/stale)
// and the one event stream, whose events go to the page on screen.
import { APIError, get, setToken, stream, takeTokenFromLink, token } from './api.js';
import { h } from './dom.js';
import * as overview from './overview.js';
import * as jobs from './jobs.js';
import * as job from './job.js';
import * as leases from './leases.js';
import * as workers from './workers.js';
import * as stale from './stale.js';

const pages = { overview, jobs, job, leases, workers, stale };
const main = document.getElementById('main');
const live = document.getElementById('live');
const forget = document.getElementById('forget');

let current = null; // the page on screen: {onEvent(e), stop()}
let closeStream = null;

function route() {
  current?.stop?.();
  const [path] = location.hash.replace(/^#\/?/, '').split('?');
  const [name, ...rest] = path.split('/');
  const page = pages[name] || overview;
  for (const a of document.querySelectorAll('nav a')) {
    a.classList.toggle('current', a.dataset.page === (pages[name] ? name : 'overview') || (name === 'job' && a.dataset.page === 'jobs'));
  }
  main.replaceChildren();
  current = page.render(main, decodeURIComponent(rest.join('/'))) || {};
  main.dataset.page = page === overview ? 'overview' : name;
}

function setLive(on) {
  live.dataset.state = on ? 'on' : 'off';
  live.textContent = on ? 'live' : 'offline';
}

// askToken shows the token form; why says what went wrong with the last one.
function askToken(why) {
  current?.stop?.();
  current = null;
  main.dataset.page = 'token';
  const input = h('input', { type: 'password', name: 'token', autocomplete: 'off', required: true, id: 'token-input', 'aria-label': 'token' });
  main.replaceChildren(h('form', {
    class: 'token',
    onsubmit: (ev) => {
      ev.preventDefault();
      setToken(input.value.trim());
      start();
    },
  },
  h('h1', {}, 'This daemon takes a token'),
  h('p', {}, 'Open the link ', h('code', {}, 'leaselog serve'), ' logs (it carries the token), or paste an admin or ',
    'auditor token. It is kept in this tab only.'),
  input,
  why ? h('p', { class: 'error', id: 'token-error' }, why) : null,
  h('button', { type: 'submit' }, 'Use token')));
  input.focus();
}

// start checks the token against a read, then follows the log from its last
// durable event and shows the page the fragment names.
async function start() {
  closeStream?.();
  setLive(false);
  forget.hidden = !token();
  let seq;
  try {
    await get('v1/events', { type: 'daemon.started', limit: 1 });
    seq = (await get('healthz')).seq;
  } catch (err) {
    if (err instanceof APIError && err.status === 401) return; // unauthorized (below) asks for a token
    if (err instanceof APIError && err.status === 403) {
      unauthorized(`${err.message}: this token may not read the log.`);
      return;
    }
    main.replaceChildren(h('p', { class: 'error' }, `The daemon does not answer: ${err.message}`));
    return;
  }
  closeStream = stream(seq, (e) => current?.onEvent?.(e), setLive);
  route();
}

// unauthorized drops the tab's token, and the stream that used it, and
// asks for another; why names what was wrong with it, if there was one.
function unauthorized(why) {
  const had = token();
  closeStream?.();
  closeStream = null;
  setLive(false);
  setToken('');
  forget.hidden = true;
  askToken(had ? why : '');
}

// Any call refused with 401, the first of start's or a page's, lands here.
window.addEventListener('leaselog:unauthorized', (ev) => {
  if (main.dataset.page !== 'token' || token()) unauthorized(`${ev.detail.message}: try another token.`);
});

forget.addEventListener('click', () => {
  setToken('');
  start();
});
window.addEventListener('hashchange', () => {
  if (takeTokenFromLink()) start();
  else if (main.dataset.page !== 'token') route();
});
takeTokenFromLink();
start();
