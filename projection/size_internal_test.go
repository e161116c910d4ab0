package projection

import (
	"testing"
	"unsafe"
)

// TestJobSize: a job's record, which the table holds for every job queued
// (a million in a busy daemon), stays as small as its layout makes it. A
// field added, or one that breaks the packing of the small ones, shows here.
func TestJobSize(t *testing.T) {
	if n := unsafe.Sizeof(job{}); n > 160 {
		t.Fatalf("a job's record is %d bytes, over 160", n)
	}
}
