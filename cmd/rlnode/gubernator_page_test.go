package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/rlnode/rlnode/cmd/rlnode/internal/proctest"
	"github.com/rlnode/rlnode/internal/testprog"
)

// The page's addresses, swapped for free loopback ports so the test can
// run beside others; everything else runs as the page gives it.
const (
	pageGubAddr  = "127.0.0.1:1051"
	pageHTTPAddr = "127.0.0.1:8080"
)

// pageBlock returns the first fenced block of lang on the page that
// contains marker.
func pageBlock(t *testing.T, page, lang, marker string) string {
	t.Helper()
	for _, m := range regexp.MustCompile("(?s)```"+lang+"\n(.*?)```").FindAllStringSubmatch(page, -1) {
		if strings.Contains(m[1], marker) {
			return m[1]
		}
	}
	t.Fatalf("docs/migrating-from-gubernator.md: no %s block with %q", lang, marker)
	return ""
}

// TestMigratingFromGubernatorPage follows docs/migrating-from-gubernator.md
// as a gubernator user would: starts rlnode with the page's serve flags
// (its data dir and ports swapped for the test's), runs the page's Go
// snippet unchanged inside a program built against gubernator's own
// client (v2.13.0, from the Go module proxy), then the page's curl
// command, and checks both got gubernator's answer from one exact count:
// 99 left, then 98.
func TestMigratingFromGubernatorPage(t *testing.T) {
	proctest.Long(t)
	raw, err := os.ReadFile(filepath.Join("..", "..", "docs", "migrating-from-gubernator.md"))
	if err != nil {
		t.Fatal(err)
	}
	page := string(raw)

	serve := pageBlock(t, page, "sh", "rlnode serve")
	fields := strings.Fields(serve[strings.Index(serve, "rlnode serve")+len("rlnode serve"):])
	gubAddr := proctest.FreeAddr(t)
	var flags []string
	for i := 0; i < len(fields); i++ {
		switch {
		case fields[i] == "--data-dir": // the harness gives each node its own
			i++
		case fields[i] == pageGubAddr:
			flags = append(flags, gubAddr)
		default:
			flags = append(flags, fields[i])
		}
	}
	if !strings.Contains(strings.Join(flags, " "), "--gubernator-addr "+gubAddr) {
		t.Fatalf("the page's serve command %q does not serve gubernator's port on %s", serve, pageGubAddr)
	}
	node := proctest.StartNode(t, rlnodeBin, "n1", flags...)
	proctest.WaitReady(t, node, 15*time.Second)

	snippet := pageBlock(t, page, "go", "DialV1Server")
	if !strings.Contains(snippet, pageGubAddr) {
		t.Fatalf("the page's Go snippet does not dial %s", pageGubAddr)
	}
	src := gubClientModule(t, t.TempDir())
	prog := "package main\n\nimport (\n\t\"context\"\n\t\"fmt\"\n\t\"os\"\n\n\tguber \"github.com/gubernator-io/gubernator/v2\"\n)\n\n" +
		"func main() {\n\tctx := context.Background()\n" + strings.ReplaceAll(snippet, pageGubAddr, gubAddr) +
		"\tif err != nil {\n\t\tfmt.Println(err)\n\t\tos.Exit(1)\n\t}\n\tfmt.Println(resp.Responses[0].Status, resp.Responses[0].Remaining, resp.Responses[0].Error)\n}\n"
	if err := os.MkdirAll(filepath.Join(src, "page"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(src, "page", "main.go"), []byte(prog), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "page")
	if skip := buildInGubModule(src, bin, "./page"); skip != "" {
		if strings.Contains(skip, "page/main.go") {
			t.Fatalf("the page's Go snippet does not build against gubernator %s:\n%s", gubernatorVersion, skip)
		}
		testprog.Missing(t, "gubernator "+gubernatorVersion, "needs the Go module proxy (GOPROXY) reachable", skip)
	}
	first := time.Now()
	out, err := exec.Command(bin).CombinedOutput()
	if got := strings.TrimSpace(string(out)); err != nil || got != "UNDER_LIMIT 99" {
		t.Fatalf("the page's Go snippet: %v, printed %q; want UNDER_LIMIT 99 (100 a second, one hit)", err, got)
	}

	curl := pageBlock(t, page, "sh", "curl")
	if !strings.Contains(curl, pageHTTPAddr) {
		t.Fatalf("the page's curl command does not name %s", pageHTTPAddr)
	}
	if _, err := exec.LookPath("curl"); err != nil {
		testprog.Missing(t, "curl", "apt-get install curl", err.Error())
	}
	out, err = exec.Command("bash", "-ec", strings.ReplaceAll(curl, pageHTTPAddr, node.HTTPAddr)).Output()
	if err != nil {
		t.Fatalf("the page's curl command: %v", err)
	}
	var answer struct {
		Responses []map[string]any `json:"responses"`
	}
	if err := json.Unmarshal(out, &answer); err != nil || len(answer.Responses) != 1 {
		t.Fatalf("the page's curl command printed %s (%v); want one answer", out, err)
	}
	// The Go call and the curl one hit the same key: 98 left within its
	// second, 99 again in the next one (a slow machine).
	want := "98"
	if time.Since(first) > 900*time.Millisecond {
		want = "99"
	}
	if r := answer.Responses[0]; r["status"] != "UNDER_LIMIT" || r["remaining"] != want || r["limit"] != "100" {
		t.Fatalf("the page's curl command answered %s; want UNDER_LIMIT, limit \"100\", remaining %q", out, want)
	}
}
