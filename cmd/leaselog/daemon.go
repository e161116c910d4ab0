package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/leaselog/leaselog/eventlog"
	"github.com/leaselog/leaselog/hostclock"
	"github.com/leaselog/leaselog/lease"
	"github.com/leaselog/leaselog/ops"
	"github.com/leaselog/leaselog/server"
	"github.com/leaselog/leaselog/worker"
	"github.com/leaselog/leaselog/worker/local"
)

// daemon is a running leaselog serve: the log, the service and its sweeper,
// the HTTP server, and the local worker.
type daemon struct {
	logger  zerolog.Logger
	log     *eventlog.Log
	closer  func() error // closes the log (and the engine's connection)
	svc     *lease.Service
	api     *server.Server
	http    *http.Server
	addr    net.Addr
	errs    chan error // a part that failed on its own
	stopRun context.CancelFunc
	queue   lease.QueuePolicy // what the graceful stop does with the queue
	// token is the admin token kept in tokenFile, when the daemon generated
	// one (Config.GeneratesToken); empty otherwise. workerTokenFile keeps
	// the workers' token then.
	token, tokenFile string
	workerTokenFile  string
	wg               sync.WaitGroup
}

// startOptions are what a daemon's start takes beside its configuration.
type startOptions struct {
	StoreLogger *zerolog.Logger
}

