package httpapi

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
)

// Every route that takes a body (POST, PUT) declares the most it reads.
func TestEveryBodyRouteDeclaresItsCap(t *testing.T) {
	a := New(Config{Token: "s3cret", DebugEndpoints: true, MetricsHandler: http.NotFoundHandler()})
	for _, r := range a.routes() {
		if (r.Method == http.MethodPost || r.Method == http.MethodPut) && r.MaxBody == 0 {
			t.Errorf("%s %s reads a body but declares no MaxBody", r.Method, r.Path)
		}
	}
}

// The budget counts what requests in flight have read past their first
// freeBodyBytes, refuses a read past it, and is whole again once they end.
func TestBodyBudget(t *testing.T) {
	b := &bodyBudget{limit: 64 << 10}
	req := func(size int) (*http.Request, func()) {
		r := httptest.NewRequest("PUT", "/", bytes.NewReader(make([]byte, size)))
		return r, b.wrap(r)
	}
	r1, release1 := req(40 << 10)
	if _, err := io.ReadAll(r1.Body); err != nil {
		t.Fatalf("a 40 KiB body under a 64 KiB budget: %v", err)
	}
	if got, want := b.held.Load(), int64(40<<10-freeBodyBytes); got != want {
		t.Fatalf("held %d after a 40 KiB body; want %d", got, want)
	}
	r2, release2 := req(40 << 10)
	if _, err := io.ReadAll(r2.Body); !errors.Is(err, errBodyBudget) {
		t.Fatalf("a second 40 KiB body: %v; want the budget spent", err)
	}
	r3, release3 := req(freeBodyBytes)
	if _, err := io.ReadAll(r3.Body); err != nil {
		t.Fatalf("a body within the free bytes with the budget spent: %v", err)
	}
	release1()
	release2()
	release3()
	if got := b.held.Load(); got != 0 {
		t.Fatalf("held %d after every request ended; want 0", got)
	}
	// Reads after the end (net/http draining the rest) count nothing.
	if _, err := io.ReadAll(r2.Body); err != nil || b.held.Load() != 0 {
		t.Fatalf("a read after release: %v, held %d", err, b.held.Load())
	}
}

// A streamed body (a restore) counts against no budget, whatever its
// size, once its handler says so.
func TestStreamedBodyIsNotBudgeted(t *testing.T) {
	b := &bodyBudget{limit: 64 << 10}
	r := httptest.NewRequest("POST", "/", bytes.NewReader(make([]byte, 1<<20)))
	release := b.wrap(r)
	defer release()
	s, ok := r.Body.(BodyStreamer)
	if !ok {
		t.Fatal("a budgeted body offers no StreamBody")
	}
	s.StreamBody()
	if n, err := io.Copy(io.Discard, r.Body); err != nil || n != 1<<20 || b.held.Load() != 0 {
		t.Fatalf("a streamed 1 MiB body under a 64 KiB budget: %d bytes, %v, held %d", n, err, b.held.Load())
	}
}
