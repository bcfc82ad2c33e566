package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"testing"
	"time"
)

// startRedis runs a throwaway redis-server on a free loopback port.
func startRedis(t *testing.T) string {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Skip("redis-server not installed (apt-get install redis-server)")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	cmd := exec.Command(bin, "--port", fmt.Sprint(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", t.TempDir())
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	return fmt.Sprintf("127.0.0.1:%d", port)
}

func TestFixedWindowThroughHTTP(t *testing.T) {
	lim := NewLimiter(startRedis(t), 3, time.Minute, 4)
	defer lim.Close()
	deadline := time.Now().Add(10 * time.Second)
	for lim.Ping(context.Background()) != nil {
		if time.Now().After(deadline) {
			t.Fatal("redis did not start")
		}
		time.Sleep(50 * time.Millisecond)
	}
	srv := httptest.NewServer(Handler(lim))
	defer srv.Close()
	for i, want := range []int{200, 200, 200, 429, 429} {
		resp, err := http.Get(srv.URL + "/check/alice")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Fatalf("hit %d: %d, want %d", i+1, resp.StatusCode, want)
		}
		if want == 429 && resp.Header.Get("Retry-After") == "" {
			t.Fatalf("hit %d: 429 without Retry-After", i+1)
		}
	}
	if resp, _ := http.Get(srv.URL + "/check/bob"); resp.StatusCode != 200 {
		t.Fatalf("another key: %d", resp.StatusCode)
	}
}
