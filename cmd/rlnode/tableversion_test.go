package main

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/rlnode/rlnode/cmd/rlnode/internal/proctest"
)

// TestSyncsRacingAddsLoseNothing is issue 25's attack: whole-table writes
// (policy sync-envoy, which reads the table and writes all of it back)
// race plain adds of single policies sent through another node. Every add
// answered 2xx must be in the table afterwards: the syncs name the table
// version they were computed from, and the leader refuses a stale one
// (409 table_changed), so a sync computes its change again instead of
// deleting the add it did not see.
func TestSyncsRacingAddsLoseNothing(t *testing.T) {
	proctest.Long(t)
	nodes := proctest.StartCluster(t, rlnodeBin, 3, "--cluster-token", polToken)
	leader, syncVia := followerOf(t, nodes)
	var addVia *proctest.Node
	for _, n := range nodes {
		if n != leader && n != syncVia {
			addVia = n
		}
	}

	// The API: an ETag on reads, If-Match required on a whole-table write.
	r := mustStatus(t, tableDo(t, syncVia, "GET", "/v1/policies", nil, nil), 200, "GET /v1/policies")
	etag := r.Header.Get("ETag")
	if len(etag) < 10 || etag[0] != '"' {
		t.Fatalf("GET /v1/policies: ETag %q", etag)
	}
	table := map[string]any{"policies": []any{map[string]any{"name": "default", "algorithm": "fixed_window", "limits": []any{map[string]any{"limit": 10, "window": "1m"}}}}}
	if r := tableDo(t, syncVia, "PUT", "/v1/policies", nil, table); r.Status != http.StatusPreconditionRequired || !strings.Contains(string(r.Raw), "If-Match") {
		t.Fatalf("PUT /v1/policies without If-Match: %d %s; want 428", r.Status, r.Raw)
	}
	if r := tableDo(t, syncVia, "PUT", "/v1/policies", http.Header{"If-Match": {`"0123456789abcdef"`}}, table); r.Status != http.StatusConflict || r.JSON["code"] != "table_changed" {
		t.Errorf("PUT /v1/policies with a stale version: %d %s; want 409 table_changed", r.Status, r.Raw)
	}

	dir := t.TempDir()
	writeConfig := func(worker, i int) {
		body := fmt.Sprintf("domain: race%d\ndescriptors:\n  - {key: k, rate_limit: {unit: minute, requests_per_unit: %d}}\n", worker, i+1)
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("w%d", worker), "race.yaml"), []byte(body), 0o644); err != nil {
			t.Error(err)
		}
	}
	const syncWorkers, syncsEach, adds, addWorkers = 3, 10, 200, 4
	var wg sync.WaitGroup
	var mu sync.Mutex
	var syncFailures, retries int
	var added []string
	for w := range syncWorkers {
		if err := os.Mkdir(filepath.Join(dir, fmt.Sprintf("w%d", w)), 0o755); err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range syncsEach {
				writeConfig(w, i)
				out, stderr, code := proctest.Run(t, rlnodeBin, polEnv, "policy", "sync-envoy", "--addr", syncVia.URL(), "--dir", filepath.Join(dir, fmt.Sprintf("w%d", w)))
				mu.Lock()
				retries += strings.Count(stderr, "reading it again")
				if code != 0 {
					// Only a table that kept changing may stop a sync, and
					// then it says so.
					syncFailures++
					if !strings.Contains(stderr, "table_changed: the policy table changed under this command 5 times in a row") {
						t.Errorf("sync %d.%d: exit %d\n%s%s", w, i, code, out, stderr)
					}
				}
				mu.Unlock()
			}
		}()
	}
	next := make(chan int)
	go func() {
		defer close(next)
		for i := range adds {
			next <- i
		}
	}()
	for range addWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				name := fmt.Sprintf("add-%03d", i)
				r, err := addVia.Do("PUT", "/v1/policies/"+name, polToken, map[string]any{"algorithm": "fixed_window", "limits": []any{map[string]any{"limit": 5, "window": "1h"}}})
				if err == nil && r.Status/100 == 2 {
					mu.Lock()
					added = append(added, name)
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()

	r = mustStatus(t, tableDo(t, leader, "GET", "/v1/policies", nil, nil), 200, "GET /v1/policies after the race")
	var lost []string
	for _, name := range added {
		if !strings.Contains(string(r.Raw), `"name":"`+name+`"`) {
			lost = append(lost, name)
		}
	}
	t.Logf("%d adds answered 2xx, %d syncs failed, %d retries after table_changed", len(added), syncFailures, retries)
	if len(lost) > 0 {
		t.Fatalf("%d of %d adds answered 2xx are gone from the table: %v", len(lost), len(added), lost)
	}
	if len(added) < adds/2 || syncFailures > syncWorkers*syncsEach/2 {
		t.Fatalf("too little happened to tell: %d adds answered 2xx, %d of %d syncs failed", len(added), syncFailures, syncWorkers*syncsEach)
	}
}

// tableDo sends a request with the policy token and extra headers.
func tableDo(t *testing.T, n *proctest.Node, method, path string, hdr http.Header, body any) proctest.Response {
	t.Helper()
	r, err := proctest.DoHeader(method, n.URL()+path, polToken, hdr, body)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	return r
}
