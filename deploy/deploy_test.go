package deploy

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"text/template"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/model"
	"go.yaml.in/yaml/v4"

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

// metricName matches what may be a metric name in a PromQL expression;
// metricsIn keeps those that are: not inside quotes, not a function, a
// keyword or a label name.
var (
	metricName = regexp.MustCompile(`[a-zA-Z_:][a-zA-Z0-9_:]*`)
	quoted     = regexp.MustCompile(`"[^"]*"`)
	notMetric  = map[string]bool{"sum": true, "by": true, "without": true, "rate": true, "increase": true, "and": true,
		"or": true, "unless": true, "offset": true, "absent": true, "histogram_quantile": true, "predict_linear": true,
		"label_values": true, "on": true, "ignoring": true}
)

func metricsIn(expr string) []string {
	expr = quoted.ReplaceAllString(expr, `""`)
	var out []string
	for _, loc := range metricName.FindAllStringIndex(expr, -1) {
		name := expr[loc[0]:loc[1]]
		rest := strings.TrimLeft(expr[loc[1]:], " ")
		switch {
		case notMetric[name], loc[0] > 0 && strings.ContainsAny(expr[loc[0]-1:loc[0]], "0123456789.$"):
		case strings.HasPrefix(rest, "=") || strings.HasPrefix(rest, "!=") || strings.HasPrefix(rest, "=~") || strings.HasPrefix(rest, "!~"):
			// a label matcher
		case strings.HasPrefix(rest, "("):
			// a function
		default:
			if !isGroupingLabel(expr, loc[0]) {
				out = append(out, name)
			}
		}
	}
	return out
}

// isGroupingLabel reports whether the name at i is inside "by (…)".
func isGroupingLabel(expr string, i int) bool {
	open := strings.LastIndex(expr[:i], "(")
	if open < 0 || strings.Contains(expr[open:i], ")") {
		return false
	}
	before := strings.TrimRight(expr[:open], " ")
	return strings.HasSuffix(before, " by") || strings.HasSuffix(before, " without") || strings.HasSuffix(before, "(by")
}

// balanced checks an expression's brackets and quotes.
func balanced(expr string) error {
	var stack []rune
	pairs := map[rune]rune{')': '(', ']': '[', '}': '{'}
	in := false
	for _, r := range expr {
		switch {
		case r == '"':
			in = !in
		case in:
		case r == '(' || r == '[' || r == '{':
			stack = append(stack, r)
		case pairs[r] != 0:
			if len(stack) == 0 || stack[len(stack)-1] != pairs[r] {
				return fmt.Errorf("unbalanced %q", r)
			}
			stack = stack[:len(stack)-1]
		}
	}
	if in || len(stack) > 0 {
		return fmt.Errorf("unclosed %q", append(stack, '"'))
	}
	return nil
}

// The shape of a Prometheus rule file (rulefmt's), decoded strictly: a key
// Prometheus does not know is an error, as it is to Prometheus.
type ruleFile struct {
	Groups []struct {
		Name     string `yaml:"name"`
		Interval string `yaml:"interval"`
		Rules    []struct {
			Alert         string            `yaml:"alert"`
			Record        string            `yaml:"record"`
			Expr          string            `yaml:"expr"`
			For           string            `yaml:"for"`
			KeepFiringFor string            `yaml:"keep_firing_for"`
			Labels        map[string]string `yaml:"labels"`
			Annotations   map[string]string `yaml:"annotations"`
		} `yaml:"rules"`
	} `yaml:"groups"`
}

// Prometheus's template functions, for parsing annotations.
var templateFuncs = template.FuncMap{"humanize": fmt.Sprint, "humanizeDuration": fmt.Sprint, "humanizePercentage": fmt.Sprint}

// templateDefs are the variables Prometheus defines before an annotation.
const templateDefs = "{{$labels := .Labels}}{{$externalLabels := .ExternalLabels}}{{$externalURL := .ExternalURL}}{{$value := .Value}}"

var labelName = regexp.MustCompile(`^[a-zA-Z_][a-zA-Z0-9_]*$`)

// TestAlertRules: deploy/alerts.yaml is a Prometheus rule file (decoded
// strictly in rulefmt's shape; names, durations, labels and annotation
// templates valid; expressions balanced), it alerts on what the README
// promises (the daemon down, expiries rising, stale reports, fsync
// latency, disk), and every metric it names is one the daemon serves.
func TestAlertRules(t *testing.T) {
	have := served(t)
	b, err := os.ReadFile("alerts.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var f ruleFile
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil {
		t.Fatalf("alerts.yaml: %v", err)
	}
	if len(f.Groups) == 0 {
		t.Fatal("alerts.yaml: no groups")
	}
	alerts := map[string]bool{}
	var exprs []string
	for _, g := range f.Groups {
		if g.Name == "" {
			t.Error("a group without a name")
		}
		for _, r := range g.Rules {
			what := g.Name + "/" + r.Alert
			if (r.Alert == "") == (r.Record == "") {
				t.Errorf("%s: a rule is an alert or a record, not both nor neither", what)
			}
			if alerts[r.Alert] || !model.IsValidLegacyMetricName(r.Alert) {
				t.Errorf("%s: alert name repeated or not a valid name", what)
			}
			alerts[r.Alert] = true
			for _, d := range []string{r.For, r.KeepFiringFor} {
				if _, err := model.ParseDuration(d); d != "" && err != nil {
					t.Errorf("%s: %v", what, err)
				}
			}
			if !slices.Contains([]string{"critical", "warning", "info"}, r.Labels["severity"]) {
				t.Errorf("%s: severity %q, want critical, warning or info", what, r.Labels["severity"])
			}
			for k := range r.Labels {
				if !labelName.MatchString(k) {
					t.Errorf("%s: label name %q", what, k)
				}
			}
			if r.Annotations["summary"] == "" || r.Annotations["description"] == "" {
				t.Errorf("%s: want a summary and a description", what)
			}
			for k, v := range r.Annotations {
				if _, err := template.New(k).Funcs(templateFuncs).Parse(templateDefs + v); err != nil {
					t.Errorf("%s: annotation %s: %v", what, k, err)
				}
			}
			if err := balanced(r.Expr); err != nil || strings.TrimSpace(r.Expr) == "" {
				t.Errorf("%s: expr %q: %v", what, r.Expr, err)
			}
			for _, m := range metricsIn(r.Expr) {
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
		if err := balanced(expr); err != nil || expr == "" {
			t.Errorf("%s: expr %q: %v", where, expr, err)
		}
		for _, m := range metricsIn(expr) {
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

// TestMetricsInFindsNames pins the name scan the tests above rely on.
func TestMetricsInFindsNames(t *testing.T) {
	got := metricsIn(`histogram_quantile(0.99, sum by (instance, le) (rate(leaselog_fsync_seconds_bucket{instance=~"$i",type="x y"}[5m]))) > 0.1 and up{job="leaselog"} == 0 or nope_total`)
	want := []string{"leaselog_fsync_seconds_bucket", "up", "nope_total"}
	if !slices.Equal(got, want) {
		t.Fatalf("metricsIn: %v, want %v", got, want)
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
