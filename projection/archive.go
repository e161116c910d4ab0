package projection

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/leaselog/leaselog/event"
	"github.com/leaselog/leaselog/fsm"
	"github.com/leaselog/leaselog/timing"
)

// Archive records: what a RetireRecord table hands over for the event log's
// archive, one record per retired job, lease and stale report. Keys (inside
// the log's archive prefix):
//
//	'j' job id         -> version job record
//	'l' token(8)       -> version lease record
//	's' stale key(16)  -> version uvarint seq of the lease.stale_report
//
// Records are encoded like snapshots (uvarints, length-prefixed strings) and
// carry their own version, so a future build can read them beside new ones.
// A job with a cap on its requeues (max_requeues) is written as version 2,
// the cap after the fields of version 1; every other record stays version 1,
// byte for byte what a build before caps wrote, so that Verify of a store it
// wrote still finds the archive its own fold makes. A job with scheduling
// (labels, a priority, a not_before) or a timing of its own is written as
// version 3: the cap (0: none), then the labels, the priority and the
// not_before, then its timing if it has one (none: the record ends there).
// A lease with a timing of its own is written as version 2: the timing after
// the fields of version 1.

// Record is an archive record: a key and its value. It is the very type of
// eventlog.Record (both name the same plain struct), so the table's records
// go to the log as they are, and the projection links no storage engine.
type Record = struct{ Key, Value []byte }

const archiveVersion = 1

// archiveVersionCap is the version of a job record that carries a cap.
const archiveVersionCap = 2

// archiveVersionJob3 is the version of a job record that carries
// scheduling or a timing of its own, archiveVersionLeaseTiming that of a
// lease record that carries a timing of its own.
const (
	archiveVersionJob3        = 3
	archiveVersionLeaseTiming = 2
)

// Prefixes of archive keys, for scans.
var (
	ArchiveJobs   = []byte{'j'}
	ArchiveLeases = []byte{'l'}
)

// ErrArchive is wrapped by the errors of archive records that do not decode.
var ErrArchive = errors.New("projection: bad archive record")

// ArchiveJobKey is the archive key of job id.
func ArchiveJobKey(id string) []byte { return append([]byte{'j'}, id...) }

// ArchiveLeaseKey is the archive key of lease id.
func ArchiveLeaseKey(id uint64) []byte { return binary.BigEndian.AppendUint64([]byte{'l'}, id) }

// ArchiveStaleKey is the archive key of the stale report fingerprinted k.
func ArchiveStaleKey(k StaleKey) []byte { return append([]byte{'s'}, k[:]...) }

// outbox collects the records a RetireRecord table retires, in one buffer
// reused from one TakeRetired to the next, so that retiring allocates nothing
// once the buffers have grown.
type outbox struct {
	buf  []byte
	recs []Record
}

// reset empties o for reuse; records handed out before stay readable until
// the next one is added.
func (o *outbox) reset() { o.recs, o.buf = o.recs[:0], o.buf[:0] }

// add appends a record whose key and value the caller appended to o.buf
// from offset start, the value from offset mid.
func (o *outbox) add(start, mid int) {
	o.recs = append(o.recs, Record{Key: o.buf[start:mid:mid], Value: o.buf[mid:len(o.buf):len(o.buf)]})
}

func (o *outbox) job(j Job) {
	start := len(o.buf)
	o.buf = append(o.buf, 'j')
	o.buf = append(o.buf, j.ID...)
	mid := len(o.buf)
	o.buf = appendJob(o.buf, j)
	o.add(start, mid)
}

func (o *outbox) lease(l Lease) {
	start := len(o.buf)
	o.buf = binary.BigEndian.AppendUint64(append(o.buf, 'l'), l.ID)
	mid := len(o.buf)
	o.buf = appendLease(o.buf, l)
	o.add(start, mid)
}

