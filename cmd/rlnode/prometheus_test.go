package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/goccy/go-yaml"

	"github.com/rlnode/rlnode/cmd/rlnode/internal/proctest"
)

// deployFile is a file under deploy/ of this repository.
func deployFile(t *testing.T, parts ...string) string {
	t.Helper()
	root, err := proctest.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(append([]string{root, "deploy"}, parts...)...)
}

// TestAlertRulesWithPromtool runs promtool's own checks: the rules parse,
// and the unit tests of rules_test.yml (series in, alerts out) pass.
func TestAlertRulesWithPromtool(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Skip("no promtool on PATH: apt-get install prometheus (CI does) to check deploy/prometheus/rules.yml")
	}
	dir := deployFile(t, "prometheus")
	for _, args := range [][]string{{"check", "rules", "rules.yml"}, {"test", "rules", "rules_test.yml"}} {
		cmd := exec.Command(promtool, args...)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}

// dashboardExprs returns every PromQL expression of the Grafana dashboard
// (panel targets and the variables' label_values metrics), with the
// variables filled in as Grafana would for job "rlnode" and every instance.
func dashboardExprs(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(deployFile(t, "grafana", "rlnode.json"))
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
		Templating struct {
			List []struct {
				Name  string `json:"name"`
				Query any    `json:"query"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("rlnode.json: %v", err)
	}
	fill := strings.NewReplacer(`$job`, `rlnode`, `$instance`, `.*`, `$__rate_interval`, `20s`)
	var out []string
	for _, p := range d.Panels {
		if len(p.Targets) == 0 {
			t.Fatalf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			out = append(out, fill.Replace(tg.Expr))
		}
	}
	labelValues := regexp.MustCompile(`^label_values\((.*), *\w+\)$`)
	for _, v := range d.Templating.List {
		q, ok := v.Query.(map[string]any)
		if !ok {
			continue
		}
		m := labelValues.FindStringSubmatch(fmt.Sprint(q["query"]))
		if m == nil {
			t.Fatalf("variable %s: query %v is not label_values(SELECTOR, LABEL)", v.Name, q["query"])
		}
		out = append(out, fill.Replace(m[1]))
	}
	return out
}

type ruleFile struct {
	Groups []struct {
		Rules []struct {
			Alert string `yaml:"alert"`
			Expr  string `yaml:"expr"`
		} `yaml:"rules"`
	} `yaml:"groups"`
}

// promQuery runs an instant query and returns the number of series, or
// the error Prometheus gave (a parse error names the position).
func promQuery(base, expr string) (int, error) {
	resp, err := http.Get(base + "/api/v1/query?query=" + url.QueryEscape(expr))
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var r struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			Result json.RawMessage `json:"result"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		return 0, err
	}
	if r.Status != "success" {
		return 0, fmt.Errorf("%s", r.Error)
	}
	var series []any
	if err := json.Unmarshal(r.Data.Result, &series); err != nil {
		// A scalar or string result.
		return 1, nil
	}
	return len(series), nil
}

// TestDashboardAndRulesOnRealPrometheus scrapes a loaded three-node
// cluster with Debian's prometheus, loads the alert rules into it, and
// evaluates every expression of the dashboard (each must return series)
// and of the rules (each must parse, evaluate without error, and every
// rlnode metric it names must have series), so a renamed metric fails.
func TestDashboardAndRulesOnRealPrometheus(t *testing.T) {
	prom, err := exec.LookPath("prometheus")
	if err != nil {
		t.Skip("no prometheus on PATH: apt-get install prometheus (CI does) to check deploy/grafana and deploy/prometheus against a real one")
	}
	nodes := proctest.StartCluster(t, rlnodeBin, 3, "--cluster-token", polToken)
	leader, _ := followerOf(t, nodes)
	mustStatus(t, mustDo(t, "PUT", leader.URL()+"/v1/policies/login", polToken, `{"algorithm": "fixed_window", "limits": [{"limit": 3, "window": "1h"}]}`), 200, "set login")
	loadCluster(t, nodes)
	mustStatus(t, mustDo(t, "POST", leader.URL()+"/v1/cluster/snapshot", polToken, ""), 200, "snapshot")

	dir := t.TempDir()
	rules, err := os.ReadFile(deployFile(t, "prometheus", "rules.yml"))
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "rules.yml"), rules, 0o644)
	var targets []string
	for _, n := range nodes {
		targets = append(targets, fmt.Sprintf("%q", n.HTTPAddr))
	}
	cfg := fmt.Sprintf("global: {scrape_interval: 1s, evaluation_interval: 1s}\nrule_files: [rules.yml]\nscrape_configs:\n  - job_name: rlnode\n    static_configs: [{targets: [%s]}]\n", strings.Join(targets, ", "))
	os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(cfg), 0o644)
	addr := proctest.FreeAddr(t)
	p := proctest.Start(t, prom, "prometheus", "--config.file="+filepath.Join(dir, "prometheus.yml"),
		"--storage.tsdb.path="+filepath.Join(dir, "data"), "--web.listen-address="+addr)
	defer p.Kill()
	base := "http://" + addr

	exprs := dashboardExprs(t)
	proctest.Poll(t, 2*time.Minute, func() error {
		var empty []string
		for _, e := range exprs {
			if n, err := promQuery(base, e); err != nil {
				return fmt.Errorf("dashboard query %s: %v", e, err)
			} else if n == 0 {
				empty = append(empty, e)
			}
		}
		if len(empty) > 0 {
			return fmt.Errorf("%d dashboard queries return no data yet:\n  %s", len(empty), strings.Join(empty, "\n  "))
		}
		return nil
	})

	var rf ruleFile
	if err := yaml.Unmarshal(rules, &rf); err != nil {
		t.Fatal(err)
	}
	metricName := regexp.MustCompile(`\brlnode_[A-Za-z0-9_]+`)
	for _, g := range rf.Groups {
		for _, r := range g.Rules {
			if _, err := promQuery(base, r.Expr); err != nil {
				t.Fatalf("alert %s: %v\n%s", r.Alert, err, r.Expr)
			}
			for _, m := range metricName.FindAllString(r.Expr, -1) {
				if n, err := promQuery(base, m); err != nil || n == 0 {
					t.Fatalf("alert %s names %s, which has no series (%v): renamed or gone?", r.Alert, m, err)
				}
			}
		}
	}
	// Prometheus evaluated each rule itself, without error.
	proctest.Poll(t, time.Minute, func() error {
		resp, err := http.Get(base + "/api/v1/rules")
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		var r struct {
			Data struct {
				Groups []struct {
					Rules []struct {
						Name           string `json:"name"`
						Health         string `json:"health"`
						LastError      string `json:"lastError"`
						LastEvaluation string `json:"lastEvaluation"`
					} `json:"rules"`
				} `json:"groups"`
			} `json:"data"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
			return err
		}
		seen := 0
		for _, g := range r.Data.Groups {
			for _, rule := range g.Rules {
				if rule.Health != "ok" || rule.LastError != "" || strings.HasPrefix(rule.LastEvaluation, "0001") {
					return fmt.Errorf("rule %s: health %q, last error %q, evaluated %s", rule.Name, rule.Health, rule.LastError, rule.LastEvaluation)
				}
				seen++
			}
		}
		if seen != 6 {
			return fmt.Errorf("prometheus loaded %d rules, want 6", seen)
		}
		return nil
	})
}
