package event

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"time"
	"unsafe"
)

// ErrCorrupt is returned, wrapped with the key or sequence number at fault,
// when stored bytes cannot be what this package wrote.
var ErrCorrupt = errors.New("event: corrupt record")

// ErrNewerFormat is returned when a record or the store was written by a newer
// format than this build reads.
var ErrNewerFormat = errors.New("event: written by a newer format")

// recordVersion is the version byte of the record format written by this build.
// A reader accepts every version up to its own. Within a version, fields are
// tagged, so a reader skips the fields it does not know: adding a field needs no
// new version; changing the meaning of one does.
const recordVersion = 1

// Field tags of the record format. Numbers are forever.
const (
	tagJob     = 1
	tagLease   = 2
	tagWorker  = 3
	tagKind    = 4
	tagOutcome = 5
	tagMode    = 6
	tagRef     = 7
	tagReason  = 8
	tagGap     = 9
	tagSpec    = 10
	tagResult  = 11
	// tagMaxRequeues came with lease.failed: a reader before it skips the
	// field, and so reads every job as uncapped.
	tagMaxRequeues = 12
	// lease.heartbeats (Beats)
	tagBeatCount     = 13
	tagBeatFirstSeq  = 14
	tagBeatFirstTime = 15
	tagBeatClaim     = 16
	// A submission's scheduling (lease.queued): a reader before them skips
	// the fields, and so reads every job as unlabelled, of priority 0 and
	// due at once.
	tagLabels    = 17
	tagPriority  = 18
	tagNotBefore = 19
	// A job's own timing (lease.queued, lease.acquired), in nanoseconds,
	// and a heartbeat's details: a reader before them skips them, and so
	// reads every lease as of the daemon's timing, with no details.
	tagRenew      = 20
	tagGrace      = 21
	tagToleration = 22
	tagDetails    = 23
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// The record format (all integers varint unless a width is given):
//
//	+--------+-----+------+------------+----------+----------------------------+
//	| crc32c | ver | type | time       | id       | field*                     |
//	| 4 B LE | 1 B | 1 B  | zigzag var | 16 B     | tag(1 B) len(uvarint) data |
//	+--------+-----+------+------------+----------+----------------------------+
//
// The checksum is crc32c of everything after it, xor a hash of the sequence
// number, so a record copied under the wrong key fails its check. A field whose value is the zero value is not written.
// Integer fields hold one uvarint (zigzag for signed) as their data.
const headerLen = 4 + 1 + 1

// AppendRecord appends the encoding of e (with sequence number e.Seq) to dst.
func AppendRecord(dst []byte, e *Event) []byte {
	start := len(dst)
	dst = append(dst, 0, 0, 0, 0, recordVersion, byte(e.Type))
	dst = binary.AppendVarint(dst, e.Time)
	dst = append(dst, e.ID[:]...)
	dst = appendString(dst, tagJob, e.Job)
	if e.Type != TypeAcquired { // an acquired event's lease is its own sequence number
		dst = appendUvarintField(dst, tagLease, e.Lease)
	}
	dst = appendString(dst, tagWorker, e.Worker)
	dst = appendUvarintField(dst, tagKind, uint64(e.Kind))
	dst = appendUvarintField(dst, tagOutcome, uint64(e.Outcome))
	dst = appendUvarintField(dst, tagMode, uint64(e.Mode))
	dst = appendString(dst, tagRef, e.Ref)
	dst = appendString(dst, tagReason, e.Reason)
	if e.Gap != 0 {
		dst = appendUvarintField(dst, tagGap, zigzag(e.Gap))
	}
	dst = appendBytes(dst, tagSpec, e.Spec)
	dst = appendBytes(dst, tagResult, e.Result)
	dst = appendUvarintField(dst, tagMaxRequeues, uint64(e.MaxRequeues))
	if e.Beats != (Beats{}) {
		dst = appendUvarintField(dst, tagBeatCount, e.Beats.Count)
		dst = appendUvarintField(dst, tagBeatFirstSeq, e.Beats.FirstSeq)
		dst = appendUvarintField(dst, tagBeatFirstTime, zigzag(e.Beats.FirstTime))
		dst = appendUvarintField(dst, tagBeatClaim, e.Beats.Claim)
	}
	dst = appendString(dst, tagLabels, string(e.Labels))
	if e.Priority != 0 {
		dst = appendUvarintField(dst, tagPriority, zigzag(int64(e.Priority)))
	}
	if e.NotBefore != 0 {
		dst = appendUvarintField(dst, tagNotBefore, zigzag(e.NotBefore))
	}
	dst = appendUvarintField(dst, tagRenew, uint64(max(0, e.Timing.Renew)))
	dst = appendUvarintField(dst, tagGrace, uint64(max(0, e.Timing.Grace)))
	dst = appendUvarintField(dst, tagToleration, uint64(max(0, e.Timing.Toleration)))
	dst = appendBytes(dst, tagDetails, e.Details)
	binary.LittleEndian.PutUint32(dst[start:], recordChecksum(e.Seq, dst[start+4:]))
	return dst
}

// recordChecksum is crc32c(body) bound to the record's sequence number by
// xor with a multiplicative hash of it, so that a record stored under the
// wrong key fails its check. (Feeding the sequence bytes to the CRC would cost
// a heap allocation per record read: the slice escapes through crc32's
// dispatch.)
func recordChecksum(seq uint64, body []byte) uint32 {
	return crc32.Checksum(body, castagnoli) ^ uint32((seq*0x9e3779b97f4a7c15)>>32)
}

func appendString(dst []byte, tag byte, s string) []byte {
	if s == "" {
		return dst
	}
	dst = append(dst, tag)
	dst = binary.AppendUvarint(dst, uint64(len(s)))
	return append(dst, s...)
}

func appendBytes(dst []byte, tag byte, b []byte) []byte {
	if len(b) == 0 {
		return dst
	}
	dst = append(dst, tag)
	dst = binary.AppendUvarint(dst, uint64(len(b)))
	return append(dst, b...)
}

func appendUvarintField(dst []byte, tag byte, v uint64) []byte {
	if v == 0 {
		return dst
	}
	var tmp [binary.MaxVarintLen64]byte
	n := binary.PutUvarint(tmp[:], v)
	dst = append(dst, tag, byte(n))
	return append(dst, tmp[:n]...)
}

func zigzag(v int64) uint64   { return uint64(v<<1) ^ uint64(v>>63) }
func unzigzag(u uint64) int64 { return int64(u>>1) ^ -int64(u&1) }

// Decode decodes the record stored under sequence number seq into a fresh
// Event that shares no memory with b.
func Decode(seq uint64, b []byte) (Event, error) {
	var e Event
	if err := DecodeAliased(seq, b, &e); err != nil {
		return Event{}, err
	}
	return e.Clone(), nil
}

// DecodeAliased decodes b into e without copying: e's strings and slices point
// into b and live as long as b does. It never panics, whatever b holds.
func DecodeAliased(seq uint64, b []byte, e *Event) error {
	*e = Event{Seq: seq}
	if len(b) < headerLen+16+1 {
		return corruptf(seq, "record of %d bytes is shorter than its header", len(b))
	}
	if got, want := recordChecksum(seq, b[4:]), binary.LittleEndian.Uint32(b); got != want {
		return corruptf(seq, "checksum mismatch (stored %08x, computed %08x)", want, got)
	}
	if v := b[4]; v > recordVersion {
		return fmt.Errorf("event: seq %d: record version %d (this build reads up to %d): %w", seq, v, recordVersion, ErrNewerFormat)
	} else if v == 0 {
		return corruptf(seq, "record version 0")
	}
	e.Type = Type(b[5])
	p := b[headerLen:]
	t, n := binary.Varint(p)
	if n <= 0 {
		return corruptf(seq, "bad time varint")
	}
	e.Time, p = t, p[n:]
	if len(p) < len(e.ID) {
		return corruptf(seq, "truncated id")
	}
	copy(e.ID[:], p)
	p = p[len(e.ID):]
	for len(p) > 0 {
		tag := p[0]
		l, n := binary.Uvarint(p[1:])
		if n <= 0 || l > uint64(len(p)-1-n) {
			return corruptf(seq, "field tag %d at offset %d: bad length", tag, len(b)-len(p))
		}
		data := p[1+n : 1+n+int(l)]
		p = p[1+n+int(l):]
		var err error
		switch tag {
		case tagJob:
			e.Job = aliasString(data)
		case tagLease:
			e.Lease, err = uvarintField(data)
		case tagWorker:
			e.Worker = aliasString(data)
		case tagKind:
			var v uint64
			v, err = smallField(data)
			e.Kind = Kind(v)
		case tagOutcome:
			var v uint64
			v, err = smallField(data)
			e.Outcome = Outcome(v)
		case tagMode:
			var v uint64
			v, err = smallField(data)
			e.Mode = RevokeMode(v)
		case tagRef:
			e.Ref = aliasString(data)
		case tagReason:
			e.Reason = aliasString(data)
		case tagGap:
			e.Gap, err = intField(data)
		case tagSpec:
			e.Spec = nonEmpty(data)
		case tagResult:
			e.Result = nonEmpty(data)
		case tagMaxRequeues:
			var v uint64
			v, err = uvarintField(data)
			if err == nil && v > math.MaxUint32 {
				err = fmt.Errorf("value %d out of range", v)
			}
			e.MaxRequeues = uint32(v)
		case tagBeatCount:
			e.Beats.Count, err = uvarintField(data)
		case tagBeatFirstSeq:
			e.Beats.FirstSeq, err = uvarintField(data)
		case tagBeatFirstTime:
			e.Beats.FirstTime, err = intField(data)
		case tagBeatClaim:
			e.Beats.Claim, err = uvarintField(data)
		case tagLabels:
			if err = checkCanonical(data); err == nil {
				e.Labels = Labels(aliasString(data))
			}
		case tagPriority:
			var p int64
			p, err = intField(data)
			if err == nil && (p < math.MinInt32 || p > math.MaxInt32) {
				err = fmt.Errorf("priority %d out of range", p)
			}
			e.Priority = int32(p)
		case tagNotBefore:
			e.NotBefore, err = intField(data)
		case tagRenew:
			e.Timing.Renew, err = durationField(data)
		case tagGrace:
			e.Timing.Grace, err = durationField(data)
		case tagToleration:
			e.Timing.Toleration, err = durationField(data)
		case tagDetails:
			e.Details = nonEmpty(data)
		default:
			// A field from a newer writer: skipping it is what keeps old readers working.
		}
		if err != nil {
			return corruptf(seq, "field tag %d: %v", tag, err)
		}
	}
	if e.Type == TypeAcquired {
		e.Lease = seq
	}
	return nil
}

// nonEmpty keeps "absent" one value: an empty field decodes as nil, as it
// would have been had the writer left it out.
func nonEmpty(b []byte) []byte {
	if len(b) == 0 {
		return nil
	}
	return b
}

func uvarintField(data []byte) (uint64, error) {
	v, n := binary.Uvarint(data)
	if n <= 0 || n != len(data) {
		return 0, errors.New("bad uvarint")
	}
	return v, nil
}

// intField reads a signed integer, zigzag-encoded as a uvarint.
func intField(data []byte) (int64, error) {
	v, err := uvarintField(data)
	return unzigzag(v), err
}

func durationField(data []byte) (time.Duration, error) {
	v, err := uvarintField(data)
	if err == nil && v > math.MaxInt64 {
		err = fmt.Errorf("duration %d out of range", v)
	}
	return time.Duration(v), err
}

func smallField(data []byte) (uint64, error) {
	v, err := uvarintField(data)
	if err == nil && v > 255 {
		err = fmt.Errorf("value %d out of range", v)
	}
	return v, err
}

// aliasString returns a string that shares b's memory; see Event's doc.
func aliasString(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	return unsafe.String(&b[0], len(b))
}

func corruptf(seq uint64, format string, args ...any) error {
	return fmt.Errorf("%w: seq %d: %s", ErrCorrupt, seq, fmt.Sprintf(format, args...))
}
