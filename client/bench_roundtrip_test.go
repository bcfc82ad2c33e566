package client_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/rlnode/rlnode/client"
)

// The cost per remote Check of the client and a canned server in one
// process (no cluster), over HTTP/1.1 (what rlnode serves without TLS) and
// over h2c (HTTP/2 without TLS, which rlnode does not serve today), to see
// what HTTP/2 would change. cpu-us/op is the process's CPU per call, the
// figure that holds on a busy machine.
//
//	go test ./client -run '^$' -bench BenchmarkClientCheckRoundTrip -benchmem
func BenchmarkClientCheckRoundTrip(b *testing.B) {
	for _, proto := range []string{"http1", "h2c"} {
		b.Run(proto, func(b *testing.B) { benchRoundTrip(b, proto == "h2c") })
	}
}

func benchRoundTrip(b *testing.B, h2c bool) {
	const answer = `{"allowed":true,"remaining":99,"resetAt":1767225600000,"limit":100,"windowMs":60000,"policy":"api","client":"k","retryAfterMs":null,"limits":[{"limit":100,"windowMs":60000,"remaining":99,"resetAt":1767225600000,"windowStart":1767225540000}]}`
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Rlnode-Served-By", "n1")
		w.Write([]byte(answer))
	}))
	cfg := client.Config{Addrs: []string{""}, RefreshInterval: 1 << 62}
	if h2c {
		var p http.Protocols
		p.SetHTTP1(true)
		p.SetUnencryptedHTTP2(true)
		srv.Config.Protocols = &p
		var cp http.Protocols
		cp.SetUnencryptedHTTP2(true)
		cfg.Transport = &http.Transport{Protocols: &cp, MaxIdleConnsPerHost: 512}
	}
	srv.Start()
	defer srv.Close()
	cfg.Addrs[0] = strings.TrimPrefix(srv.URL, "http://")
	c, err := client.New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	if _, err := c.Check(ctx, "api", "k", 1); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.SetParallelism(32) // 64 callers on 2 cores
	cpu0 := selfCPU()
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := c.Check(ctx, "api", "k", 1); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(selfCPU()-cpu0)/float64(time.Microsecond)/float64(b.N), "cpu-us/op")
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "calls/s")
}
