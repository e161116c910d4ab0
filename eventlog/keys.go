package eventlog

import (
	"encoding/binary"
	"fmt"
	"github.com/leaselog/leaselog/event"
)

// Key prefixes. One byte each, so that every family is one contiguous span
// and a scan of one never reads another.
const (
	prefixMeta     = 'm'
	prefixEvent    = 'e'
	prefixType     = 't'
	prefixJob      = 'j'
	prefixWorker   = 'w'
	prefixSnapshot = 's'
	prefixArchive  = 'a'
	prefixClock    = 'c' // time index: runs by second
	prefixRun      = 'r' // time index: runs by seq
	prefixGap      = 'g' // compacted seqs: runs of seqs a compaction removed, by first seq
	prefixGapEnd   = 'G' // the same runs, by last seq
)

// sep ends the variable-length part of a job or worker index key. IDs are
// validated to hold no NUL, so "j" + "a" + sep sorts apart from "j" + "ab" + sep.
const sep = 0

var metaFormatKey = []byte{prefixMeta, 'f', 'o', 'r', 'm', 'a', 't'}

// metaTimeIndexKey marks a store whose time index is whole: created with
// one, or backfilled (see timeindex.go). A store written by an older build
// has no such key.
var metaTimeIndexKey = []byte{prefixMeta, 't', 'i', 'm', 'e', 'i', 'n', 'd', 'e', 'x'}

// metaCompactedKey holds the compaction's cursor (Log.SetCompacted): a seq
// its driver has compacted the log up to, by its own measure.
var metaCompactedKey = []byte{prefixMeta, 'c', 'o', 'm', 'p', 'a', 'c', 't', 'e', 'd'}

// The layout versions of the keyspace, kept under metaFormatKey.
//
// Format 2 added the archive: a store of format 1 has events whose archive
// records were never written, and is upgraded by the first rebuild that
// writes them (Log.PutArchive).
//
// Format 3 is what this build writes beyond format 2, which the build
// before cannot read: lease.failed and an evaluation's cap on requeues
// (event tag 12, archive record version 2, snapshot version 4), and the
// compaction of heartbeats (compact.go) — gaps in the log that the runs
// under prefixGap account for, and lease.heartbeats summaries. A store is
// raised to it when this build opens it for writing, in its own synced
// batch before anything else is written, so that the build before refuses
// it (checkReadable) rather than misread it. A store of format 1 is raised
// when its archive is written.
//
// A build that stores anything an older build cannot read raises it again,
// so that the older build refuses the store before writing to it, and
// commits a store of the new format under replay/testdata for every later
// build to open (replay's TestWriteStoreFixture).
const (
	archiveFormat   = 2
	compactedFormat = 3
	storeFormat     = compactedFormat // the newest this build reads, and what it writes
)

func eventKey(dst []byte, seq uint64) []byte {
	dst = append(dst, prefixEvent)
	return binary.BigEndian.AppendUint64(dst, seq)
}

func gapKey(dst []byte, first uint64) []byte {
	dst = append(dst, prefixGap)
	return binary.BigEndian.AppendUint64(dst, first)
}

func gapEndKey(dst []byte, last uint64) []byte {
	dst = append(dst, prefixGapEnd)
	return binary.BigEndian.AppendUint64(dst, last)
}

func snapshotKey(dst []byte, seq uint64) []byte {
	dst = append(dst, prefixSnapshot)
	return binary.BigEndian.AppendUint64(dst, seq)
}

func typeIndexPrefix(dst []byte, t event.Type) []byte { return append(dst, prefixType, byte(t)) }

func typeIndexKey(dst []byte, t event.Type, seq uint64) []byte {
	return binary.BigEndian.AppendUint64(typeIndexPrefix(dst, t), seq)
}

func stringIndexPrefix(dst []byte, prefix byte, id string) []byte {
	dst = append(dst, prefix)
	dst = append(dst, id...)
	return append(dst, sep)
}

func stringIndexKey(dst []byte, prefix byte, id string, seq uint64) []byte {
	return binary.BigEndian.AppendUint64(stringIndexPrefix(dst, prefix, id), seq)
}

// seqSuffix reads the sequence number that ends every event, snapshot and
// index key.
func seqSuffix(key []byte) (uint64, error) {
	if len(key) < 9 {
		return 0, fmt.Errorf("%w: key %q is too short to end in a sequence number", ErrCorrupt, key)
	}
	return binary.BigEndian.Uint64(key[len(key)-8:]), nil
}

// prefixEnd returns the smallest key greater than every key with the prefix p.
func prefixEnd(p []byte) []byte {
	end := append([]byte(nil), p...)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] != 0xff {
			end[i]++
			return end[:i+1]
		}
	}
	return nil // p is all 0xff: no upper bound
}