func (o *outbox) stale(k StaleKey, seq uint64) {
	start := len(o.buf)
	o.buf = append(append(o.buf, 's'), k[:]...)
	mid := len(o.buf)
	o.buf = binary.AppendUvarint(append(o.buf, archiveVersion), seq)
	o.add(start, mid)
}

func appendJob(b []byte, j Job) []byte {
	version := byte(archiveVersion)
	if j.MaxRequeues != 0 {
		version = archiveVersionCap
	}
	if j.Labels != "" || j.Priority != 0 || j.NotBefore != 0 || j.Timing != (timing.Config{}) {
		version = archiveVersionJob3
	}
	w := enc{b: append(b, version)}
	w.uvarint(uint64(j.Kind))
	w.uvarint(uint64(j.State))
	w.bytes(j.Spec)
	w.bytes(j.Result)
	w.uvarint(uint64(j.Attempts))
	w.uvarint(uint64(j.Leases))
	w.uvarint(uint64(j.Outcome))
	w.str(j.Reason)
	w.str(j.Ref)
	w.uvarint(j.LastLease)
	w.varint(j.Submitted)
	w.varint(j.Updated)
	if version >= archiveVersionCap {
		w.uvarint(uint64(j.MaxRequeues))
	}
	if version == archiveVersionJob3 {
		w.str(string(j.Labels))
		w.varint(int64(j.Priority))
		w.varint(j.NotBefore)
		if j.Timing != (timing.Config{}) {
			w.timing(j.Timing)
		}
	}
	return w.b
}

func (w *enc) timing(c timing.Config) {
	w.uvarint(uint64(c.Renew))
	w.uvarint(uint64(c.Grace))
	w.uvarint(uint64(c.Toleration))
}

// timing reads a timing of its own, which holds together.
func (d *dec) timing() timing.Config {
	c := timing.Config{Renew: time.Duration(d.uvarint()), Grace: time.Duration(d.uvarint()), Toleration: time.Duration(d.uvarint())}
	if err := c.Validate(); err != nil && d.err == nil {
		d.fail("timing %s: %v", event.TimingString(c), err)
	}
	return c
}

func appendLease(b []byte, l Lease) []byte {
	version := byte(archiveVersion)
	if l.Timing != (timing.Config{}) {
		version = archiveVersionLeaseTiming
	}
	w := enc{b: append(b, version)}
	w.str(l.Job)
	w.uvarint(uint64(l.Kind))
	w.str(l.Worker)
	w.uvarint(uint64(l.State))
	w.uvarint(uint64(l.Mode))
	w.varint(l.Acquired)
	w.varint(l.Heard)
	w.uvarint(l.ReportSeq)
	if version == archiveVersionLeaseTiming {
		w.timing(l.Timing)
	}
	return w.b
}

// DecodeJob decodes the archive record of job id. The job owns its memory.
func DecodeJob(id string, b []byte) (Job, error) {
	r := dec{b: b}
	version := byte(archiveVersion)
	if v := r.take(1); len(v) == 1 {
		if version = v[0]; version < archiveVersion || version > archiveVersionJob3 {
			return Job{}, fmt.Errorf("%w: job %q: version %d, this build reads %d to %d", ErrArchive, id, version, archiveVersion, archiveVersionJob3)
		}
	}
	j := Job{ID: id}
	j.Kind = event.Kind(r.uvarint())
	j.State = fsm.State(r.uvarint())
	j.Spec = clone(r.bytes())
	j.Result = clone(r.bytes())
	j.Attempts = int(r.uvarint())
	j.Leases = int(r.uvarint())
	j.Outcome = event.Outcome(r.uvarint())
	j.Reason = string(r.bytes())
	j.Ref = string(r.bytes())
	j.LastLease = r.uvarint()
	j.Submitted = r.varint()
	j.Updated = r.varint()
	switch c := uint64(0); version {
	case archiveVersionCap:
		if c = r.uvarint(); c == 0 || c > math.MaxUint32 {
			r.fail("max_requeues %d out of range", c)
		}
		j.MaxRequeues = int(c)
	case archiveVersionJob3:
		if c = r.uvarint(); c > math.MaxUint32 {
			r.fail("max_requeues %d out of range", c)
		}
		j.MaxRequeues = int(c)
		j.Labels = event.Labels(string(r.bytes())) // a copy: the job owns its memory
		if err := j.Labels.Check(); err != nil {
			r.fail("%v", err)
		}
		if p := r.varint(); p < math.MinInt32 || p > math.MaxInt32 {
			r.fail("priority %d out of range", p)
		} else {
			j.Priority = int(p)
		}
		j.NotBefore = r.varint()
		if len(r.b) != 0 {
			j.Timing = r.timing()
		}
	}
	if err := r.done(); err != nil {
		return Job{}, fmt.Errorf("%w: job %q: %v", ErrArchive, id, err)
	}
	if !j.State.Terminal() {
		return Job{}, fmt.Errorf("%w: job %q: archived as %s, which is not an end", ErrArchive, id, j.State)
	}
	return j, nil
}

