package projection

import (
	"container/heap"

	"github.com/leaselog/leaselog/fsm"
)

// queue holds queued jobs, oldest queueing first. A job that leaves the queue
// is not removed at once: its entry goes stale (the job is no longer queued,
// or was queued again later) and is dropped when it reaches the head or when
// stale entries outnumber live ones.
type queue struct {
	items []queued
	head  int
}

type queued struct {
	j   *job
	seq uint64 // the job's queuedSeq when it was pushed
}

func (e queued) valid() bool { return e.j.state == fsm.Queued && e.j.queuedSeq == e.seq }

func (q *queue) push(j *job) { q.items = append(q.items, queued{j, j.queuedSeq}) }

// forget drops stale entries at the head, and compacts when most are stale.
func (q *queue) forget() {
	for q.head < len(q.items) && !q.items[q.head].valid() {
		q.items[q.head] = queued{}
		q.head++
	}
	if q.head > 1024 && q.head > len(q.items)/2 {
		n := copy(q.items, q.items[q.head:])
		clear(q.items[n:])
		q.items, q.head = q.items[:n], 0
	}
}

// each calls fn on queued jobs in queue order until fn returns false.
func (q *queue) each(fn func(*job) bool) {
	for _, e := range q.items[q.head:] {
		if e.valid() && !fn(e.j) {
			return
		}
	}
}

// leaseHeap orders live leases by the present time their holder was last
// heard from, so the sweeper finds the silent ones without a scan.
type leaseHeap []*lease

func (h leaseHeap) Len() int { return len(h) }
func (h leaseHeap) Less(i, j int) bool {
	if h[i].heardV != h[j].heardV {
		return h[i].heardV < h[j].heardV
	}
	return h[i].id < h[j].id
}
func (h leaseHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].heapIdx, h[j].heapIdx = i, j
}
func (h *leaseHeap) Push(x any) {
	l := x.(*lease)
	l.heapIdx = len(*h)
	*h = append(*h, l)
}
func (h *leaseHeap) Pop() any {
	old := *h
	l := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	l.heapIdx = -1
	return l
}
func (h *leaseHeap) add(l *lease) { heap.Push(h, l) }
func (h *leaseHeap) fix(l *lease) {
	if l.heapIdx >= 0 {
		heap.Fix(h, l.heapIdx)
	}
}
func (h *leaseHeap) remove(l *lease) {
	if l.heapIdx >= 0 {
		heap.Remove(h, l.heapIdx)
	}
}

// upTo calls fn on every lease heard from at or before present time v. It
// walks only the part of the heap that qualifies, in no particular order.
func (h leaseHeap) upTo(v int64, fn func(*lease)) {
	var walk func(i int)
	walk = func(i int) {
		if i >= len(h) || h[i].heardV > v {
			return
		}
		fn(h[i])
		walk(2*i + 1)
		walk(2*i + 2)
	}
	walk(0)
}

// workerHeap orders watched workers by the present time they were last heard.
type workerHeap []*worker

func (h workerHeap) Len() int { return len(h) }
func (h workerHeap) Less(i, j int) bool {
	if h[i].seenV != h[j].seenV {
		return h[i].seenV < h[j].seenV
	}
	return h[i].id < h[j].id
}
func (h workerHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].heapIdx, h[j].heapIdx = i, j
}
func (h *workerHeap) Push(x any) {
	w := x.(*worker)
	w.heapIdx = len(*h)
	*h = append(*h, w)
}
func (h *workerHeap) Pop() any {
	old := *h
	w := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	w.heapIdx = -1
	return w
}
func (h *workerHeap) add(w *worker) { heap.Push(h, w) }
func (h *workerHeap) fix(w *worker) {
	if w.heapIdx >= 0 {
		heap.Fix(h, w.heapIdx)
	}
}
func (h *workerHeap) remove(w *worker) {
	if w.heapIdx >= 0 {
		heap.Remove(h, w.heapIdx)
	}
}

func (h workerHeap) upTo(v int64, fn func(*worker)) {
	var walk func(i int)
	walk = func(i int) {
		if i >= len(h) || h[i].seenV > v {
			return
		}
		fn(h[i])
		walk(2*i + 1)
		walk(2*i + 2)
	}
	walk(0)
}
