package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	grpcstatus "google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/rlnode/rlnode/cmd/rlnode/internal/proctest"
)

const boundsToken = "bounds-test-token"

// quotaNode starts one node serving RLQS with the token and a leased
// policy "edge" of limit per hour.
func quotaNode(t *testing.T, limit int, extra ...string) (*proctest.Node, string) {
	t.Helper()
	addr := proctest.FreeAddr(t)
	n := proctest.StartNode(t, rlnodeBin, "n1", append([]string{"--cluster-token", boundsToken, "--rlqs-addr", addr}, extra...)...)
	proctest.WaitReady(t, n, 15*time.Second)
	body := map[string]any{"name": "edge", "algorithm": "fixed_window", "consistency": "leased",
		"limits": []map[string]any{{"limit": limit, "window": "1h"}}}
	if r, err := n.Do("PUT", "/v1/policies/edge", boundsToken, body); err != nil || (r.Status != 200 && r.Status != 201) {
		t.Fatalf("PUT policy: %v %d %s", err, r.Status, r.Raw)
	}
	return n, addr
}

func quotaConn(t *testing.T, addr string) *grpc.ClientConn {
	t.Helper()
	c, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// quotaUsage is a report of buckets {tenant: prefix-i}, i < n, each with
// requests allowed over elapsed.
func quotaUsage(prefix string, n int, requests uint64, elapsed time.Duration) *rlqsv3.RateLimitQuotaUsageReports {
	rep := &rlqsv3.RateLimitQuotaUsageReports{Domain: "edge"}
	for i := 0; i < n; i++ {
		rep.BucketQuotaUsages = append(rep.BucketQuotaUsages, &rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{
			BucketId:           &rlqsv3.BucketId{Bucket: map[string]string{"tenant": prefix + "-" + strconv.Itoa(i)}},
			TimeElapsed:        durationpb.New(elapsed),
			NumRequestsAllowed: requests,
		})
	}
	return rep
}

// quotaStream opens a stream with the token, reports one bucket and
// reports whether the server admitted it: an admitted stream is answered
// with an assignment, a refused one ends with an error. ctx bounds it.
func quotaStream(ctx context.Context, c *grpc.ClientConn, name string) (rlqsv3.RateLimitQuotaService_StreamRateLimitQuotasClient, error) {
	ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+boundsToken)
	st, err := rlqsv3.NewRateLimitQuotaServiceClient(c).StreamRateLimitQuotas(ctx)
	if err != nil {
		return nil, err
	}
	// A stream the server refused fails Send with io.EOF; Recv has why.
	_ = st.Send(quotaUsage(name, 1, 1, 0))
	if _, err := st.Recv(); err != nil {
		return nil, err
	}
	return st, nil
}

