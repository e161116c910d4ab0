package eventlog

import (
	"sync"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/rs/zerolog"

	"github.com/leaselog/leaselog/event"
)

// background counts what Options.Background is told.
type background struct {
	mu           sync.Mutex
	enter, leave int
	unbalanced   bool // a Leave before its Enter
}

func (b *background) Enter() { b.mu.Lock(); b.enter++; b.mu.Unlock() }
func (b *background) Leave() {
	b.mu.Lock()
	b.leave++
	b.unbalanced = b.unbalanced || b.leave > b.enter
	b.mu.Unlock()
}

// TestBackgroundIsToldOfFlushes: the memtable's flushes (and the
// compactions they bring) are counted in and out, and none is left counted
// once the store is closed.
func TestBackgroundIsToldOfFlushes(t *testing.T) {
	bg := &background{}
	l, err := Open("store", Options{FS: vfs.NewMem(), Logger: zerolog.Nop(), Background: bg, memTableSize: 256 << 10})
	if err != nil {
		t.Fatal(err)
	}
	for seq := uint64(1); seq <= 2000; seq++ { // about 2 MiB: several memtables
		if err := l.Append([]event.Event{walSizeEvent(seq)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	bg.mu.Lock()
	defer bg.mu.Unlock()
	if bg.enter == 0 || bg.enter != bg.leave || bg.unbalanced {
		t.Fatalf("told of %d beginnings and %d ends (a Leave first: %v), want as many of each, at least one", bg.enter, bg.leave, bg.unbalanced)
	}
}
