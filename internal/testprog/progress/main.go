// Command progress prints `go test -json` as a person (or a CI log) wants
// to read it while it runs: one line per package as it finishes, the
// output of each failed test in full, the missing-programs summary lines
// (SKIPPED ...), the long tests' progress lines from the file
// $RLNODE_TEST_PROGRESS names (testprog.Say), a line every 30 s when
// nothing else was said, and at the end "N passed, N failed, N skipped".
// It exits 1 when a test or a build failed. .ci/run pipes the tests into
// it:
//
//	go test -json ./... | go run ./internal/testprog/progress
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/rlnode/rlnode/internal/testprog"
)

// event is one line of go test -json (cmd/test2json).
type event struct {
	Action     string
	Package    string
	ImportPath string // build-output, build-fail
	Test       string
	Elapsed    float64
	Output     string
}

type tally struct{ passed, failed, skipped int }

// printer turns events into lines on out.
type printer struct {
	out      io.Writer
	start    time.Time
	said     time.Time
	packages int
	failed   bool
	n        tally
	// outputs buffers each running test's (and package's) output until it
	// ends: printed only when it failed.
	outputs map[string][]string
}

func main() {
	quiet := flag.Duration("every", 30*time.Second, "say something at least this often")
	flag.Parse()
	p := &printer{out: os.Stdout, start: time.Now(), said: time.Now(), outputs: map[string][]string{}}
	events := make(chan event)
	go read(os.Stdin, events)
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	var follow *follower
	if path := os.Getenv(testprog.EnvProgress); path != "" {
		follow = &follower{path: path}
	}
	for {
		select {
		case e, ok := <-events:
			if !ok {
				follow.drain(p)
				p.finish()
				if p.failed {
					os.Exit(1)
				}
				return
			}
			p.handle(e)
		case <-tick.C:
			follow.drain(p)
			if time.Since(p.said) >= *quiet {
				p.say("... %s: %d packages done, %d tests passed so far", time.Since(p.start).Round(time.Second), p.packages, p.n.passed)
			}
		}
	}
}

// read decodes events until EOF; a line that is not an event (go vet's
// or the go command's own messages) is passed on as output.
func read(r io.Reader, events chan<- event) {
	defer close(events)
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var e event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil || e.Action == "" {
			e = event{Action: "raw", Output: sc.Text() + "\n"}
		}
		events <- e
	}
}

func (p *printer) say(format string, args ...any) {
	fmt.Fprintf(p.out, format+"\n", args...)
	p.said = time.Now()
}

func (p *printer) handle(e event) {
	key := e.Package + " " + e.Test
	switch e.Action {
	case "raw":
		p.say("%s", strings.TrimRight(e.Output, "\n"))
	case "build-output":
		p.say("%s", strings.TrimRight(e.Output, "\n"))
	case "build-fail":
		p.failed = true
	case "output":
		if e.Test == "" && strings.HasPrefix(e.Output, "SKIPPED ") {
			p.say("%s: %s", e.Package, strings.TrimRight(e.Output, "\n"))
		}
		p.outputs[key] = append(p.outputs[key], e.Output)
	case "pass", "fail", "skip":
		out := p.outputs[key]
		delete(p.outputs, key)
		if e.Test != "" {
			p.count(e.Action, strings.Contains(e.Test, "/"))
			if e.Action == "fail" {
				p.say("--- FAIL: %s %s (%.1fs)\n%s", e.Package, e.Test, e.Elapsed, strings.TrimRight(strings.Join(out, ""), "\n"))
			}
			return
		}
		p.packages++
		switch e.Action {
		case "pass":
			p.say("ok    %s\t%.1fs", e.Package, e.Elapsed)
		case "skip":
			p.say("--    %s\t(no tests)", e.Package)
		default:
			p.failed = true
			p.say("FAIL  %s\t%.1fs\n%s", e.Package, e.Elapsed, strings.TrimRight(strings.Join(out, ""), "\n"))
		}
	}
}

// count tallies top-level tests only, as go test's own summary does.
func (p *printer) count(action string, subtest bool) {
	if subtest {
		return
	}
	switch action {
	case "pass":
		p.n.passed++
	case "fail":
		p.n.failed++
		p.failed = true
	case "skip":
		p.n.skipped++
	}
}

func (p *printer) finish() {
	p.say("%d packages in %s", p.packages, time.Since(p.start).Round(time.Second))
	p.say("tests: %d passed, %d failed, %d skipped", p.n.passed, p.n.failed, p.n.skipped)
}

// follower prints the lines appended to the progress file.
type follower struct {
	path string
	off  int64
}

func (f *follower) drain(p *printer) {
	if f == nil {
		return
	}
	file, err := os.Open(f.path)
	if err != nil {
		return
	}
	defer file.Close()
	if _, err := file.Seek(f.off, io.SeekStart); err != nil {
		return
	}
	b, err := io.ReadAll(file)
	if err != nil {
		return
	}
	end := strings.LastIndexByte(string(b), '\n') + 1
	for _, line := range strings.Split(string(b[:end]), "\n") {
		if line != "" {
			p.say("%s", line)
		}
	}
	f.off += int64(end)
}