// The quota port's stream bounds through the binary: a connection holds
// --grpc-max-streams-per-conn streams (the next one waits in the client),
// a credential (here the cluster token) --grpc-max-streams-per-credential
// (the next one is refused with RESOURCE_EXHAUSTED and counted in
// /metrics), a closed stream frees its place, and a stream that sends no
// report for --rlqs-stream-idle is closed.
func TestRLQSStreamBounds(t *testing.T) {
	proctest.Long(t)
	n, addr := quotaNode(t, 1_000_000, "--grpc-max-streams-per-conn", "4", "--grpc-max-streams-per-credential", "6",
		"--rlqs-stream-idle", "3s")
	c1, c2 := quotaConn(t, addr), quotaConn(t, addr)
	open := func(c *grpc.ClientConn, name string, wait time.Duration) (context.CancelFunc, error) {
		ctx, cancel := context.WithCancel(context.Background())
		t.Cleanup(cancel)
		wctx, wcancel := context.WithTimeout(ctx, wait)
		defer wcancel()
		errc := make(chan error, 1)
		go func() { _, err := quotaStream(ctx, c, name); errc <- err }()
		select {
		case err := <-errc:
			return cancel, err
		case <-wctx.Done():
			cancel()
			return cancel, wctx.Err()
		}
	}
	var first []context.CancelFunc
	for i := 0; i < 4; i++ {
		cancel, err := open(c1, fmt.Sprintf("a%d", i), 10*time.Second)
		if err != nil {
			t.Fatalf("stream %d of connection 1: %v", i+1, err)
		}
		first = append(first, cancel)
	}
	if _, err := open(c1, "a4", 2*time.Second); err == nil {
		t.Fatal("a 5th stream on a connection capped at 4 was admitted")
	} else {
		t.Logf("5th stream on one connection: %v (queued by HTTP/2)", err)
	}
	for i := 0; i < 2; i++ {
		if _, err := open(c2, fmt.Sprintf("b%d", i), 10*time.Second); err != nil {
			t.Fatalf("stream %d of connection 2: %v", i+1, err)
		}
	}
	if _, err := open(c2, "b2", 10*time.Second); grpcstatus.Code(err) != codes.ResourceExhausted {
		t.Fatalf("the credential's 7th stream (cap 6): %v, want RESOURCE_EXHAUSTED", err)
	}
	r, err := n.Do("GET", "/metrics", boundsToken, nil)
	if err != nil || !strings.Contains(string(r.Raw), `rlnode_grpc_streams_refused_total{budget="credential",port="rlqs"} 1`) {
		t.Fatalf("metrics lack the refused stream: %v\n%s", err, grepLines(string(r.Raw), "rlnode_grpc_streams_refused"))
	}
	if !strings.Contains(string(r.Raw), `rlnode_grpc_streams_open{port="rlqs"} 6`) || !strings.Contains(string(r.Raw), "rlnode_rlqs_buckets 6") {
		t.Fatalf("metrics: want 6 streams open and 6 buckets\n%s", grepLines(string(r.Raw), "rlnode_"))
	}
	for _, cancel := range first {
		cancel()
	}
	proctest.Poll(t, 10*time.Second, func() error {
		_, err := open(c2, "b3", 5*time.Second)
		return err
	})

	// An idle stream (no report after the first) is closed.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	proctest.Poll(t, 10*time.Second, func() error {
		st, err := quotaStream(ctx, c1, "idle")
		if err != nil {
			return err
		}
		start := time.Now()
		for {
			if _, err = st.Recv(); err != nil {
				break
			}
		}
		if grpcstatus.Code(err) != codes.DeadlineExceeded {
			t.Fatalf("idle stream ended with %v, want DEADLINE_EXCEEDED", err)
		}
		t.Logf("idle stream closed after %s: %v", time.Since(start).Round(time.Millisecond), err)
		return nil
	})
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// commitIndex reads the node's Raft commit index from /v1/status.
func commitIndex(t *testing.T, n *proctest.Node) int64 {
	t.Helper()
	r, err := n.Do("GET", "/v1/status", boundsToken, nil)
	if err != nil || r.Status != 200 {
		t.Fatalf("status: %v %d %s", err, r.Status, r.Raw)
	}
	return r.Num("commitIndex")
}

// The grant storm of issue 25: 8 streams x 1024 buckets, one report
// claiming one request per bucket, then a report every second showing no
// use (as Envoy reports idle buckets). Each bucket gets its assignment,
// and the node writes at most a few hundred log entries in the next 15 s
// (it wrote one grant entry per bucket and renewed every bucket about
// every 1.3 s until it went cold: tens of thousands).
func TestRLQSReportCostsFewLogEntries(t *testing.T) {
	proctest.Long(t)
	const streams, buckets = 8, 1024
	n, addr := quotaNode(t, 1_000_000_000)
	c := quotaConn(t, addr)
	ctx, cancel := context.WithCancel(metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+boundsToken))
	defer cancel()
	var sts []rlqsv3.RateLimitQuotaService_StreamRateLimitQuotasClient
	for i := 0; i < streams; i++ {
		st, err := rlqsv3.NewRateLimitQuotaServiceClient(c).StreamRateLimitQuotas(ctx)
		if err != nil {
			t.Fatal(err)
		}
		sts = append(sts, st)
	}
	var assigned [streams]atomic.Int64
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	for i, st := range sts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				resp, err := st.Recv()
				if err != nil {
					return
				}
				for _, a := range resp.GetBucketAction() {
					if a.GetQuotaAssignmentAction().GetRateLimitStrategy().GetTokenBucket() != nil {
						assigned[i].Add(1)
					}
				}
			}
		}()
	}
	before, rssBefore := commitIndex(t, n), rss(t, n.Pid())
	for i, st := range sts {
		if err := st.Send(quotaUsage(fmt.Sprintf("s%d", i), buckets, 1, 0)); err != nil {
			t.Fatal(err)
		}
	}
	start := time.Now()
	for time.Since(start) < 15*time.Second {
		time.Sleep(time.Second)
		for i, st := range sts {
			if err := st.Send(quotaUsage(fmt.Sprintf("s%d", i), buckets, 0, time.Second)); err != nil {
				t.Fatal(err)
			}
		}
	}
	entries := commitIndex(t, n) - before
	t.Logf("RSS %d MB before the report, %d MB with %d streams x %d buckets", rssBefore>>20, rss(t, n.Pid())>>20, streams, buckets)
	for i := range assigned {
		if a := assigned[i].Load(); a < buckets {
			t.Errorf("stream %d got %d assignments for %d buckets", i, a, buckets)
		}
	}
	t.Logf("one report of %d streams x %d buckets: %d log entries in 15 s", streams, buckets, entries)
	if entries > 300 {
		t.Fatalf("%d log entries in 15 s after one report of %d x %d buckets; want at most a few hundred", entries, streams, buckets)
	}
}