// startDaemon opens the store, rebuilds the table, and starts serving. The
// caller stops it with stop. It gives up between its stages once ctx is
// done, with an error wrapping errStartStopped.
//
// o.StoreLogger, if set, receives the store's own messages instead of
// logger (serve watches them during start-up: see startWatch).
func startDaemon(ctx context.Context, cfg Config, logger zerolog.Logger, o startOptions) (*daemon, error) {
	// Refused before anything is written: a path in the way of the socket.
	if network, addr, _ := splitListen(cfg.Server.Listen); network == "unix" {
		if err := checkSocketPath(addr); err != nil {
			return nil, fmt.Errorf("serve: %w", err)
		}
	}
	if err := checkFreeSpace(cfg.Store.Dir); err != nil {
		return nil, fmt.Errorf("serve: %w", err)
	}
	metrics := server.NewMetrics(prometheus.NewRegistry())
	metrics.WatchDisk(cfg.Store.Dir)
	slog := logger
	if o.StoreLogger != nil {
		slog = *o.StoreLogger
	}
	logger.Info().Str("data", cfg.Store.Dir).Msg("opening the store")
	// The leadership key of engine jetstream names this daemon by where
	// others reach it, for a standby to name it (advertise.go).
	id := cfg.Server.Listen
	if cfg.Store.Engine == engineJetStream {
		a, err := cfg.Advertised()
		if err != nil {
			return nil, err
		}
		id = a
	}
	eopts := eventlog.Options{Logger: slog, OnCommit: metrics.ObserveCommit}
	st, err := openStore(ctx, cfg.Store, cfg.Lease(), id, eopts)
	if err != nil {
		if stop := stopped(ctx, "opening the store"); stop != nil { // jetstream's open waits on the network
			return nil, errors.Join(stop, err)
		}
		if errors.Is(err, eventlog.ErrLocked) {
			return nil, fmt.Errorf("serve: %s is in use by another leaselog serve (one daemon per data directory): %w", cfg.Store.Dir, err)
		}
		return nil, fmt.Errorf("serve: %w", newerStore(cfg.Store.Dir, err))
	}
	log := st.log
	d := &daemon{logger: logger, log: log, closer: st.close, errs: make(chan error, 4), queue: cfg.StopQueue()}
	fail := func(err error) (*daemon, error) { return nil, errors.Join(err, d.closeStore()) }
	if err := stopped(ctx, "the store is open"); err != nil {
		return fail(err)
	}
	auth := cfg.ServerAuth()
	if cfg.GeneratesToken() {
		// Taken with the store's lock held: no other daemon writes it.
		if d.token, d.tokenFile, err = loadOrCreateToken(cfg.Store.Dir, tokenFileName); err != nil {
			return fail(fmt.Errorf("serve: %w", err))
		}
		workers, workersFile, err := loadOrCreateToken(cfg.Store.Dir, workerTokenFileName)
		if err != nil {
			return fail(fmt.Errorf("serve: %w", err))
		}
		d.workerTokenFile = workersFile
		auth = &server.Auth{Admin: []string{d.token}, AnyWorker: []string{workers}}
	}
	reason, err := st.campaign(ctx, logger, cfg.Server.Listen)
	if err != nil {
		return fail(errors.Join(stopped(ctx, "campaigning"), fmt.Errorf("serve: %w", err)))
	}
	logger.Info().Msg("rebuilding the lease table")
	d.svc, err = lease.Open(log, lease.Options{Config: cfg.Lease(), Logger: logger, SnapshotEvery: cfg.Store.SnapshotEvery,
		SnapshotPerItem: lease.DefaultSnapshotPerItem, SnapshotInterval: time.Duration(cfg.Store.SnapshotSeconds * float64(time.Second)), StartReason: reason,
		MaxRequeues: cfg.Plugins.Executor.MaxRequeues, Bounds: cfg.Bounds(), HeartbeatRetention: cfg.HeartbeatRetention()})
	if err != nil {
		return fail(fmt.Errorf("serve: %w", err))
	}
	if err := stopped(ctx, "the lease table is rebuilt"); err != nil {
		return fail(err)
	}
	ln, err := listenOn(cfg.Server.Listen)
	if err != nil {
		return fail(fmt.Errorf("serve: %w", err))
	}
	d.addr = ln.Addr()
	// Connections are capped well below the file-descriptor limit: the store
	// must always be able to open its files.
	maxConns := cfg.Server.MaxConnections
	if maxConns == 0 {
		maxConns = server.DefaultMaxConns()
	}
	ln = server.LimitListener(ln, maxConns)
	bootID, err := hostclock.BootID()
	if err != nil {
		// Workers then fence on CLOCK_BOOTTIME, which can only fence sooner.
		logger.Warn().Err(err).Msg("no boot id to announce")
	}
	sopts := server.Options{Auth: auth, Logger: logger, Metrics: metrics, BootID: bootID, Backup: st.backup()}
	if cfg.Capacity() > 0 {
		sopts.Output = localOutput{dir: cfg.Workdir()}
	}
	d.api = server.New(d.svc, sopts)
	d.http = server.NewHTTPServer(d.api) // HTTP/1.1 and h2c on the same port
	var runCtx context.Context
	runCtx, d.stopRun = context.WithCancel(context.Background())
	svc := d.svc
	d.goRun("sweeper", func() error { return svc.Run(runCtx) })
	d.goRun("compaction", func() error { return svc.RunCompaction(runCtx, nil) })
	if st.js != nil { // the stream, compacted below checkpoints of the compacted cache
		d.goRun("checkpoints", func() error { return st.js.RunCheckpoints(runCtx, nil) })
	}
	if lost := st.lost(); lost != nil {
		d.goRun("leadership", func() error {
			select {
			case <-lost:
				return errDeposed
			case <-runCtx.Done():
				return nil
			}
		})
	}
	d.goRun("http", func() error {
		if err := d.http.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			return err
		}
		return nil
	})
	if n := cfg.Capacity(); n > 0 {
		// The local worker shares the daemon's host, and so its
		// CLOCK_MONOTONIC: the host's sleep is the daemon's absence too.
		clock := hostclock.Monotonic
		wlog := logger.With().Str("worker", "local").Logger()
		exec, err := local.New(local.Options{Dir: cfg.Workdir(), Logger: wlog, Clock: clock, Retention: cfg.Retention(),
			StoreLock: localStoreLock(cfg.Store)})
		if err == nil {
			var w *worker.Worker
			w, err = worker.New(worker.Options{ID: "local", Capacity: n, Daemon: ops.NewDaemon(svc), Executor: exec,
				Timing: cfg.Lease(), Logger: wlog, Now: clock.Now, Offer: cfg.LocalOffer()})
			if err == nil {
				d.goRun("local worker", func() error { return w.Run(runCtx) })
				d.goRun("retention", func() error { exec.RunRetention(runCtx); return nil })
			}
		}
		if err != nil {
			return nil, errors.Join(fmt.Errorf("serve: local worker: %w", err), d.stop())
		}
	}
	ev := logger.Info().Str("addr", d.addr.String()).Str("network", d.addr.Network()).Str("data", cfg.Store.Dir).
		Int("local_capacity", cfg.Capacity()).Int("max_connections", maxConns)
	switch {
	case d.tokenFile != "":
		ev = ev.Str("auth", "admin token in "+d.tokenFile+", workers' in "+d.workerTokenFile)
	case auth == nil:
		ev = ev.Str("auth", "open")
	default:
		ev = ev.Str("auth", "tokens of [auth]")
	}
	ev.Msg("listening")
	if u := dashboardURL(d.addr, d.token); u != "" {
		logger.Info().Str("url", u).Msg("dashboard")
	}
	return d, nil
}

