package worker

import (
	"context"
	"reflect"
	"testing"
	"time"

	"github.com/leaselog/leaselog/api"
)

// routingDaemon is a roundsDaemon that takes a worker's offer (Router),
// and records the offers of its acquires.
type routingDaemon struct {
	*roundsDaemon
	offers chan api.Offer
}

func (d *routingDaemon) AcquireOffer(ctx context.Context, worker string, max int, wait time.Duration, o api.Offer) ([]api.Grant, error) {
	select {
	case d.offers <- o:
	default:
	}
	return d.roundsDaemon.Acquire(ctx, worker, max, wait)
}

// TestWorkerSendsItsOffer: a worker with an offer sends it with its
// acquires and with the acquire its reports carry; one whose daemon takes
// no offer is refused at New rather than granted what it does not take.
func TestWorkerSendsItsOffer(t *testing.T) {
	offer := api.Offer{Kinds: []string{"evaluation"}, Labels: map[string]string{"gpu": "a100"}}
	d, e := &routingDaemon{roundsDaemon: newRoundsDaemon(), offers: make(chan api.Offer, 64)}, newFakeExecutor()
	d.queue = []api.Grant{grant(3, "j1"), grant(4, "j2")}
	newTestWorker(t, d, e, nil, nextInReport, func(o *Options) { o.Offer = offer })
	if got := receive(t, d.offers, "an acquire"); !reflect.DeepEqual(got, offer) {
		t.Errorf("the acquire offered %+v, want %+v", got, offer)
	}
	receive(t, e.started, "the first job").finish(Outcome{Outcome: "succeeded"})
	receive(t, d.reports, "its report")
	d.rmu.Lock()
	nexts := d.nexts
	d.rmu.Unlock()
	if len(nexts) == 0 || !reflect.DeepEqual(nexts[0].Offer, offer) {
		t.Errorf("the report's next %+v, want offer %+v", nexts, offer)
	}

	_, err := New(Options{ID: "w2", Capacity: 1, Daemon: newFakeDaemon(), Executor: e, Timing: ConfigOf(daemonTiming), Offer: offer})
	if err == nil {
		t.Error("a worker with an offer was made on a daemon that takes none")
	}
}
