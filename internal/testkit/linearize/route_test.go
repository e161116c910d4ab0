package linearize

import (
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/leaselog/leaselog/api"
)

// TestModelRoutes: the model grants a job only to a worker that takes its
// kind and offers its labels, and holds a miss against no worker that could
// not have taken it.
func TestModelRoutes(t *testing.T) {
	submit := Input{Op: OpSubmit, Job: "j", JobKind: "evaluation", Spec: "{}",
		Labels: LabelsOf(map[string]string{"gpu": "a100", "repo": "piloop"}), Priority: 3}
	a100 := RouteOf(api.Offer{Kinds: []string{"evaluation"}, Labels: map[string]string{"repo": "piloop", "gpu": "a100", "zone": "eu"}})
	for _, tc := range []struct {
		name  string
		then  Input
		out   Output
		valid bool
	}{
		{"granted to a worker that takes it", Input{Op: OpAcquire, Job: "j", Worker: "w", Offer: a100}, Output{Lease: 2}, true},
		{"granted to a worker offering nothing", Input{Op: OpAcquire, Job: "j", Worker: "w"}, Output{Lease: 2}, false},
		{"granted to a worker of another kind", Input{Op: OpAcquire, Job: "j", Worker: "w",
			Offer: RouteOf(api.Offer{Kinds: []string{"run"}, Labels: map[string]string{"repo": "piloop", "gpu": "a100"}})}, Output{Lease: 2}, false},
		{"granted to a worker offering another value", Input{Op: OpAcquire, Job: "j", Worker: "w",
			Offer: RouteOf(api.Offer{Labels: map[string]string{"repo": "piloop", "gpu": "h100"}})}, Output{Lease: 2}, false},
		{"missed by a worker that cannot take it", Input{Op: OpMiss, Job: "j", Worker: "w"}, Output{}, true},
		{"missed by a worker that takes it", Input{Op: OpMiss, Job: "j", Worker: "w", Offer: a100}, Output{}, false},
		{"submitted again with another priority", Input{Op: OpSubmit, Job: "j", JobKind: "evaluation", Spec: "{}", Labels: submit.Labels}, Output{}, false},
		{"the same again", submit, Output{}, true},
	} {
		ops := []porcupine.Operation{
			{ClientId: 1, Input: submit, Call: 0, Output: Output{Created: true}, Return: 1},
			{ClientId: 2, Input: tc.then, Call: 2, Output: tc.out, Return: 3},
		}
		_, err := Check(ops, 10*time.Second)
		if (err == nil) != tc.valid {
			t.Errorf("%s: %v, want linearizable %v", tc.name, err, tc.valid)
		}
	}
}
