// Package testprog is for tests that need a program the Go toolchain does
// not bring (nginx, Caddy, Docker, chromium, Prometheus). Where it is
// missing the test is skipped, and the skip does not go unnoticed: go test
// hides everything a passing package prints, so the package's TestMain
// (Main) writes one summary line straight to the terminal and to stdout
// (which `go test -json` and -v pass on, as .ci/run's progress printer
// does), and every skip is also recorded in a file that `go run
// ./internal/testprog/skipped` (run by .ci/run after the tests) sums up.
// Say is the same way out for long tests' progress lines.
package testprog

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
)

// Dir holds the records of skipped tests, one file per test process.
func Dir() string { return filepath.Join(os.TempDir(), "rlnode-test-skips") }

// Skip is one test skipped for want of a program.
type Skip struct {
	Test, Program, Install string
}

var (
	mu    sync.Mutex
	skips []Skip
)

// Need returns the path of prog, or skips the test, recording that prog is
// missing and how to install it (e.g. "apt-get install nginx").
func Need(t testing.TB, prog, install string) string {
	t.Helper()
	path, err := exec.LookPath(prog)
	if err != nil {
		Missing(t, prog, install, fmt.Sprintf("%s is not installed", prog))
	}
	return path
}

// Missing skips the test for want of what (a program, or something it
// needs, such as a running Docker daemon), recording it.
func Missing(t testing.TB, what, install, why string) {
	t.Helper()
	s := Skip{Test: t.Name(), Program: what, Install: install}
	mu.Lock()
	skips = append(skips, s)
	mu.Unlock()
	record(s)
	t.Skipf("%s (%s); skipping", why, install)
}

func record(s Skip) {
	if err := os.MkdirAll(Dir(), 0o755); err != nil {
		return
	}
	f, err := os.OpenFile(filepath.Join(Dir(), fmt.Sprintf("%d.txt", os.Getpid())), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return
	}
	defer f.Close()
	fmt.Fprintf(f, "%s\t%s\t%s\n", s.Test, s.Program, s.Install)
}

// Main runs the package's tests and then, if any were skipped for a
// missing program, prints the summary line on the terminal (or, without
// one, on stderr, which go test shows with -v or on failure). Use it as
// `func TestMain(m *testing.M) { os.Exit(testprog.Main(m)) }`, or call
// Report after m.Run in a TestMain that does more.
func Main(m *testing.M) int {
	code := m.Run()
	Report()
	return code
}

// Report prints this process's summary line, if it skipped anything: on
// the terminal, and on stdout for `go test -json` or -v (and so CI's log).
func Report() { report(toTerminal, os.Stdout) }

// report is Report with its two ways out given, so this package's own
// tests check it without writing a made-up skip on the terminal of
// whoever runs them.
func report(terminal func(string) bool, stdout io.Writer) {
	mu.Lock()
	line := Summary(skips)
	mu.Unlock()
	if line == "" {
		return
	}
	terminal(line)
	fmt.Fprintln(stdout, line)
}

// EnvProgress names a file that Say appends to as well, for a runner
// without a terminal that shows it while go test still holds the package's
// output (.ci/run's progress printer follows it).
const EnvProgress = "RLNODE_TEST_PROGRESS"

// Say prints a progress line of a long test where a person sees it while
// the test runs: the terminal, the file $RLNODE_TEST_PROGRESS names, else
// stdout (shown by go test -v and -json).
func Say(line string) {
	shown := toTerminal(line)
	if path := os.Getenv(EnvProgress); path != "" {
		if f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644); err == nil {
			fmt.Fprintln(f, line)
			f.Close()
			shown = true
		}
	}
	if !shown {
		fmt.Println(line)
	}
}

// toTerminal writes line to the controlling terminal, if there is one.
func toTerminal(line string) bool {
	tty, err := os.OpenFile("/dev/tty", os.O_WRONLY, 0)
	if err != nil {
		return false
	}
	defer tty.Close()
	_, err = fmt.Fprintln(tty, line)
	return err == nil
}

// Summary is one line naming each missing program, the tests it cost and
// how to install it; "" when nothing was skipped.
func Summary(skips []Skip) string {
	if len(skips) == 0 {
		return ""
	}
	byProg := map[string][]string{}
	install := map[string]string{}
	seen := map[Skip]bool{}
	for _, s := range skips {
		if seen[s] {
			continue // the same test in another run
		}
		seen[s] = true
		byProg[s.Program] = append(byProg[s.Program], s.Test)
		install[s.Program] = s.Install
	}
	progs := make([]string, 0, len(byProg))
	for p := range byProg {
		progs = append(progs, p)
	}
	sort.Strings(progs)
	parts := make([]string, len(progs))
	for i, p := range progs {
		parts[i] = fmt.Sprintf("%s (%s: %s)", p, strings.Join(byProg[p], ", "), install[p])
	}
	return fmt.Sprintf("SKIPPED %d tests, programs missing: %s", len(seen), strings.Join(parts, "; "))
}

// ReadAll reads every recorded skip in Dir.
func ReadAll() ([]Skip, error) {
	files, err := filepath.Glob(filepath.Join(Dir(), "*.txt"))
	if err != nil {
		return nil, err
	}
	var out []Skip
	for _, name := range files {
		f, err := os.Open(name)
		if err != nil {
			return nil, err
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if p := strings.SplitN(sc.Text(), "\t", 3); len(p) == 3 {
				out = append(out, Skip{Test: p[0], Program: p[1], Install: p[2]})
			}
		}
		f.Close()
	}
	return out, nil
}
