package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/leaselog/leaselog/api"
	"github.com/leaselog/leaselog/eventlog"
	"github.com/leaselog/leaselog/lease"
	"github.com/leaselog/leaselog/server"
	"github.com/leaselog/leaselog/worker"
	"github.com/leaselog/leaselog/worker/local"
)

// daemon is a running leaselog serve: the log, the service and its sweeper,
// the HTTP server, and the local worker.
type daemon struct {
	logger  zerolog.Logger
	log     *eventlog.Log
	svc     *lease.Service
	api     *server.Server
	http    *http.Server
	addr    net.Addr
	errs    chan error // a part that failed on its own
	stopRun context.CancelFunc
	wg      sync.WaitGroup
}

// startDaemon opens the store, rebuilds the table, and starts serving. The
// caller stops it with stop.
func startDaemon(cfg Config, logger zerolog.Logger) (*daemon, error) {
	metrics := server.NewMetrics(prometheus.NewRegistry())
	log, err := eventlog.Open(cfg.Store.Dir, eventlog.Options{Logger: logger, OnCommit: metrics.ObserveCommit})
	if err != nil {
		if errors.Is(err, eventlog.ErrLocked) {
			return nil, fmt.Errorf("serve: %s is in use by another leaselog serve (one daemon per data directory): %w", cfg.Store.Dir, err)
		}
		return nil, fmt.Errorf("serve: %w", err)
	}
	every := cfg.Store.SnapshotEvery
	if every == 0 {
		every = -1 // in the file 0 means never; to the service it means its default
	}
	svc, err := lease.Open(log, lease.Options{Config: cfg.Lease(), Logger: logger, SnapshotEvery: every,
		SnapshotInterval: time.Duration(cfg.Store.SnapshotSeconds * float64(time.Second))})
	if err != nil {
		log.Close()
		return nil, fmt.Errorf("serve: %w", err)
	}
	ln, err := listenOn(cfg.Server.Listen)
	if err != nil {
		log.Close()
		return nil, fmt.Errorf("serve: %w", err)
	}
	d := &daemon{logger: logger, log: log, svc: svc, addr: ln.Addr(), errs: make(chan error, 3)}
	d.api = server.New(svc, server.Options{Auth: cfg.ServerAuth(), Logger: logger, Metrics: metrics})
	d.http = &http.Server{
		Handler:           d.api,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
	}
	var runCtx context.Context
	runCtx, d.stopRun = context.WithCancel(context.Background())
	d.goRun("sweeper", func() error { return svc.Run(runCtx) })
	d.goRun("http", func() error {
		if err := d.http.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			return err
		}
		return nil
	})
	if n := cfg.Capacity(); n > 0 {
		wlog := logger.With().Str("worker", "local").Logger()
		exec, err := local.New(local.Options{Dir: cfg.Workdir(), Logger: wlog})
		if err == nil {
			var w *worker.Worker
			w, err = worker.New(worker.Options{ID: "local", Capacity: n, Daemon: worker.InProcess(svc), Executor: exec,
				Timing: api.TimingOf(cfg.Lease()), Logger: wlog})
			if err == nil {
				d.goRun("local worker", func() error { return w.Run(runCtx) })
			}
		}
		if err != nil {
			return nil, errors.Join(fmt.Errorf("serve: local worker: %w", err), d.stop())
		}
	}
	logger.Info().Str("addr", d.addr.String()).Str("network", d.addr.Network()).Str("data", cfg.Store.Dir).
		Int("local_capacity", cfg.Capacity()).Msg("listening")
	return d, nil
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

// stop is the graceful stop: queued jobs cancelled, daemon.stopping
// recorded, the API closed, the local worker's loop ended (its jobs keep
// running), a last snapshot written, the store closed.
func (d *daemon) stop() error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var errs []error
	if err := d.svc.Stop(ctx); err != nil {
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
	if err := d.log.Close(); err != nil {
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
		// A socket file left by a daemon that died is in the way; a live daemon
		// would hold the data directory's lock, which was taken already.
		if _, err := os.Stat(a); err == nil {
			if conn, err := net.Dial("unix", a); err == nil {
				conn.Close()
				return nil, fmt.Errorf("listen on %s: another process serves it", a)
			}
			_ = os.Remove(a)
		}
	}
	ln, err := net.Listen(network, a)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", addr, err)
	}
	return ln, nil
}
