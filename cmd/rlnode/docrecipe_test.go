package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/rlnode/rlnode/cmd/rlnode/internal/proctest"
)

// TestClientModuleRecipeBuilds runs the leases page's module recipe, as
// the page gives it, in a new module next to (a link to) this clone, and
// builds a program that imports the client. Offline: GOPROXY=off with the
// module cache this test's own build filled, so it needs no network and
// proves the recipe asks nothing of a proxy for rlnode itself (the old
// `go get` recipe did, and failed: the module is not published).
func TestClientModuleRecipeBuilds(t *testing.T) {
	proctest.Long(t)
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("go not on PATH")
	}
	page, err := os.ReadFile(filepath.Join("..", "..", "docs", "leases-in-your-application.md"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("(?s)```sh\n(go mod edit -require github.com/rlnode/rlnode[^`]*?)```").FindSubmatch(page)
	if m == nil {
		t.Fatal("docs/leases-in-your-application.md: no sh block starting `go mod edit -require github.com/rlnode/rlnode`")
	}
	recipe := string(m[1])
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.Symlink(root, filepath.Join(dir, "rlnode")); err != nil {
		t.Fatal(err)
	}
	app := filepath.Join(dir, "app")
	if err := os.Mkdir(app, 0o755); err != nil {
		t.Fatal(err)
	}
	prog := "package main\n\nimport (\n\t\"fmt\"\n\n\t\"github.com/rlnode/rlnode/client\"\n)\n\nfunc main() { fmt.Println(client.Config{}.Addrs == nil) }\n"
	if err := os.WriteFile(filepath.Join(app, "main.go"), []byte(prog), 0o644); err != nil {
		t.Fatal(err)
	}
	env := append(os.Environ(), "GOPROXY=off", "GOSUMDB=off", "GOFLAGS=-mod=mod", "GOWORK=off")
	run := func(name string, args ...string) {
		t.Helper()
		cmd := exec.Command(name, args...)
		cmd.Dir, cmd.Env = app, env
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
		}
	}
	run(goBin, "mod", "init", "example.com/app")
	run("bash", "-ec", recipe)
	run(goBin, "build", "-o", filepath.Join(dir, "app.bin"), ".")
}
