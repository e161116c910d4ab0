package server

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/rs/zerolog"

	"github.com/leaselog/leaselog/event"
	"github.com/leaselog/leaselog/fsm"
	"github.com/leaselog/leaselog/lease"
)

// Metrics are the server's Prometheus metrics. What describes the lease
// table is read from it at scrape time (tableCollector), so it cannot drift
// from the table and survives restarts, the table being a fold of the log;
// only what the table does not know (HTTP, fsync latency) is counted here.
//
// Metrics exist apart from a Server because the daemon needs the fsync
// observer when it opens the log, before the service and the server exist:
// it makes them with NewMetrics, hands ObserveCommit to the log, and passes
// them to New in Options.Metrics.
type Metrics struct {
	reg      prometheus.Registerer
	gather   prometheus.Gatherer
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
	fsync    prometheus.Histogram
	sessions prometheus.Gauge
	handler  http.Handler

	// byCall caches the series of each route and status: a call looks
	// them up once, not by hashing its labels.
	byCall sync.Map // callSeriesKey → *callSeries
}

type callSeriesKey struct {
	route  string
	status int
}

type callSeries struct {
	requests prometheus.Counter
	duration prometheus.Observer
}

// NewMetrics registers the HTTP and fsync metrics on reg (nil means a private
// registry, with the Go runtime and process collectors) and returns them.
// GET /metrics serves reg if it is also a prometheus.Gatherer (a
// *prometheus.Registry is), else prometheus.DefaultGatherer. It panics if
// reg refuses them (registered twice): a wiring mistake, not a runtime
// condition.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	var gather prometheus.Gatherer = prometheus.DefaultGatherer
	if reg == nil {
		private := prometheus.NewRegistry()
		private.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
		reg, gather = private, private
	} else if g, ok := reg.(prometheus.Gatherer); ok {
		gather = g
	}
	m := &Metrics{
		reg:    reg,
		gather: gather,
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "leaselog_http_requests_total",
			Help: "HTTP requests answered, by route pattern and status.",
		}, []string{"route", "status"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "leaselog_http_request_duration_seconds",
			Help:    "Time to answer an HTTP request, by route pattern and status (long-polls and streams included).",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60},
		}, []string{"route", "status"}),
		fsync: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "leaselog_fsync_seconds",
			Help:    "Latency of the event log's fsyncs.",
			Buckets: prometheus.ExponentialBuckets(50e-6, 2, 16), // 50µs to 1.6s
		}),
	}
	m.sessions = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "leaselog_sessions",
		Help: "Worker sessions open (GET /v1/session, upgraded); each holds a connection.",
	})
	reg.MustRegister(m.requests, m.duration, m.fsync, m.sessions)
	registerStandard(reg) // buildinfo.go
	return m
}

// attach registers the collector that reads svc's table at scrape time, and
// sends promhttp's errors to log.
func (m *Metrics) attach(svc *lease.Service, timeout time.Duration, log zerolog.Logger) {
	m.reg.MustRegister(newTableCollector(svc, timeout), newCompactionCollector(svc))
	m.handler = promhttp.HandlerFor(m.gather, promhttp.HandlerOpts{
		ErrorLog:      promLogger{log},
		ErrorHandling: promhttp.ContinueOnError, // a partial scrape beats none
	})
}

// ObserveCommit records one fsync of the event log taking d, into the
// histogram leaselog_fsync_seconds. It is safe for concurrent use and quick
// enough for the log's commit hook (eventlog.Options.OnCommit).
func (m *Metrics) ObserveCommit(d time.Duration) { m.fsync.Observe(d.Seconds()) }

func (m *Metrics) observe(route string, status int, d time.Duration) {
	k := callSeriesKey{route, status}
	v, ok := m.byCall.Load(k)
	if !ok {
		code := strconv.Itoa(status)
		v, _ = m.byCall.LoadOrStore(k, &callSeries{m.requests.WithLabelValues(route, code), m.duration.WithLabelValues(route, code)})
	}
	cs := v.(*callSeries)
	cs.requests.Inc()
	cs.duration.Observe(d.Seconds())
}

// SyncObserver returns the function that records an fsync of the event log
// taking d (Metrics.ObserveCommit of the server's metrics), to be handed to
// the log's sync hook.
func (s *Server) SyncObserver() func(d time.Duration) { return s.metrics.ObserveCommit }

// serveMetrics answers GET /metrics in the Prometheus text format. The only
// query parameter is promhttp's own name[] filter.
func (s *Server) serveMetrics(w http.ResponseWriter, r *http.Request, _ *call) error {
	for k := range r.URL.Query() {
		if k != "name[]" {
			return badRequest("unknown query parameter %q (want name[])", k)
		}
	}
	s.metrics.handler.ServeHTTP(w, r)
	return nil
}

// tableCollector reads the lease table's counts at scrape time: live leases
// and jobs by state, reports by outcome, events by type, workers by
// reachability, the log's seq. The counters are the fold's, so a restart
// neither resets them nor counts an event twice.
type tableCollector struct {
	svc     counter
	timeout time.Duration

	up, leases, jobs, reported, events, seq, workers, unroutable *prometheus.Desc
}

// counter is what the collector asks of the lease service.
type counter interface {
	Counts(ctx context.Context) (lease.Counts, error)
}

