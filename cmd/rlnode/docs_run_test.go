package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rlnode/rlnode/cmd/rlnode/internal/proctest"
)

// TestBudgetsPageRuns pastes docs/budgets.md's shell blocks, in order, into
// one shell against a real node, as a new user following the page would
// (the README's cluster addresses, localhost:8081 to 8083, stand for the
// node's). Every command must exit 0; a curl must answer the status the
// page shows for it (`# 201 ...` on the next line) or, showing none, below
// 400; output the page shows under a command (lines without "...") must be
// in what it printed. A block the page marks `<!-- docs-run: skip WHY -->`
// is not run (the one that needs a million permits).
func TestBudgetsPageRuns(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "docs", "budgets.md"))
	if err != nil {
		t.Fatal(err)
	}
	steps := shellSteps(string(b))
	if len(steps) < 20 {
		t.Fatalf("found only %d commands on the page; is the extraction broken?", len(steps))
	}
	for _, s := range steps {
		if strings.Contains(s.cmd, ":8080") {
			t.Errorf("budgets.md: %q uses :8080; the page follows the README's cluster (localhost:8081 to 8083, $%s)", s.cmd, envAddr)
		}
	}
	if t.Failed() {
		return
	}
	n := proctest.StartNode(t, rlnodeBin, "n1")
	proctest.WaitReady(t, n, 20*time.Second)
	proctest.Poll(t, 20*time.Second, func() error { // the leader's table is readable
		if _, _, code := proctest.Run(t, rlnodeBin, nil, "policy", "list", "--addr", n.URL()); code != 0 {
			return fmt.Errorf("policy list exit %d", code)
		}
		return nil
	})

	out := runShellSteps(t, steps, n.HTTPAddr)
	for i, s := range steps {
		got, ok := out[i]
		if !ok {
			t.Fatalf("budgets.md: the shell stopped before %q", s.cmd)
		}
		if got.rc != 0 {
			t.Errorf("budgets.md: %q exits %d:\n%s", s.cmd, got.rc, got.out)
			continue
		}
		if got.status != 0 {
			if want := s.status; (want != 0 && got.status != want) || (want == 0 && got.status >= 400) {
				t.Errorf("budgets.md: %q answers %d (the page shows %d; 0: any below 400):\n%s", s.cmd, got.status, want, got.out)
			}
		}
		for _, line := range s.shows {
			if !strings.Contains(squash(got.out), squash(line)) {
				t.Errorf("budgets.md: %q shows %q on the page, but printed:\n%s", s.cmd, line, got.out)
			}
		}
	}
}

// shellStep is one command a page shows, with what it shows under it.
type shellStep struct {
	cmd    string
	status int      // the HTTP status a `# NNN ...` line right under it shows; 0 for none
	shows  []string // output lines shown under it (those without "...")
}

var (
	commandStart = regexp.MustCompile(`^(rlnode|curl|export|for) |^[A-Z_]+=`)
	shownStatus  = regexp.MustCompile(`^# ([1-5]\d\d) `)
	skipMark     = regexp.MustCompile(`^<!-- docs-run: skip .+-->$`)
)

// shellSteps are the commands in a page's sh and unlabelled code blocks
// (not go, yaml, json), continuation lines joined, each with the status
// and output the page shows under it.
func shellSteps(page string) []shellStep {
	var steps []shellStep
	fence, run, skipNext, cont := false, false, false, ""
	for _, line := range strings.Split(page, "\n") {
		trimmed := strings.TrimSpace(line)
		if strings.HasPrefix(trimmed, "```") {
			if !fence {
				lang := strings.TrimPrefix(trimmed, "```")
				run = (lang == "" || lang == "sh") && !skipNext
				skipNext = false
			}
			fence, cont = !fence, ""
			continue
		}
		if !fence {
			if skipMark.MatchString(trimmed) {
				skipNext = true
			} else if trimmed != "" {
				skipNext = false
			}
			continue
		}
		if !run {
			continue
		}
		line = cont + strings.TrimPrefix(trimmed, "$ ")
		cont = ""
		if strings.HasSuffix(line, "\\") {
			cont = strings.TrimSuffix(line, "\\") + " "
			continue
		}
		if strings.Count(line, "'")%2 == 1 {
			cont = line + "\n" // a quoted argument (JSON) goes on
			continue
		}
		switch {
		case line == "":
		case commandStart.MatchString(line):
			steps = append(steps, shellStep{cmd: line})
		case len(steps) == 0:
		case shownStatus.MatchString(line):
			last := &steps[len(steps)-1]
			if last.status == 0 && len(last.shows) == 0 {
				last.status, _ = strconv.Atoi(shownStatus.FindStringSubmatch(line)[1])
			}
		case strings.HasPrefix(line, "#"), strings.Contains(line, "..."):
		default:
			steps[len(steps)-1].shows = append(steps[len(steps)-1].shows, line)
		}
	}
	return steps
}

// stepOutput is what one step printed (stdout and stderr), its exit
// status and, for a curl, the HTTP status it got.
type stepOutput struct {
	out    string
	rc     int
	status int
}

var readmeAddr = regexp.MustCompile(`(localhost|127\.0\.0\.1):808[0-3]\b`)

// runShellSteps runs the steps in one bash, so what one sets (exports,
// P=$(...)) the next sees, with rlnode on PATH and the README cluster's
// addresses pointing at addr.
func runShellSteps(t *testing.T, steps []shellStep, addr string) map[int]stepOutput {
	t.Helper()
	var script strings.Builder
	for i, s := range steps {
		cmd := readmeAddr.ReplaceAllString(s.cmd, addr)
		if strings.HasPrefix(cmd, "curl ") && !strings.Contains(cmd, "|") {
			cmd = "curl -w '\\n::status %{http_code}\\n' " + strings.TrimPrefix(cmd, "curl ")
		}
		fmt.Fprintf(&script, "echo '::begin %d'\n%s\necho \"::end %d $?\"\n", i, cmd, i)
	}
	sh := exec.Command("bash", "-c", script.String())
	sh.Dir = t.TempDir()
	sh.Env = append(os.Environ(), "PATH="+filepath.Dir(rlnodeBin)+":"+os.Getenv("PATH"), envAddr+"=")
	raw, err := sh.CombinedOutput()
	if err != nil {
		t.Logf("bash: %v", err)
	}
	out := map[int]stepOutput{}
	cur, text := -1, []string{}
	for _, line := range strings.Split(string(raw), "\n") {
		var i, rc, st int
		switch {
		case sscan(line, "::begin %d", &i):
			cur, text = i, nil
		case sscan(line, "::status %d", &st):
			o := out[cur]
			o.status = st
			out[cur] = o
		case sscan(line, "::end %d %d", &i, &rc):
			o := out[i]
			o.out, o.rc = strings.Join(text, "\n"), rc
			out[i] = o
		default:
			text = append(text, line)
		}
	}
	return out
}

func sscan(line, format string, args ...any) bool {
	n, err := fmt.Sscanf(line, format, args...)
	return err == nil && n == len(args)
}

// squash folds runs of spaces and tabs into one space.
func squash(s string) string { return strings.Join(strings.Fields(s), " ") }
