// Small DOM and formatting helpers shared by the pages.
import { daemonNow } from './api.js';

// h builds an element: h('a', {href: '#/jobs', class: 'x'}, 'text', child…).
// Attributes named on* become listeners; null/undefined/false ones are left out.
export function h(tag, attrs = {}, ...children) {
  const svg = SVG_TAGS.has(tag);
  const el = svg ? document.createElementNS('http://www.w3.org/2000/svg', tag) : document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
    else if (k === 'value' && !svg) el.value = v;
    else el.setAttribute(k, v === true ? '' : String(v));
  }
  for (const c of children.flat(Infinity)) {
    if (c === null || c === undefined || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

const SVG_TAGS = new Set(['svg', 'g', 'rect', 'line', 'text', 'title', 'circle', 'path', 'polygon']);

// table builds a table from column heads and rows (arrays of cells).
export function table(heads, rows, empty = 'Nothing here.') {
  if (rows.length === 0) return h('p', { class: 'muted empty' }, empty);
  return h('table', {}, h('thead', {}, h('tr', {}, heads.map((x) => h('th', {}, x)))),
    h('tbody', {}, rows));
}

export const badge = (text) => h('span', { class: `badge ${text}` }, text);

// tone is how a job went, for its colour: its state says where it is, and
// a reported job's outcome says how it ended — a job reported failed is in
// state reported, and must not look like a success.
export function tone(j) {
  switch (j.state) {
    case 'reported':
      return { succeeded: 'ok', failed: 'bad', killed: 'bad', cancelled: 'off' }[j.outcome] || 'ok';
    case 'failed': return 'lost'; // its worker lost: "worker lost", "lost N times"
    case 'cancelled': return 'off';
    case 'acquired': case 'running': return 'live';
    default: return 'waiting'; // queued, or expired on its way back to the queue
  }
}

// jobBadge shows a job's state in the colour of its tone.
export const jobBadge = (j) => h('span', { class: `badge ${j.state}`, 'data-tone': tone(j) }, j.state);

// outcomeBadge shows a reported job's outcome in the colour of its tone.
export const outcomeBadge = (j) => (j.outcome ? h('span', { class: 'badge outcome', 'data-tone': tone(j) }, j.outcome) : '');

// What a queued job waits for, if anything: its time, or a worker that can
// take it (the daemon's waiting_for).
export function waiting(j) {
  if (j.waiting_for === 'not_before') return `waits until ${time(j.not_before)}`;
  if (j.waiting_for === 'worker') return 'no worker present takes it';
  return '';
}

// A job's labels, key=value, by key.
export const labels = (j) => Object.keys(j.labels || {}).sort().map((k) => `${k}=${j.labels[k]}`).join(', ');

export const jobLink = (id) => h('a', { href: `#/job/${encodeURIComponent(id)}` }, id);

// time shows an RFC 3339 time in local time, to the second, 24-hour.
export function time(iso) {
  if (!iso) return '';
  const d = new Date(iso);
  const p = (n) => String(n).padStart(2, '0');
  return `${d.getFullYear()}-${p(d.getMonth() + 1)}-${p(d.getDate())} ${clock(d.getTime())}`;
}

// clock shows a time in ms as the tables do, 24-hour and local, whatever
// the browser's locale: HH:MM:SS, with digits (0 to 3) of the second after
// it, or HH:MM when seconds is false.
export function clock(ms, digits = 0, seconds = true) {
  const d = new Date(ms);
  const p = (n, w = 2) => String(n).padStart(w, '0');
  let s = `${p(d.getHours())}:${p(d.getMinutes())}`;
  if (seconds) s += `:${p(d.getSeconds())}`;
  if (seconds && digits > 0) s += `.${p(d.getMilliseconds(), 3).slice(0, digits)}`;
  return s;
}

// duration shows seconds as "1h 02m", "3m 05s" or "4.2s"; negative ones as "-…".
export function duration(s) {
  const sign = s < 0 ? '-' : '';
  s = Math.abs(s);
  const p = (n) => String(Math.floor(n)).padStart(2, '0');
  if (s < 10) return `${sign}${s.toFixed(1)}s`;
  if (s < 60) return `${sign}${Math.floor(s)}s`;
  if (s < 3600) return `${sign}${Math.floor(s / 60)}m ${p(s % 60)}s`;
  return `${sign}${Math.floor(s / 3600)}h ${p((s % 3600) / 60)}m`;
}

// ago shows how long before now (the daemon's: daemonNow) a time in ms was;
// under a second, or ahead (the estimate of the daemon's clock is to the
// second), is "just now".
export const ago = (t) => (daemonNow() - t < 1000 ? 'just now' : `${duration((daemonNow() - t) / 1000)} ago`);

// coalesce returns a function that calls fn ms after its first call, once
// for all the calls meanwhile: a steady flood of events still gets its
// reloads, one per ms at most.
export function coalesce(fn, ms) {
  let timer = null;
  const d = () => {
    if (timer === null) timer = setTimeout(() => { timer = null; fn(); }, ms);
  };
  d.cancel = () => { clearTimeout(timer); timer = null; };
  return d;
}

// hashQuery is the query part of the location's fragment (#/jobs?state=x).
export function hashQuery() {
  const i = location.hash.indexOf('?');
  return new URLSearchParams(i < 0 ? '' : location.hash.slice(i + 1));
}

// setHashQuery replaces the fragment's query, keeping its path, without a
// new history entry for every keystroke of a filter.
export function setHashQuery(params) {
  const path = location.hash.split('?')[0] || '#/jobs';
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) if (v) q.set(k, v);
  const s = q.toString();
  history.replaceState(null, '', path + (s ? '?' + s : ''));
}
