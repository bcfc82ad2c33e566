package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rlnode/rlnode/cmd/rlnode/internal/proctest"
)

// TestPolicyApplyAddsUnlessPruned: apply adds and changes only; what the
// file lacks (default included) goes only with --prune, in one log entry,
// and the dry runs print the same diff without changing anything.
func TestPolicyApplyAddsUnlessPruned(t *testing.T) {
	nodes := proctest.StartCluster(t, rlnodeBin, 3, "--cluster-token", polToken)
	_, f := followerOf(t, nodes)
	file := filepath.Join(t.TempDir(), "policies.yaml")
	os.WriteFile(file, []byte("policies:\n  - name: login\n    algorithm: fixed_window\n    limits: [{limit: 3, window: 1h}]\n"), 0o644)

	out := policyCLI(t, f, "apply", "-f", file, "--dry-run")
	if !strings.Contains(out, "would be added login") || !strings.Contains(out, "kept default (not in the file; --prune removes it)") || strings.Contains(out, "removed") {
		t.Fatalf("dry run without --prune printed:\n%s", out)
	}
	out = policyCLI(t, f, "apply", "-f", file)
	if !strings.Contains(out, "added login") || !strings.Contains(out, "kept default") {
		t.Fatalf("apply printed:\n%s", out)
	}
	mustStatus(t, proctest.MustGet(t, f.URL()+"/check/u1"), 200, "default after apply without --prune")

	table := policyCLI(t, f, "list")
	out = policyCLI(t, f, "apply", "-f", file, "--prune", "--dry-run")
	if !strings.Contains(out, "would be removed default") || !strings.Contains(out, "answer 404 unknown_policy") {
		t.Fatalf("dry run with --prune printed:\n%s", out)
	}
	if after := policyCLI(t, f, "list"); after != table {
		t.Fatalf("a dry run changed the table:\n%s\nnow\n%s", table, after)
	}

	os.WriteFile(file, []byte("policies:\n  - name: login\n    algorithm: fixed_window\n    limits: [{limit: 5, window: 1h}]\n  - name: api\n    algorithm: token_bucket\n    limits: [{limit: 5, window: 1s}]\n"), 0o644)
	out = policyCLI(t, f, "apply", "-f", file, "--prune")
	for _, want := range []string{"added api", "changed login", "removed default"} {
		if !strings.Contains(out, want) {
			t.Fatalf("apply --prune printed:\n%s\nwant %q", out, want)
		}
	}
	// (That it is one log entry is TestReplaceTableInOneEntry's, in fsm:
	// other entries, a promotion or a node's address, may land meanwhile.)
	mustStatus(t, proctest.MustGet(t, f.URL()+"/check/u1"), 404, "default after apply --prune")
	mustStatus(t, proctest.MustGet(t, f.URL()+"/check/api/u1"), 200, "api after apply --prune")

	// The API's whole-table replace refuses an empty table and writes nothing.
	r, err := f.Do("PUT", "/v1/policies", polToken, map[string]any{"policies": []any{}})
	if err != nil {
		t.Fatal(err)
	}
	mustStatus(t, r, 400, "PUT /v1/policies with no policies")
	if r, _ := f.Do("PUT", "/v1/policies", "", map[string]any{"policies": []any{}}); r.Status != 401 {
		t.Fatalf("PUT /v1/policies without the token: %d %s", r.Status, r.Raw)
	}
	if out := policyCLI(t, f, "list"); !strings.Contains(out, "login") || !strings.Contains(out, "api") {
		t.Fatalf("the table after the refused replace:\n%s", out)
	}
}
