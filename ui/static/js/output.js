// A job's output on its page: stdout and stderr of its latest run, read by
// offset (GET /v1/jobs/{id}/output) and followed while the job runs, each
// pane scrolled to its latest lines. The
// daemon has the output of its own worker's runs only; for another worker's
// the API says where it is, and the panel shows that.
import { APIError, bytes } from './api.js';
import { h } from './dom.js';

const KEEP = 256 * 1024; // the characters a panel keeps: the tail of a long output
const FINAL = new Set(['reported', 'cancelled', 'failed']);

export function outputPanel(id) {
  const streams = ['stdout', 'stderr'].map((name) => ({
    name, lease: null, offset: 0, pre: h('pre', { class: 'output', id: `output-${name}` }),
  }));
  const note = h('p', { class: 'muted', id: 'output-note' });
  const el = h('div', {}, note, streams.map((s) => [h('h3', {}, s.name), s.pre]));
  let busy = false;
  let done = false;

  // refresh reads what each stream has past its offset, until the end.
  async function refresh() {
    if (busy || done) return;
    busy = true;
    try {
      let state = '';
      for (const s of streams) {
        for (;;) {
          const params = { stream: s.name, offset: s.offset };
          const r = await bytes(`v1/jobs/${encodeURIComponent(id)}/output`, params);
          const lease = r.headers.get('Leaselog-Lease');
          state = r.headers.get('Leaselog-Job-State') || state;
          if (s.lease !== null && lease !== s.lease) { // a new run: its output from the start
            s.lease = lease;
            s.offset = 0;
            s.pre.textContent = '';
            continue;
          }
          s.lease = lease;
          s.offset = Number(r.headers.get('Leaselog-Next-Offset')) || s.offset;
          if (r.text === '') break;
          // The pane follows the tail, as tail -f does, unless its reader
          // scrolled up to read: then it stays where they are.
          const following = s.pre.scrollTop + s.pre.clientHeight >= s.pre.scrollHeight - 4;
          s.pre.textContent = (s.pre.textContent + r.text).slice(-KEEP);
          if (following) s.pre.scrollTop = s.pre.scrollHeight;
        }
      }
      note.textContent = streams[0].lease === '0' ? 'No run yet.' : '';
      done = FINAL.has(state); // the bytes read after a final state are all there are
    } catch (err) {
      note.textContent = err instanceof APIError ? err.message : `output: ${err.message}`;
      note.classList.add('error');
      done = err instanceof APIError && err.status === 404;
    } finally {
      busy = false;
    }
  }
  return { el, refresh };
}
