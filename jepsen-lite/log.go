package main

import (
	"fmt"
	"io"
	"strings"
	"sync"
	"time"
)

// logger prints the runner's own progress lines, stamped with the time
// since the run started so they line up with history.jsonl and the
// picture. Workers, the nemesis and the process waiters all log through one
// logger, hence the mutex.
type logger struct {
	mu sync.Mutex
	w  io.Writer
	t0 time.Time
}

func newLogger(w io.Writer, t0 time.Time) *logger { return &logger{w: w, t0: t0} }

// setOutput swaps the writer, e.g. to tee into the run's log file once the
// out dir exists.
func (l *logger) setOutput(w io.Writer) {
	l.mu.Lock()
	l.w = w
	l.mu.Unlock()
}

func (l *logger) Printf(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	l.mu.Lock()
	defer l.mu.Unlock()
	fmt.Fprintf(l.w, "[%+8.3fs] %s\n", time.Since(l.t0).Seconds(), strings.TrimRight(msg, "\n"))
}

// Loudf is for things a reader must not miss (skipped partitions, crashes,
// extended durations).
func (l *logger) Loudf(format string, args ...any) {
	l.Printf("!!! "+format, args...)
}
