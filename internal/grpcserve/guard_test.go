package grpcserve

import (
	"context"
	"errors"
	"net"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"
)

// start serves a guarded server with health and reflection on loopback.
func start(t *testing.T, cfg Config, ready func(time.Duration) error) (string, *Guard) {
	t.Helper()
	s, g := NewServer(cfg)
	RegisterIntrospection(s, ready, "test.Service")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go Serve(s, ln)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		Stop(ctx, s)
	})
	return ln.Addr().String(), g
}

// dial connects from the loopback address from (another source address
// is another credential on a port without token or TLS).
func dial(t *testing.T, addr, from string) *grpc.ClientConn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}
	c, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, a string) (net.Conn, error) { return d.DialContext(ctx, "tcp", a) }))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// open starts a reflection stream (it stays open until cancelled) and
// reports whether the guard admitted it: it sends one request and waits
// for the answer, which a refused stream never gets.
func open(t *testing.T, c *grpc.ClientConn, wait time.Duration) (cancel context.CancelFunc, err error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	nctx, ncancel := context.WithTimeout(ctx, wait)
	defer ncancel()
	type res struct {
		st  reflectionpb.ServerReflection_ServerReflectionInfoClient
		err error
	}
	got := make(chan res, 1)
	go func() {
		st, err := reflectionpb.NewServerReflectionClient(c).ServerReflectionInfo(ctx)
		if err == nil {
			// A refused stream fails Send with io.EOF; Recv has why.
			_ = st.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}})
		}
		if err == nil {
			_, err = st.Recv()
		}
		got <- res{st, err}
	}()
	select {
	case r := <-got:
		return cancel, r.err
	case <-nctx.Done():
		cancel()
		return cancel, nctx.Err()
	}
}

// The port's budgets: a connection holds at most StreamsPerConn streams
// (the next one waits in the client), a credential (here a source
// address) at most StreamsPerCredential, the port at most Streams; past
// the budgets a stream ends with RESOURCE_EXHAUSTED; closed streams give
// their place back.
func TestStreamBudgets(t *testing.T) {
	addr, g := start(t, Config{Limits: Limits{StreamsPerConn: 3, Streams: 6, StreamsPerCredential: 5}}, func(time.Duration) error { return nil })
	a1, a2 := dial(t, addr, "127.0.0.1"), dial(t, addr, "127.0.0.1")
	var held []context.CancelFunc
	for i := 0; i < 3; i++ {
		c, err := open(t, a1, 5*time.Second)
		if err != nil {
			t.Fatalf("stream %d on the first connection: %v", i+1, err)
		}
		held = append(held, c)
	}
	if _, err := open(t, a1, 500*time.Millisecond); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a 4th stream on a connection capped at 3: %v, want it to wait (deadline exceeded)", err)
	}
	for i := 0; i < 2; i++ {
		c, err := open(t, a2, 5*time.Second)
		if err != nil {
			t.Fatalf("stream %d on the second connection: %v", i+1, err)
		}
		held = append(held, c)
	}
	if _, err := open(t, a2, 5*time.Second); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("6th stream of one credential (cap 5): %v, want RESOURCE_EXHAUSTED", err)
	}
	b := dial(t, addr, "127.0.0.2")
	c, err := open(t, b, 5*time.Second)
	if err != nil {
		t.Fatalf("another address's first stream: %v", err)
	}
	held = append(held, c)
	if _, err := open(t, b, 5*time.Second); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("7th stream on a port capped at 6: %v, want RESOURCE_EXHAUSTED", err)
	}
	if n := g.Open(); n != 6 {
		t.Fatalf("%d streams open, want 6", n)
	}
	// Health checks pass even now.
	if h, err := healthpb.NewHealthClient(b).Check(context.Background(), &healthpb.HealthCheckRequest{}); err != nil || h.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health check with the budgets full: %v %v", h, err)
	}
	for _, c := range held {
		c()
	}
	deadline := time.Now().Add(5 * time.Second)
	for g.Open() != 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := g.Open(); n != 0 {
		t.Fatalf("%d streams still counted after every one closed", n)
	}
	if _, err := open(t, b, 5*time.Second); err != nil {
		t.Fatalf("a stream after the others closed: %v", err)
	}
}

// Reflection goes through the token check; health checks need no token
// and answer the node's readiness.
func TestIntrospectionGuard(t *testing.T) {
	var notReady atomic.Bool
	addr, _ := start(t, Config{Token: "s3cret"}, func(time.Duration) error {
		if notReady.Load() {
			return errors.New("no leader")
		}
		return nil
	})
	c := dial(t, addr, "127.0.0.1")
	if _, err := open(t, c, 5*time.Second); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("reflection without the token: %v, want UNAUTHENTICATED", err)
	}
	ctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer s3cret")
	st, err := reflectionpb.NewServerReflectionClient(c).ServerReflectionInfo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}); err != nil {
		t.Fatal(err)
	}
	r, err := st.Recv()
	if err != nil {
		t.Fatalf("reflection with the token: %v", err)
	}
	var names []string
	for _, s := range r.GetListServicesResponse().GetService() {
		names = append(names, s.GetName())
	}
	if !slices.Contains(names, "grpc.health.v1.Health") {
		t.Fatalf("reflection lists %v, want the health service", names)
	}
	hc := healthpb.NewHealthClient(c)
	for _, svc := range []string{"", "test.Service"} {
		if h, err := hc.Check(context.Background(), &healthpb.HealthCheckRequest{Service: svc}); err != nil || h.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			t.Fatalf("health %q without a token: %v %v, want SERVING", svc, h, err)
		}
	}
	if _, err := hc.Check(context.Background(), &healthpb.HealthCheckRequest{Service: "other"}); status.Code(err) != codes.NotFound {
		t.Fatalf("health of an unknown service: %v, want NOT_FOUND", err)
	}
	notReady.Store(true)
	if h, err := hc.Check(context.Background(), &healthpb.HealthCheckRequest{}); err != nil || h.GetStatus() != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Fatalf("health of a node that is not ready: %v %v, want NOT_SERVING", h, err)
	}
}

// The message clock covers calls whose client sends one message; a
// client-streaming call (reflection here, the quota stream in rlnode) may
// wait past MessageTimeout before it sends, and then is answered.
func TestMessageClockSparesClientStreams(t *testing.T) {
	addr, g := start(t, Config{Limits: Limits{MessageTimeout: 200 * time.Millisecond}}, func(time.Duration) error { return nil })
	c := dial(t, addr, "127.0.0.1")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := reflectionpb.NewServerReflectionClient(c).ServerReflectionInfo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(600 * time.Millisecond)
	if err := st.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Recv(); err != nil {
		t.Fatalf("a reflection stream that sent after the message timeout: %v", err)
	}
	if !g.clientStreams("/grpc.reflection.v1.ServerReflection/ServerReflectionInfo") || g.clientStreams("/grpc.health.v1.Health/Check") {
		t.Fatal("reflection should be client-streaming and health checks not")
	}
}
