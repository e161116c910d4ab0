package deploy

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"

	"github.com/leaselog/leaselog/internal/testkit/leasetest"
	"github.com/leaselog/leaselog/server"
)

// served is the set of metric names the daemon's /metrics serves (a
// histogram's _bucket, _sum and _count included), and Prometheus's own
// series of every target (up), as an in-process daemon wired as `serve`
// wires it answers them.
func served(t *testing.T) map[string]bool {
	t.Helper()
	_, svc := leasetest.Open(t)
	metrics := server.NewMetrics(prometheus.NewRegistry())
	metrics.WatchDisk(t.TempDir())
	srv := server.New(svc, server.Options{Metrics: metrics})
	ts := httptest.NewServer(srv)
	t.Cleanup(func() { srv.Close(); ts.Close() })
	get := func(path string) []byte {
		resp, err := http.Get(ts.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %d, %v", path, resp.StatusCode, err)
		}
		return b
	}
	get("/v1/jobs") // the HTTP metrics have series once a call is counted
	names := map[string]bool{"up": true}
	sc := bufio.NewScanner(bytes.NewReader(get("/metrics")))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 4 || f[0] != "#" || f[1] != "TYPE" {
			continue
		}
		names[f[2]] = true
		if f[3] == "histogram" || f[3] == "summary" {
			names[f[2]+"_sum"], names[f[2]+"_count"] = true, true
			if f[3] == "histogram" {
				names[f[2]+"_bucket"] = true
			}
		}
	}
	if !names["leaselog_up"] || !names["leaselog_data_free_bytes"] {
		t.Fatalf("the daemon's /metrics lacks leaselog_up or leaselog_data_free_bytes: %v", names)
	}
	return names
}

// promql parses the expressions of the rules and the dashboard, as
// Prometheus does.
var promql = parser.NewParser(parser.Options{})

// metricsIn parses expr as PromQL and returns the metric names its
// selectors name.
func metricsIn(expr string) ([]string, error) {
	e, err := promql.ParseExpr(expr)
	if err != nil {
		return nil, err
	}
	var out []string
	parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
		if vs, ok := n.(*parser.VectorSelector); ok {
			out = append(out, vs.Name)
		}
		return nil
	})
	return out, nil
}

// TestAlertRules: deploy/alerts.yaml is a Prometheus rule file, as
// Prometheus's own parser reads it (rulefmt: unknown keys refused, names,
// durations, labels, annotation templates and expressions checked); it
// alerts on what the README promises (the daemon down, expiries rising,
// stale reports, fsync latency, disk), and every metric it names is one the
// daemon serves.
func TestAlertRules(t *testing.T) {
	have := served(t)
	f, errs := rulefmt.ParseFile("alerts.yaml", false, model.UTF8Validation, promql, slog.New(slog.DiscardHandler))
	if len(errs) > 0 {
		t.Fatal(errors.Join(errs...))
	}
	if len(f.Groups) == 0 {
		t.Fatal("alerts.yaml: no groups")
	}
	var exprs []string
	for _, g := range f.Groups {
		for _, r := range g.Rules {
			what := g.Name + "/" + r.Alert
			if r.Alert == "" {
				t.Errorf("%s: a recording rule; this file holds alerts", what)
			}
			if !slices.Contains([]string{"critical", "warning", "info"}, r.Labels["severity"]) {
				t.Errorf("%s: severity %q, want critical, warning or info", what, r.Labels["severity"])
			}
			if r.Annotations["summary"] == "" || r.Annotations["description"] == "" {
				t.Errorf("%s: want a summary and a description", what)
			}
			names, err := metricsIn(r.Expr)
			if err != nil {
				t.Errorf("%s: %v", what, err)
			}
			for _, m := range names {
				if !have[m] {
					t.Errorf("%s: metric %s is not one the daemon serves", what, m)
				}
			}
			exprs = append(exprs, r.Expr)
		}
	}
	all := strings.Join(exprs, "\n")
	for _, want := range []string{`up{job="leaselog"}`, `type="lease.expired"`, `type="lease.stale_report"`, "leaselog_fsync_seconds_bucket", "leaselog_data_free_bytes"} {
		if !strings.Contains(all, want) {
			t.Errorf("no alert on %s", want)
		}
	}
}

