package eventlog_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/rs/zerolog"

	"github.com/leaselog/leaselog/event"
	"github.com/leaselog/leaselog/eventlog"
)

// TestStageWritesArchiveWithItsEvents: the records derive returns are in the
// events' batch (readable once staged, durable with them); a derive that
// fails writes nothing, events included, and uses up no sequence number.
func TestStageWritesArchiveWithItsEvents(t *testing.T) {
	fs := vfs.NewMem()
	log, err := eventlog.Open("data", eventlog.Options{FS: fs, Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	if log.Format() != eventlog.CurrentFormat {
		t.Fatalf("new store of format %d, want %d", log.Format(), eventlog.CurrentFormat)
	}
	derive := func(evs []event.Event) ([]eventlog.Record, error) {
		var recs []eventlog.Record
		for _, e := range evs {
			recs = append(recs, eventlog.Record{Key: []byte(fmt.Sprint("k", e.Seq)), Value: []byte(e.Job)})
		}
		return recs, nil
	}
	c, err := log.Stage([]event.Event{{Type: event.TypeQueued, Job: "j1", Kind: event.KindRun}, {Type: event.TypeCancelled, Job: "j1"}}, derive)
	if err != nil {
		t.Fatal(err)
	}
	if v, err := log.Archived([]byte("k2")); err != nil || string(v) != "j1" {
		t.Fatalf("record of seq 2 once staged: %q, %v", v, err)
	}
	if err := c.Wait(); err != nil {
		t.Fatal(err)
	}

	boom := errors.New("fold refused")
	_, err = log.Stage([]event.Event{{Type: event.TypeQueued, Job: "j2", Kind: event.KindRun}}, func([]event.Event) ([]eventlog.Record, error) {
		return []eventlog.Record{{Key: []byte("k3"), Value: []byte("j2")}}, boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("stage with a failing derive: %v", err)
	}
	if _, err := log.Archived([]byte("k3")); !errors.Is(err, eventlog.ErrNotFound) {
		t.Fatalf("record of a refused stage: %v", err)
	}
	if err := log.Append([]event.Event{{Type: event.TypeDaemonStopping}}); err != nil || log.LastSeq() != 3 {
		t.Fatalf("the refused stage used up a seq: last %d, %v", log.LastSeq(), err)
	}
	if _, err := log.Stage([]event.Event{{Type: event.TypeDaemonStopping}}, func([]event.Event) ([]eventlog.Record, error) {
		return []eventlog.Record{{Key: nil}}, nil
	}); err == nil {
		t.Fatal("an empty archive key was accepted")
	}

	if err := log.PutArchive([]eventlog.Record{{Key: []byte("x"), Value: []byte("1")}}, true); err != nil {
		t.Fatal(err)
	}
	var keys []string
	if err := log.ScanArchive([]byte("k"), func(k, v []byte) error { keys = append(keys, string(k)+"="+string(v)); return nil }); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(keys) != "[k1=j1 k2=j1]" {
		t.Fatalf("scan of prefix k: %v", keys)
	}
	if err := log.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := log.Archived([]byte("k1")); !errors.Is(err, eventlog.ErrClosed) {
		t.Fatalf("read of a closed log: %v", err)
	}
	if err := log.ScanArchive(nil, func(k, v []byte) error { return nil }); !errors.Is(err, eventlog.ErrClosed) {
		t.Fatalf("scan of a closed log: %v", err)
	}

	// What was acknowledged is there after a reopen.
	log, err = eventlog.Open("data", eventlog.Options{FS: fs, Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	for k, want := range map[string]string{"k1": "j1", "k2": "j1", "x": "1"} {
		if v, err := log.Archived([]byte(k)); err != nil || string(v) != want {
			t.Fatalf("after reopen, %s = %q, %v", k, v, err)
		}
	}
}