// rss is a process's resident set in bytes.
func rss(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Skipf("no /proc: %v", err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			return kb << 10
		}
	}
	t.Fatal("no VmRSS in /proc status")
	return 0
}

// floodStreams opens n RLQS streams on one HTTP/2 connection, as an
// attacker would: raw frames, ignoring the server's
// MAX_CONCURRENT_STREAMS. It returns how many the server refused
// (RST_STREAM) and a function that closes the connection.
func floodStreams(t *testing.T, addr string, n int) (refused func() int64, closeConn func()) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	var wmu sync.Mutex
	fr := http2.NewFramer(conn, conn)
	fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	if _, err := conn.Write([]byte(http2.ClientPreface)); err != nil {
		t.Fatal(err)
	}
	if err := fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1 << 20}); err != nil {
		t.Fatal(err)
	}
	var rst atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			f, err := fr.ReadFrame()
			if err != nil {
				return
			}
			switch f := f.(type) {
			case *http2.SettingsFrame:
				if !f.IsAck() {
					wmu.Lock()
					fr.WriteSettingsAck()
					wmu.Unlock()
				}
			case *http2.PingFrame:
				if !f.IsAck() {
					wmu.Lock()
					fr.WritePing(true, f.Data)
					wmu.Unlock()
				}
			case *http2.RSTStreamFrame:
				rst.Add(1)
			}
		}
	}()
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	for i := 0; i < n; i++ {
		hb.Reset()
		for _, f := range [][2]string{{":method", "POST"}, {":scheme", "http"}, {":authority", addr},
			{":path", "/" + rlqsv3.RateLimitQuotaService_ServiceDesc.ServiceName + "/StreamRateLimitQuotas"},
			{"content-type", "application/grpc"}, {"te", "trailers"}} {
			enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
		}
		wmu.Lock()
		err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: uint32(2*i + 1), BlockFragment: hb.Bytes(), EndHeaders: true})
		wmu.Unlock()
		if err != nil {
			t.Fatalf("stream %d: %v", i, err)
		}
	}
	return rst.Load, func() { conn.Close(); <-done }
}

// The memory attack of issue 25: 20,000 streams opened on one connection
// of a node with default settings (no token: loopback) grow it by at
// most 150 MB, and once the connection closes its resident memory is
// back within that of where it started (it grew by 766 MB, never given
// back, before the streams were bounded). Memory, not speed: a safety
// property.
func TestRLQSStreamFloodMemory(t *testing.T) {
	proctest.Long(t)
	const streams = 20_000
	const bound = 150 << 20
	addr := proctest.FreeAddr(t)
	n := proctest.StartNode(t, rlnodeBin, "n1", "--rlqs-addr", addr)
	proctest.WaitReady(t, n, 15*time.Second)
	time.Sleep(time.Second)
	before := rss(t, n.Pid())
	refused, closeConn := floodStreams(t, addr, streams)
	time.Sleep(3 * time.Second)
	during := rss(t, n.Pid())
	closeConn()
	time.Sleep(5 * time.Second)
	after := rss(t, n.Pid())
	t.Logf("RSS before %d MB, with %d streams requested on one connection %d MB (%d refused), after it closed %d MB",
		before>>20, streams, during>>20, refused(), after>>20)
	if during-before > bound || after-before > bound {
		t.Fatalf("the node grew by %d MB with the streams open and %d MB after; want at most %d MB", (during-before)>>20, (after-before)>>20, bound>>20)
	}
	proctest.WaitReady(t, n, 10*time.Second)
}
