// The daemon's own absence (stopped, asleep, starved) counts against no
// one: it records each as daemon.started or daemon.resumed with its gap and
// takes the gap out of every deadline (README, "Timing, fencing and
// absence"). A deadline counted from a time t is later by every gap
// recorded after t; absenceAfter reads those events once for a page.
import { all } from './api.js';

// absenceAfter reads the absences recorded since the wall time since (ms)
// and returns a function of a time t (ms): the absence recorded after t, in
// ms, by which a deadline counted from t is later.
export async function absenceAfter(since) {
  const gaps = [];
  for (const type of ['daemon.started', 'daemon.resumed']) {
    const { items } = await all('v1/events', 'events', { type, since: new Date(since).toISOString() });
    for (const e of items) gaps.push({ t: new Date(e.time).getTime(), ms: (e.gap_seconds || 0) * 1000 });
  }
  return (t) => gaps.reduce((sum, g) => (g.t > t ? sum + g.ms : sum), 0);
}