// TestGrafanaDashboard: deploy/grafana.json is a dashboard (JSON, panels
// with unique ids and queries), and every metric its queries name is one
// the daemon serves.
func TestGrafanaDashboard(t *testing.T) {
	have := served(t)
	b, err := os.ReadFile("grafana.json")
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Title      string
		UID        string
		Templating struct {
			List []struct{ Name, Query string }
		}
		Panels []struct {
			ID      int
			Title   string
			Targets []struct{ RefID, Expr string }
		}
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(&d); err != nil {
		t.Fatalf("grafana.json: %v", err)
	}
	if d.Title == "" || d.UID == "" || len(d.Panels) == 0 {
		t.Fatalf("grafana.json: title %q, uid %q, %d panels", d.Title, d.UID, len(d.Panels))
	}
	ids := map[int]bool{}
	check := func(where, expr string) {
		names, err := metricsIn(expr)
		if err != nil {
			t.Errorf("%s: %v", where, err)
		}
		for _, m := range names {
			if !have[m] {
				t.Errorf("%s: metric %s is not one the daemon serves", where, m)
			}
		}
	}
	for _, p := range d.Panels {
		if ids[p.ID] || len(p.Targets) == 0 {
			t.Errorf("panel %q: id %d repeated, or no query", p.Title, p.ID)
		}
		ids[p.ID] = true
		for _, q := range p.Targets {
			check("panel "+p.Title, q.Expr)
		}
	}
	for _, v := range d.Templating.List {
		if metric, ok := strings.CutPrefix(v.Query, "label_values("); ok {
			metric, _, _ = strings.Cut(metric, ",") // the label follows
			check("variable "+v.Name, metric)
		}
	}
}

// TestMetricsInFindsNames pins the name scan the tests above rely on: the
// selectors' names, not functions, labels, keywords or strings; and an
// expression Prometheus would refuse is an error.
func TestMetricsInFindsNames(t *testing.T) {
	got, err := metricsIn(`histogram_quantile(0.99, sum by (instance, le) (rate(leaselog_fsync_seconds_bucket{instance=~"$i",type="x y"}[5m]))) > 0.1 and up{job="leaselog"} == 0 or nope_total`)
	want := []string{"leaselog_fsync_seconds_bucket", "up", "nope_total"}
	if err != nil || !slices.Equal(got, want) {
		t.Fatalf("metricsIn: %v, %v; want %v", got, err, want)
	}
	if _, err := metricsIn(`sum(rate(up[5m])`); err == nil {
		t.Fatal("an unbalanced expression parsed")
	}
}

// TestSystemdUnit: deploy/leaselog.service runs serve with KillMode=process
// (a stop signals the daemon alone: its local worker's jobs outlive a
// restart, README's Operating it), may write its data directory under
// ProtectSystem=strict, and sets none of the hardening options that break
// the jobs its local worker runs.
func TestSystemdUnit(t *testing.T) {
	b, err := os.ReadFile("leaselog.service")
	if err != nil {
		t.Fatal(err)
	}
	unit := map[string]map[string][]string{}
	section := ""
	for n, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		switch {
		case line == "" || strings.HasPrefix(line, "#"):
		case strings.HasPrefix(line, "[") && strings.HasSuffix(line, "]"):
			section = line[1 : len(line)-1]
			unit[section] = map[string][]string{}
		default:
			k, v, ok := strings.Cut(line, "=")
			if !ok || section == "" {
				t.Fatalf("leaselog.service:%d: %q is not KEY=VALUE in a section", n+1, line)
			}
			unit[section][k] = append(unit[section][k], v)
		}
	}
	svc := unit["Service"]
	one := func(k string) string {
		if len(svc[k]) != 1 {
			t.Fatalf("[Service] %s given %d times, want once", k, len(svc[k]))
		}
		return svc[k][0]
	}
	if one("KillMode") != "process" {
		t.Errorf("KillMode=%s, want process", one("KillMode"))
	}
	exec := strings.Fields(one("ExecStart"))
	if len(exec) < 2 || !strings.HasPrefix(exec[0], "/") || exec[1] != "serve" {
		t.Errorf("ExecStart=%s: want an absolute path to leaselog, then serve", one("ExecStart"))
	}
	data := ""
	for i, a := range exec {
		if a == "--data" && i+1 < len(exec) {
			data = exec[i+1]
		}
	}
	if one("ProtectSystem") == "strict" && (data == "" || !slices.Contains(strings.Fields(one("ReadWritePaths")), data)) {
		t.Errorf("ProtectSystem=strict, and the data directory %q is not in ReadWritePaths", data)
	}
	for k, bad := range map[string]string{"NoNewPrivileges": "true", "MemoryDenyWriteExecute": "true", "PrivateDevices": "true",
		"RestrictNamespaces": "true", "PrivateNetwork": "true", "ProtectHome": "yes", "SystemCallFilter": "", "RestrictAddressFamilies": ""} {
		for _, v := range svc[k] {
			if bad == "" || v == bad {
				t.Errorf("%s=%s breaks the local worker's jobs", k, v)
			}
		}
	}
	if len(unit["Install"]["WantedBy"]) == 0 {
		t.Error("no [Install] WantedBy: systemctl enable would do nothing")
	}
}