func newTableCollector(svc counter, timeout time.Duration) *tableCollector {
	return &tableCollector{
		svc:     svc,
		timeout: timeout,
		up:      prometheus.NewDesc("leaselog_up", "1 if the lease service answers, 0 if it failed.", nil, nil),
		leases:  prometheus.NewDesc("leaselog_leases", "Live leases, by state.", []string{"state"}, nil),
		jobs:    prometheus.NewDesc("leaselog_jobs", "Jobs, by state.", []string{"state"}, nil),
		reported: prometheus.NewDesc("leaselog_jobs_reported_total",
			"Jobs reported, by outcome (a job reported failed or killed is in state reported).", []string{"outcome"}, nil),
		events: prometheus.NewDesc("leaselog_events_total",
			"Events in the log, by type (lease.expired: expiries; lease.stale_report: stale reports; lease.failed: evaluations lost once more than their max_requeues).", []string{"type"}, nil),
		seq:     prometheus.NewDesc("leaselog_log_seq", "Sequence number of the last durable event.", nil, nil),
		workers: prometheus.NewDesc("leaselog_workers", "Workers the table knows, by reachability.", []string{"state"}, nil),
		unroutable: prometheus.NewDesc("leaselog_jobs_unroutable",
			"Queued jobs no worker present can take: none takes their kind and offers their labels.", nil, nil),
	}
}

func (tc *tableCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{tc.up, tc.leases, tc.jobs, tc.reported, tc.events, tc.seq, tc.workers, tc.unroutable} {
		ch <- d
	}
}

// liveStates are the states a lease holds its job in.
func liveStates() []fsm.State { return []fsm.State{fsm.Acquired, fsm.Running} }

func (tc *tableCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), tc.timeout)
	defer cancel()
	n, err := tc.svc.Counts(ctx)
	if err != nil {
		ch <- prometheus.MustNewConstMetric(tc.up, prometheus.GaugeValue, 0)
		return
	}
	ch <- prometheus.MustNewConstMetric(tc.up, prometheus.GaugeValue, 1)
	for _, st := range liveStates() {
		ch <- prometheus.MustNewConstMetric(tc.leases, prometheus.GaugeValue, float64(n.Leases[st]), st.String())
	}
	for _, st := range fsm.States() {
		ch <- prometheus.MustNewConstMetric(tc.jobs, prometheus.GaugeValue, float64(n.Jobs[st]), st.String())
	}
	for _, o := range event.ReportOutcomes() {
		ch <- prometheus.MustNewConstMetric(tc.reported, prometheus.CounterValue, float64(n.Reported[o]), o.String())
	}
	for _, typ := range event.Types() {
		if typ == event.TypeHeartbeats {
			continue // the fold counts a summary as the heartbeats it stands for, in lease.heartbeat
		}
		ch <- prometheus.MustNewConstMetric(tc.events, prometheus.CounterValue, float64(n.Events[typ]), typ.String())
	}
	ch <- prometheus.MustNewConstMetric(tc.seq, prometheus.GaugeValue, float64(n.Seq))
	ch <- prometheus.MustNewConstMetric(tc.workers, prometheus.GaugeValue, float64(n.Reachable), "reachable")
	ch <- prometheus.MustNewConstMetric(tc.workers, prometheus.GaugeValue, float64(n.Unreachable), "unreachable")
	ch <- prometheus.MustNewConstMetric(tc.unroutable, prometheus.GaugeValue, float64(n.Unroutable))
}

// promLogger sends promhttp's errors to zerolog.
type promLogger struct{ log zerolog.Logger }

func (l promLogger) Println(v ...any) { l.log.Error().Msg(fmt.Sprint(v...)) }

// compactionCollector reads what the compactor did (lease.Service's
// CompactionTotals) at scrape time: counted since the daemon started.
type compactionCollector struct {
	svc interface{ CompactionTotals() lease.CompactStats }

	jobs, heartbeats, summaries, bytes *prometheus.Desc
}

func newCompactionCollector(svc interface{ CompactionTotals() lease.CompactStats }) *compactionCollector {
	return &compactionCollector{
		svc:  svc,
		jobs: prometheus.NewDesc("leaselog_compacted_jobs_total", "Jobs whose heartbeats the compactor folded into summaries.", nil, nil),
		heartbeats: prometheus.NewDesc("leaselog_compacted_heartbeats_total",
			"Heartbeat events the compactor removed from the log, each run of a lease's kept as one lease.heartbeats summary.", nil, nil),
		summaries: prometheus.NewDesc("leaselog_compaction_summaries_total", "lease.heartbeats summaries the compactor wrote.", nil, nil),
		bytes: prometheus.NewDesc("leaselog_compacted_bytes_total",
			"Bytes of keys and values the compactor removed from the log, less the summaries it wrote (before Pebble's own compaction reclaims them).", nil, nil),
	}
}

func (cc *compactionCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{cc.jobs, cc.heartbeats, cc.summaries, cc.bytes} {
		ch <- d
	}
}

func (cc *compactionCollector) Collect(ch chan<- prometheus.Metric) {
	st := cc.svc.CompactionTotals()
	ch <- prometheus.MustNewConstMetric(cc.jobs, prometheus.CounterValue, float64(st.Jobs))
	ch <- prometheus.MustNewConstMetric(cc.heartbeats, prometheus.CounterValue, float64(st.Heartbeats))
	ch <- prometheus.MustNewConstMetric(cc.summaries, prometheus.CounterValue, float64(st.Summaries))
	ch <- prometheus.MustNewConstMetric(cc.bytes, prometheus.CounterValue, float64(st.Bytes))
}
