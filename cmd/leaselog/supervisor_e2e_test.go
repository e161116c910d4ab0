package main

// End-to-end tests of the jobs' supervisor (package supervise): the job of
// a `leaselog worker` killed with SIGKILL stops at its fence, before the
// daemon expires its lease; a run directory gone at a worker's restart is a
// lost run; a job's setsid'd descendants die with it.

import (
	"github.com/leaselog/leaselog/worker/local/supervise"
)

// This test binary starts local runs in-process too (Main.Run of serve):
// their supervisor is this binary run again, which must become one before
// the tests start. An init, not a line in TestMain, which harness_test.go
// keeps; it runs before TestMain all the same.
func init() { supervise.Init() }