// localStoreLock is the store lock the local worker's supervisors watch
// (local.Options.StoreLock): on the Pebble engine, the store's, for while no
// process holds it no lease can be granted, and a restart takes the time out
// of every deadline. None on engine jetstream: a standby can take over and
// expire the lease while this daemon is away, so its jobs fence as any
// worker's.
func localStoreLock(c StoreConfig) string {
	if c.Engine == engineJetStream {
		return ""
	}
	return eventlog.LockFile(c.Dir)
}

// errStartStopped is the error of a start-up given up on a signal.
var errStartStopped = errors.New("start-up stopped")

func stopped(ctx context.Context, stage string) error {
	if ctx.Err() != nil {
		return fmt.Errorf("serve: %w once %s", errStartStopped, stage)
	}
	return nil
}

// closeStore closes what a start-up that failed had opened.
func (d *daemon) closeStore() error {
	var errs []error
	if d.svc != nil {
		errs = append(errs, d.svc.Close())
	}
	return errors.Join(append(errs, d.closer())...)
}

func (d *daemon) goRun(what string, f func() error) {
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		if err := f(); err != nil {
			d.errs <- fmt.Errorf("%s: %w", what, err)
		}
	}()
}

// stop is the graceful stop: queued jobs cancelled (or kept, with
// server.cancel_queued_on_stop = false), daemon.stopping recorded, the API closed, the local worker's loop ended (its jobs keep
// running), a last snapshot written, the store closed.
func (d *daemon) stop() error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var errs []error
	if err := d.svc.Stop(ctx, d.queue); err != nil {
		errs = append(errs, fmt.Errorf("stop: %w", err))
	}
	d.api.Close() // end event streams and long polls: Shutdown waits for every request
	if err := d.http.Shutdown(ctx); err != nil {
		_ = d.http.Close()
	}
	d.stopRun()
	d.wg.Wait()
	if err := d.svc.Close(); err != nil {
		errs = append(errs, err)
	}
	if err := d.closer(); err != nil {
		errs = append(errs, err)
	}
	if len(errs) == 0 {
		d.logger.Info().Msg("stopped")
	}
	return errors.Join(errs...)
}

// url is the address clients use.
func (d *daemon) url() string {
	if d.addr.Network() == "unix" {
		return "unix://" + d.addr.String()
	}
	return "http://" + d.addr.String()
}

func listenOn(addr string) (net.Listener, error) {
	network, a, err := splitListen(addr)
	if err != nil {
		return nil, err
	}
	if network == "unix" {
		return listenUnix(a)
	}
	ln, err := net.Listen(network, a)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", addr, err)
	}
	return ln, nil
}
