package supervise

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/leaselog/leaselog/hostclock"
)

func TestFenceFile(t *testing.T) {
	dir := t.TempDir()
	if _, _, err := ReadFence(dir); !errors.Is(err, ErrNoFence) {
		t.Fatalf("no file: %v, want ErrNoFence", err)
	}
	at := time.Unix(12, 345)
	if err := WriteFence(dir, hostclock.Monotonic, at); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, FenceFile)); string(b) != "monotonic 12000000345\n" {
		t.Fatalf("fence file %q", b)
	}
	if c, got, err := ReadFence(dir); err != nil || c != hostclock.Monotonic || !got.Equal(at) {
		t.Fatalf("ReadFence: %v %v %v", c, got, err)
	}
	for _, bad := range []string{"", "boottime", "walltime 5", "boottime x", "boottime 5 6", string(make([]byte, 200))} {
		if err := os.WriteFile(filepath.Join(dir, FenceFile), []byte(bad), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, _, err := ReadFence(dir); err == nil || errors.Is(err, ErrNoFence) {
			t.Errorf("fence %q: %v, want an error", bad, err)
		}
	}
	// A job can put anything in its run directory: a pipe must not hang
	// the supervisor that reads it.
	if err := os.Remove(filepath.Join(dir, FenceFile)); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(dir, FenceFile), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := ReadFence(dir); err == nil || errors.Is(err, ErrNoFence) {
		t.Errorf("fence as a pipe: %v, want an error", err)
	}
}

// Without Init, a binary cannot supervise, and says so through Hooked.
// Init is for the process, so the test starts from its state unset (an
// earlier run under -count set it) and puts it back.
func TestHooked(t *testing.T) {
	was := hooked.Swap(false)
	t.Cleanup(func() { hooked.Store(was) })
	if Hooked() {
		t.Fatal("Hooked with the process's state unset")
	}
	Init()
	if !Hooked() {
		t.Fatal("not Hooked after Init")
	}
}

// The supervisor refuses a bad command line with a usage exit code.
func TestMainUsage(t *testing.T) {
	for _, args := range [][]string{nil, {"state", "grace"}, {"state", "soon", "true"},
		{"state", "1s", "true", "data/LOCK"}, {"state", "1s", "true", "/data/LOCK", "more"}} {
		if code := Main(args); code != exitUsage {
			t.Errorf("Main(%q) = %d, want %d", args, code, exitUsage)
		}
	}
}
