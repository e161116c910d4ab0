// Package storetest edits a store as a newer leaselog would have written it,
// for the tests that an older build refuses such a store and leaves it as it
// is. It writes Pebble's keys directly, as no build of leaselog would: the
// keys are eventlog's (keys.go) and the record's header is event's
// (codec.go), restated here because a test must be able to write what this
// build cannot.
package storetest

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"

	"github.com/cockroachdb/pebble/v2"
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// formatFile is eventlog's format file (formatfile.go): a build keeps it in
// step with the format key, or removes it.
const formatFile = "FORMAT"

// SetFormat sets the store format of the store in dir (eventlog's 'm'
// "format" key) to format, and its format file with it, as a build of that
// format does.
func SetFormat(dir string, format byte) error {
	err := edit(dir, func(db *pebble.DB) error {
		return db.Set([]byte("mformat"), []byte{format}, pebble.Sync)
	})
	if err != nil {
		return err
	}
	return writeSynced(filepath.Join(dir, formatFile), []byte{format})
}

// NewerLastRecord rewrites the last event of the store in dir as a record of
// the next record version, its checksum made right, and returns its seq and
// the version it now has. It removes the store's format file: a build that
// writes a record an older one cannot read raises the format, and one that
// did not (the case this edit stands for) is refused before the open writes
// only if no format file vouches for the store (eventlog/formatfile.go).
func NewerLastRecord(dir string) (seq uint64, version byte, err error) {
	if err := os.Remove(filepath.Join(dir, formatFile)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return 0, 0, err
	}
	err = edit(dir, func(db *pebble.DB) error {
		it, err := db.NewIter(&pebble.IterOptions{LowerBound: []byte{'e'}, UpperBound: []byte{'e' + 1}})
		if err != nil {
			return err
		}
		if !it.Last() {
			return errors.Join(errors.New("storetest: the store holds no event"), it.Close())
		}
		key := append([]byte(nil), it.Key()...)
		rec := append([]byte(nil), it.Value()...)
		if err := it.Close(); err != nil {
			return err
		}
		if len(key) != 9 || len(rec) < 6 {
			return fmt.Errorf("storetest: key %q holds %d bytes: not an event", key, len(rec))
		}
		seq = binary.BigEndian.Uint64(key[1:])
		// crc32c(4) ‖ version(1) ‖ …: the checksum is crc32c of the rest,
		// xor a hash of the seq, which the xor of the two crcs carries over.
		old := crc32.Checksum(rec[4:], castagnoli)
		rec[4]++
		version = rec[4]
		sum := binary.LittleEndian.Uint32(rec) ^ old ^ crc32.Checksum(rec[4:], castagnoli)
		binary.LittleEndian.PutUint32(rec, sum)
		return db.Set(key, rec, pebble.Sync)
	})
	return seq, version, err
}

func writeSynced(path string, b []byte) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	return errors.Join(err, f.Sync(), f.Close())
}

func edit(dir string, f func(db *pebble.DB) error) error {
	db, err := pebble.Open(dir, &pebble.Options{FormatMajorVersion: pebble.FormatNewest, Logger: quiet{}})
	if err != nil {
		return err
	}
	return errors.Join(f(db), db.Close())
}

// quiet drops Pebble's messages; a fatal one panics, as the test should fail.
type quiet struct{}

func (quiet) Infof(string, ...any)           {}
func (quiet) Errorf(string, ...any)          {}
func (quiet) Fatalf(format string, a ...any) { panic(fmt.Sprintf(format, a...)) }
