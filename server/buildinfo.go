package server

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/leaselog/leaselog/internal/buildinfo"
)

// registerStandard registers, on reg, leaselog_build_info and the standard
// Go runtime and process collectors every Prometheus target is expected to
// have. A registry that has the standard collectors already (the default
// one) keeps its own.
func registerStandard(reg prometheus.Registerer) {
	in := buildinfo.Get()
	build := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        "leaselog_build_info",
		Help:        "The daemon's build: its module version, VCS revision (-modified: built from a changed checkout) and Go version; always 1.",
		ConstLabels: prometheus.Labels{"version": in.Version, "revision": in.RevisionLabel(), "goversion": in.GoVersion},
	})
	build.Set(1)
	reg.MustRegister(build)
	for _, c := range []prometheus.Collector{
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	} {
		if err := reg.Register(c); err != nil && !errors.As(err, new(prometheus.AlreadyRegisteredError)) {
			panic(err) // a wiring mistake, as MustRegister would say
		}
	}
}
