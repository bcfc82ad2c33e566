package httpapi

import (
	"os/exec"
	"path/filepath"
	"testing"
)

// TestStatusPageScriptsParse checks the status page's scripts with
// Node's parser where Node is installed: a syntax error (a merge that
// declared a name twice, say) leaves /ui blank, and only the Chromium
// tests, which run with the long process tests, would see it otherwise.
func TestStatusPageScriptsParse(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node not on PATH: the Chromium tests (cmd/rlnode) still load the page")
	}
	scripts, err := filepath.Glob(filepath.Join("ui", "*.js"))
	if err != nil || len(scripts) == 0 {
		t.Fatalf("no scripts under ui/: %v", err)
	}
	for _, s := range scripts {
		if out, err := exec.Command(node, "--check", s).CombinedOutput(); err != nil {
			t.Errorf("%s does not parse: %v\n%s", s, err, out)
		}
	}
}
