package sim

import (
	"bufio"
	"os"
	"strconv"
	"strings"
	"testing"
)

// TestBreaksAreCaught: the checks can fail. With the simulated system
// broken on purpose (breaks.go), the seeds listed in testdata/breaks — found
// by running the default seeds with -sim.break — must fail, with the
// violation named there.
func TestBreaksAreCaught(t *testing.T) {
	f, err := os.Open("testdata/breaks")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	n := 0
	for sc.Scan() {
		line, _, _ := strings.Cut(sc.Text(), "#")
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		if len(fields) < 3 {
			t.Fatalf("testdata/breaks: %q: want: break violation seed...", line)
		}
		brk, want := fields[0], strings.ReplaceAll(fields[1], "_", " ")
		for _, f := range fields[2:] {
			seed, err := strconv.ParseUint(f, 10, 64)
			if err != nil {
				t.Fatalf("testdata/breaks: %q: %v", line, err)
			}
			n++
			t.Run(brk+"/"+f, func(t *testing.T) {
				t.Parallel()
				res := Run(Options{Seed: seed, Break: brk})
				if res.Err == nil || !strings.Contains(res.Err.Error(), want) {
					t.Fatalf("with %s (%s), seed %d ended with %v; want a violation naming %q (if the simulator changed, list the seeds again: see testdata/breaks)", brk, breaks[brk], seed, res.Err, want)
				}
			})
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if n == 0 {
		t.Fatal("testdata/breaks lists no seed")
	}
}
