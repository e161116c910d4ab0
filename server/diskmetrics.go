package server

import (
	"math"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sys/unix"
)

// WatchDisk adds the gauges of the filesystem that holds dir (the daemon's
// data directory), read at scrape time: leaselog_data_free_bytes, what is
// free to the daemon's user, and leaselog_data_size_bytes. A full disk
// fail-stops the log (every write refused until a restart), so an alert on
// the first (deploy/alerts.yaml) comes before it. A filesystem that cannot
// be read gives NaN.
func (m *Metrics) WatchDisk(dir string) {
	statfs := func(of func(st *unix.Statfs_t) uint64) func() float64 {
		return func() float64 {
			var st unix.Statfs_t
			if err := unix.Statfs(dir, &st); err != nil {
				return math.NaN()
			}
			return float64(of(&st)) * float64(st.Bsize)
		}
	}
	m.reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "leaselog_data_free_bytes",
			Help: "Bytes free to the daemon's user on the filesystem of its data directory.",
		}, statfs(func(st *unix.Statfs_t) uint64 { return st.Bavail })),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "leaselog_data_size_bytes",
			Help: "Size in bytes of the filesystem of the daemon's data directory.",
		}, statfs(func(st *unix.Statfs_t) uint64 { return st.Blocks })),
	)
}
