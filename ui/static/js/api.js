// The API as the pages use it (docs/openapi.yaml): the token, calls with
// their errors, the paging contract (limit, after, next) and the event stream.

const KEY = 'leaselog.token';

// The token lives in this tab's sessionStorage only: it goes when the tab
// does, and no other tab or later visit finds it.
export const token = () => sessionStorage.getItem(KEY) || '';
export function setToken(t) {
  if (t) sessionStorage.setItem(KEY, t);
  else sessionStorage.removeItem(KEY);
}

// takeTokenFromLink moves a token given in the link's fragment (#token=…, as
// `leaselog serve` prints it) into the tab, and out of the address bar and
// the history. A fragment never reaches the server or a Referer.
export function takeTokenFromLink() {
  const m = location.hash.match(/^#token=([^&]*)/);
  if (!m) return false;
  setToken(decodeURIComponent(m[1]));
  history.replaceState(null, '', location.pathname + location.search + '#/overview');
  return true;
}

// APIError is a refused call: its HTTP status and the API's error code.
export class APIError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

// The API is at the root of the origin that serves /ui/; relative, so that a
// proxy that mounts the daemon under a prefix works too.
const base = new URL('../', location.href);

function url(path, params = {}) {
  const u = new URL(path, base);
  for (const [k, v] of Object.entries(params)) {
    if (v !== undefined && v !== null && v !== '') u.searchParams.set(k, String(v));
  }
  return u;
}

// The daemon's clock may not be this browser's: the pages count the time
// left to a deadline on the daemon's. Each answer's Date header (whole
// seconds) bounds the difference: the daemon read its clock between sent and
// received, somewhere in the second the header names. The bounds of every
// answer are intersected (the estimate only narrows) and the middle kept;
// bounds that no longer meet (a clock was set) start over.
let lo = -Infinity;
let hi = Infinity;
let skew = 0;

// daemonNow is the daemon's time now, in ms, as best this page knows it.
export const daemonNow = () => Date.now() + skew;

function learnSkew(r, sent, received) {
  const date = Date.parse(r.headers.get('Date') || '');
  if (Number.isNaN(date)) return;
  let [l, h] = [date - received, date + 1000 - sent];
  if (Math.max(l, lo) <= Math.min(h, hi)) [l, h] = [Math.max(l, lo), Math.min(h, hi)];
  [lo, hi] = [l, h];
  skew = (lo + hi) / 2;
}

async function call(method, path, params, body) {
  const headers = {};
  if (token()) headers.Authorization = `Bearer ${token()}`;
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  const sent = Date.now();
  const r = await fetch(url(path, params), {
    method, headers, cache: 'no-store', body: body === undefined ? undefined : JSON.stringify(body),
  });
  learnSkew(r, sent, Date.now());
  const doc = await r.json().catch(() => null);
  if (!r.ok) throw refused(r, doc);
  return doc;
}

// refused is the APIError of a refused answer. A 401 is also told to the
// shell (app.js), which asks for a token again: the one in the tab is not
// (or no longer) good.
function refused(r, doc) {
  const err = new APIError(r.status, doc?.error?.code || `http_${r.status}`, doc?.error?.message || r.statusText);
  if (r.status === 401) window.dispatchEvent(new CustomEvent('leaselog:unauthorized', { detail: err }));
  return err;
}

export const get = (path, params) => call('GET', path, params);

// post sends a command (a cancel, a kill): body undefined sends none.
export const post = (path, body) => call('POST', path, undefined, body);

// isAdmin tells whether this tab's token may act (cancel, kill), as the
// daemon says (GET /v1/overview's admin), asked once per token. The calls
// are authorised by the daemon all the same: this only decides what the
// pages offer.
let role = { token: null, admin: null };
export function isAdmin() {
  if (role.token !== token()) {
    role = { token: token(), admin: get('v1/overview').then((o) => o.admin === true, () => false) };
  }
  return role.admin;
}

// bytes reads an answer that is not JSON (a job's output): its text and
// headers; a refusal is an APIError as for any call.
export async function bytes(path, params) {
  const headers = token() ? { Authorization: `Bearer ${token()}` } : {};
  const r = await fetch(url(path, params), { headers, cache: 'no-store' });
  if (!r.ok) throw refused(r, await r.json().catch(() => null));
  return { text: await r.text(), headers: r.headers };
}

// page reads one page of a list: {items, next}. next, when present, is the
// cursor of the following page, passed back verbatim as after.
export async function page(path, field, params, limit, after) {
  const doc = await get(path, { ...params, limit, after });
  const items = doc[field] || [];
  // The last page has no next; a page shorter than limit is the last too.
  const next = doc.next !== undefined && doc.next !== null && items.length === limit ? doc.next : undefined;
  return { items, next, doc };
}

// all reads every page of a list.
export async function all(path, field, params = {}, limit = 1000) {
  const out = [];
  let after;
  for (;;) {
    const p = await page(path, field, params, limit, after);
    out.push(...p.items);
    if (p.next === undefined) return { items: out, doc: p.doc };
    after = p.next;
  }
}

// The event types of the log (README, "Events"): the stream names each
// message by its type, and EventSource dispatches by that name.
export const EVENT_TYPES = [
  'lease.queued', 'lease.acquired', 'lease.running', 'lease.heartbeat', 'lease.revoked',
  'lease.reported', 'lease.expired', 'lease.lost', 'lease.cancelled', 'lease.failed', 'lease.stale_report',
  'worker.unreachable', 'worker.reachable', 'daemon.started', 'daemon.stopping', 'daemon.resumed',
  'lease.heartbeats',
];

// stream follows the log from after seq: onEvent gets each event, onState
// whether the stream is connected. EventSource cannot send a header, so the
// token goes as the stream's token parameter; on a reconnect it resumes with
// Last-Event-ID by itself. It returns a function that closes the stream.
export function stream(after, onEvent, onState) {
  const es = new EventSource(url('v1/events/stream', { after, token: token() }));
  const deliver = (m) => {
    try { onEvent(JSON.parse(m.data)); } catch (err) { console.error('event', m.data, err); }
  };
  for (const t of EVENT_TYPES) es.addEventListener(t, deliver);
  es.onmessage = deliver; // a type this page does not know yet
  es.onopen = () => onState(true);
  es.onerror = () => onState(false);
  return () => es.close();
}