// DecodeLease decodes the archive record of lease id.
func DecodeLease(id uint64, b []byte) (Lease, error) {
	r := dec{b: b}
	version := byte(archiveVersion)
	if v := r.take(1); len(v) == 1 {
		if version = v[0]; version != archiveVersion && version != archiveVersionLeaseTiming {
			return Lease{}, fmt.Errorf("%w: lease %d: version %d, this build reads %d and %d", ErrArchive, id, version, archiveVersion, archiveVersionLeaseTiming)
		}
	}
	l := Lease{ID: id}
	l.Job = string(r.bytes())
	l.Kind = event.Kind(r.uvarint())
	l.Worker = string(r.bytes())
	l.State = fsm.State(r.uvarint())
	l.Mode = event.RevokeMode(r.uvarint())
	l.Acquired = r.varint()
	l.Heard = r.varint()
	l.ReportSeq = r.uvarint()
	if version == archiveVersionLeaseTiming {
		l.Timing = r.timing()
	}
	if err := r.done(); err != nil {
		return Lease{}, fmt.Errorf("%w: lease %d: %v", ErrArchive, id, err)
	}
	if l.State != fsm.Reported && l.State != fsm.Expired {
		return Lease{}, fmt.Errorf("%w: lease %d: archived as %s, which is not an end", ErrArchive, id, l.State)
	}
	return l, nil
}

// DecodeStale decodes the archive record of a stale report: its seq.
func DecodeStale(b []byte) (uint64, error) {
	r := dec{b: b}
	if v := r.take(1); len(v) == 1 && v[0] != archiveVersion {
		return 0, fmt.Errorf("%w: stale report: version %d, this build reads %d", ErrArchive, v[0], archiveVersion)
	}
	seq := r.uvarint()
	if err := r.done(); err != nil {
		return 0, fmt.Errorf("%w: stale report: %v", ErrArchive, err)
	}
	return seq, nil
}

// ParseArchiveKey says what an archive key names: a job id, a lease token, or
// neither (ok false), for scans.
func ParseArchiveKey(key []byte) (job string, lease uint64, ok bool) {
	switch {
	case len(key) > 1 && key[0] == 'j':
		return string(key[1:]), 0, true
	case len(key) == 9 && key[0] == 'l':
		return "", binary.BigEndian.Uint64(key[1:]), true
	}
	return "", 0, false
}

func clone(b []byte) []byte {
	if len(b) == 0 {
		return nil
	}
	return append([]byte(nil), b...)
}

// done is the error of a decode that should have read everything.
func (d *dec) done() error {
	if d.err != nil {
		return d.err
	}
	if len(d.b) != 0 {
		return fmt.Errorf("%d trailing bytes", len(d.b))
	}
	return nil
}
