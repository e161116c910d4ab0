// Package testutil holds the few helpers several packages' tests and
// benchmarks share.
package testutil

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// SyncBuffer is a bytes.Buffer that goroutines (loggers, processes) may
// write to while a test reads it.
type SyncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *SyncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *SyncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Eventually polls cond until it holds, failing the test when it has not
// within the bound: a wait on a condition nothing signals (a process's
// output, a file, another daemon's log), never a sleep standing in for one.
func Eventually(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, within)
		}
		time.Sleep(5 * time.Millisecond) // the poll's interval, under the deadline
	}
}

// Parallel runs b.N calls of op spread over n goroutines, timed from its
// start to the last call's end, and returns each call's latency. op gets the
// goroutine's index g and the call's index i.
func Parallel(b *testing.B, n int, op func(g, i int) error) []time.Duration {
	var next atomic.Int64
	lat := make([]time.Duration, b.N)
	var wg sync.WaitGroup
	b.ResetTimer()
	for g := 0; g < n; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= b.N {
					return
				}
				start := time.Now()
				if err := op(g, i); err != nil {
					b.Error(err)
					return
				}
				lat[i] = time.Since(start)
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	return lat
}

// DirSums returns the SHA-256 of every file under dir, by its path relative
// to dir: equal sums before and after a call show that it wrote nothing
// there (no file changed, none came or went).
func DirSums(t testing.TB, dir string) map[string]string {
	t.Helper()
	sums := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		sum := sha256.Sum256(b)
		sums[rel] = hex.EncodeToString(sum[:])
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return sums
}
