package rlqs_test

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/rlnode/rlnode/cluster/clustertest"
	"github.com/rlnode/rlnode/httpapi/apitest"
	"github.com/rlnode/rlnode/policy"
	"github.com/rlnode/rlnode/rlqs"
	"github.com/rlnode/rlnode/rlqs/rlqstest"
)

func report(prefix string, n int) *rlqsv3.RateLimitQuotaUsageReports {
	rep := &rlqsv3.RateLimitQuotaUsageReports{Domain: "api"}
	for i := 0; i < n; i++ {
		rep.BucketQuotaUsages = append(rep.BucketQuotaUsages, &rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{
			BucketId: &rlqsv3.BucketId{Bucket: map[string]string{"tenant": fmt.Sprintf("%s-%d", prefix, i)}}, NumRequestsAllowed: 1})
	}
	return rep
}

// A credential's streams (here one source address: no token, no TLS)
// hold at most CredentialBuckets buckets between them; the rest of a
// report gets no assignment, and a closed stream gives its buckets back.
func TestBucketBudgetPerCredential(t *testing.T) {
	cl := apitest.Start(t, 1, clustertest.Options{Policies: []policy.Policy{leased("api", 1_000_000, time.Hour)}})
	node := cl.Leader(10 * time.Second)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := rlqs.New(rlqs.Config{Node: node.Node, NodeBuckets: 100, CredentialBuckets: 6})
	go srv.Serve(ln)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Stop(ctx)
	})
	conn, err := grpc.NewClient("passthrough:///"+ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	stream := func(ctx context.Context) rlqsv3.RateLimitQuotaService_StreamRateLimitQuotasClient {
		st, err := rlqsv3.NewRateLimitQuotaServiceClient(conn).StreamRateLimitQuotas(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	ctx1, close1 := context.WithCancel(context.Background())
	defer close1()
	s1 := stream(ctx1)
	if err := s1.Send(report("a", 8)); err != nil {
		t.Fatal(err)
	}
	resp, err := s1.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if n := len(resp.GetBucketAction()); n != 6 {
		t.Fatalf("%d of 8 buckets assigned, want the credential's 6", n)
	}
	s2 := stream(context.Background())
	if err := s2.Send(report("b", 2)); err != nil {
		t.Fatal(err)
	}
	clustertest.Poll(t, 5*time.Second, func() error {
		if n := srv.OpenStreams(); n != 2 {
			return fmt.Errorf("%d streams open", n)
		}
		return nil
	})
	time.Sleep(500 * time.Millisecond) // the report was refused: nothing to wait for
	if n := srv.Buckets(); n != 6 {
		t.Fatalf("%d buckets held after a second stream of the same credential reported 2; want 6", n)
	}
	close1()
	clustertest.Poll(t, 5*time.Second, func() error {
		if n := srv.Buckets(); n != 0 {
			return fmt.Errorf("%d buckets still held after their stream closed", n)
		}
		return nil
	})
	if err := s2.Send(report("b", 2)); err != nil {
		t.Fatal(err)
	}
	if resp, err := s2.Recv(); err != nil || len(resp.GetBucketAction()) != 2 {
		t.Fatalf("second stream after the first closed: %v %v, want 2 assignments", resp, err)
	}
}

// Renewals follow demand: while an Envoy's reports show requests in a
// bucket its assignment is renewed; once they show none, renewals stop
// (two reporting intervals, here at least one lease, after the last
// request) instead of going on until the bucket is cold; the next
// request's report gets an assignment again.
func TestRenewalsOnlyWithDemand(t *testing.T) {
	cl := apitest.Start(t, 1, clustertest.Options{Policies: []policy.Policy{leased("api", 1_000_000, time.Hour)}})
	node := cl.Leader(10 * time.Second)
	addr := serve(t, node, rlqs.Config{Lease: time.Second, Transit: 20 * time.Millisecond})
	e := startEnvoy(t, rlqstest.Config{Addr: addr, Domain: "api", Interval: 200 * time.Millisecond, AllowWhenExpired: true})
	bucket := map[string]string{"tenant": "acme"}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	e.Allow(bucket)
	if err := e.WaitAssigned(ctx, bucket); err != nil {
		t.Fatal(err)
	}
	for end := time.Now().Add(2 * time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		e.Allow(bucket)
	}
	busy, _, _ := e.Counts()
	if busy < 2 {
		t.Fatalf("%d assignments in 2 s of demand with a 1 s lease: want renewals", busy)
	}
	// Silence: the reports go on, showing no use.
	time.Sleep(2 * time.Second)
	settled, _, _ := e.Counts()
	time.Sleep(3 * time.Second)
	idle, abandons, _ := e.Counts()
	if idle != settled || abandons != 0 {
		t.Fatalf("assignments went from %d to %d (abandons %d) over 3 s of reports showing no use: want no renewals", settled, idle, abandons)
	}
	t.Logf("assignments: %d while busy, %d two seconds after the last request, %d three seconds later", busy, settled, idle)
	e.Allow(bucket)
	clustertest.Poll(t, 10*time.Second, func() error {
		if a, _, _ := e.Counts(); a == idle {
			return fmt.Errorf("no assignment after demand came back")
		}
		return nil
	})
}
