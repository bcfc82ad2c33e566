package main

// Attacks on the node's ports, each reproduced on a real process from
// loopback the way an outsider would run it, and each bounded by a row of
// docs/security.md ("Every port's bounds"). Memory is measured from
// /proc/PID/status; every test failed on the code before its bound.

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	_ "google.golang.org/grpc/encoding/gzip" // the attacker's compressor
	"google.golang.org/grpc/metadata"
	grpcstatus "google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/rlnode/rlnode/cmd/rlnode/internal/proctest"
)

const attackToken = "attack-test-token"

// attackGrowthBound is how much a node may grow under any one attack on a
// port: the bar (the attacks below grew it by 0.4 to 2 GB).
const attackGrowthBound = 150 << 20

// grpcAttackNode starts one node with the token serving both gRPC ports
// and returns it with the rate limit and quota service addresses.
func grpcAttackNode(t *testing.T, extra ...string) (n *proctest.Node, rlsAddr, rlqsAddr string) {
	t.Helper()
	rlsAddr, rlqsAddr = proctest.FreeAddr(t), proctest.FreeAddr(t)
	n = proctest.StartNode(t, rlnodeBin, "n1", append([]string{"--cluster-token", attackToken,
		"--grpc-addr", rlsAddr, "--rlqs-addr", rlqsAddr}, extra...)...)
	proctest.WaitReady(t, n, 15*time.Second)
	time.Sleep(time.Second) // let start-up garbage settle before the baseline
	return n, rlsAddr, rlqsAddr
}

// growth runs attack while sampling the node's resident memory every
// 50 ms, and returns the peak minus the resident memory before it.
func growth(t *testing.T, n *proctest.Node, attack func()) int64 {
	t.Helper()
	before := rss(t, n.Pid())
	var peak atomic.Int64
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			if r := rss(t, n.Pid()); r > peak.Load() {
				peak.Store(r)
			}
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	}()
	attack()
	close(stop)
	<-sampled
	return peak.Load() - before
}

// tinyDescriptors is a ShouldRateLimit request of about size bytes made
// of one-entry descriptors: a few bytes each on the wire, a few hundred
// of heap each once decoded.
func tinyDescriptors(size int) *rlsv3.RateLimitRequest {
	req := &rlsv3.RateLimitRequest{Domain: "edge"}
	one := &commonv3.RateLimitDescriptor{Entries: []*commonv3.RateLimitDescriptor_Entry{{Key: "k", Value: "v"}}}
	per := proto.Size(one) + 2
	for range size / per {
		req.Descriptors = append(req.Descriptors, one)
	}
	return req
}

// attackConn is a gRPC client that sends messages of any size.
func attackConn(t *testing.T, addr string) *grpc.ClientConn {
	t.Helper()
	c, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallSendMsgSize(64<<20)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// concurrentCalls sends req calls times at once on c with opts and
// returns the status codes of the answers.
func concurrentCalls(ctx context.Context, c *grpc.ClientConn, req *rlsv3.RateLimitRequest, calls int, opts ...grpc.CallOption) []codes.Code {
	got := make([]codes.Code, calls)
	var wg sync.WaitGroup
	for i := range calls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			_, err := rlsv3.NewRateLimitServiceClient(c).ShouldRateLimit(cctx, req, opts...)
			got[i] = grpcstatus.Code(err)
		}()
	}
	wg.Wait()
	return got
}

// Issue 35, item 1: ten concurrent 4 MB ShouldRateLimit requests of tiny
// descriptors, sent without the token, grew a node from 30 MB to 2 GB: the
// request was decoded before the interceptor that checks the token ran.
// Now the token is checked when the stream starts, before a byte of the
// message is read.
func TestAttackRLSHugeRequestsWithoutToken(t *testing.T) {
	proctest.Long(t)
	n, rlsAddr, _ := grpcAttackNode(t)
	req := tinyDescriptors(4<<20 - 1<<10)
	c := attackConn(t, rlsAddr)
	var got []codes.Code
	grew := growth(t, n, func() {
		for range 3 {
			got = concurrentCalls(context.Background(), c, req, 10)
		}
	})
	t.Logf("3 x 10 concurrent 4 MB requests without a token: the node grew by %d MB; answers %v", grew>>20, got)
	for _, code := range got {
		if code != codes.Unauthenticated {
			t.Fatalf("answers %v; want every one Unauthenticated", got)
		}
	}
	if grew > attackGrowthBound {
		t.Fatalf("the node grew by %d MB; want under %d MB", grew>>20, attackGrowthBound>>20)
	}
}

// A caller with the token is bounded too: a gzip-compressed request that
// expands to 4 MB (a few KB on the wire) is refused by its decompressed
// size, on both ports, before it is decoded.
func TestAttackGRPCCompressedHugeMessages(t *testing.T) {
	proctest.Long(t)
	n, rlsAddr, rlqsAddr := grpcAttackNode(t)
	ctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+attackToken)
	req := tinyDescriptors(4<<20 - 1<<10)
	c := attackConn(t, rlsAddr)
	var got []codes.Code
	grew := growth(t, n, func() {
		for range 3 {
			got = concurrentCalls(ctx, c, req, 10, grpc.UseCompressor("gzip"))
		}
	})
	t.Logf("3 x 10 concurrent gzip requests expanding to 4 MB, with the token: the node grew by %d MB; answers %v", grew>>20, got)
	for _, code := range got {
		if code != codes.ResourceExhausted {
			t.Fatalf("answers %v; want every one ResourceExhausted", got)
		}
	}
	if grew > attackGrowthBound {
		t.Fatalf("the node grew by %d MB; want under %d MB", grew>>20, attackGrowthBound>>20)
	}

	// The quota stream: a usage report expanding to 4 MB ends the stream.
	qc := attackConn(t, rlqsAddr)
	st, err := rlqsv3.NewRateLimitQuotaServiceClient(qc).StreamRateLimitQuotas(ctx, grpc.UseCompressor("gzip"))
	if err != nil {
		t.Fatal(err)
	}
	_ = st.Send(quotaUsage(strings.Repeat("x", 4000), 1000, 1, time.Second))
	if _, err := st.Recv(); grpcstatus.Code(err) != codes.ResourceExhausted {
		t.Fatalf("a 4 MB usage report: %v; want ResourceExhausted", err)
	}
}

// rawH2 is an HTTP/2 connection driven frame by frame, as an attacker
// would: it answers the server's SETTINGS and PINGs and records which
// streams the server ended (RST_STREAM, or trailers with END_STREAM).
type rawH2 struct {
	conn  net.Conn
	fr    *http2.Framer
	wmu   sync.Mutex
	ended sync.Map // stream id -> true
	gone  chan struct{}
}

func dialRawH2(t *testing.T, addr string) *rawH2 {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	h := &rawH2{conn: conn, fr: http2.NewFramer(conn, conn), gone: make(chan struct{})}
	h.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	if _, err := conn.Write([]byte(http2.ClientPreface)); err != nil {
		t.Fatal(err)
	}
	if err := h.fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1 << 20}); err != nil {
		t.Fatal(err)
	}
	// Acknowledge the server's SETTINGS before anything else is sent: an
	// acknowledgement in the middle of a header block would be a protocol
	// error, and the server would close the connection.
	conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	for {
		f, err := h.fr.ReadFrame()
		if err != nil {
			t.Fatalf("reading the server's SETTINGS: %v", err)
		}
		if sf, ok := f.(*http2.SettingsFrame); ok && !sf.IsAck() {
			if err := h.fr.WriteSettingsAck(); err != nil {
				t.Fatal(err)
			}
			break
		}
	}
	conn.SetReadDeadline(time.Time{})
	go h.read()
	t.Cleanup(h.close)
	return h
}

func (h *rawH2) read() {
	defer close(h.gone)
	for {
		f, err := h.fr.ReadFrame()
		if err != nil {
			return
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				h.write(func() error { return h.fr.WriteSettingsAck() })
			}
		case *http2.PingFrame:
			if !f.IsAck() {
				h.write(func() error { return h.fr.WritePing(true, f.Data) })
			}
		case *http2.RSTStreamFrame:
			h.ended.Store(f.StreamID, true)
		case *http2.MetaHeadersFrame:
			if f.StreamEnded() {
				h.ended.Store(f.StreamID, true)
			}
		}
	}
}

func (h *rawH2) write(f func() error) error {
	h.wmu.Lock()
	defer h.wmu.Unlock()
	return f()
}

func (h *rawH2) close() { h.conn.Close(); <-h.gone }

// closed reports whether the server closed the connection.
func (h *rawH2) closed() bool {
	select {
	case <-h.gone:
		return true
	default:
		return false
	}
}

// headerBlock encodes a gRPC call's request headers for path, plus
// extra fields.
func headerBlock(authority, path string, extra ...hpack.HeaderField) []byte {
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	for _, f := range [][2]string{{":method", "POST"}, {":scheme", "http"}, {":authority", authority},
		{":path", path}, {"content-type", "application/grpc"}, {"te", "trailers"}} {
		enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	for _, f := range extra {
		enc.WriteField(f)
	}
	return hb.Bytes()
}

// halfSend opens streams on h, each declaring a gRPC message of declared
// bytes and sending only half of it.
func (h *rawH2) halfSend(t *testing.T, authority, path string, streams, declared int, extra ...hpack.HeaderField) {
	t.Helper()
	block := headerBlock(authority, path, extra...)
	half := make([]byte, declared/2)
	for i := range streams {
		id := uint32(2*i + 1)
		err := h.write(func() error {
			if err := h.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: block, EndHeaders: true}); err != nil {
				return err
			}
			prefix := make([]byte, 5)
			binary.BigEndian.PutUint32(prefix[1:], uint32(declared))
			return h.fr.WriteData(id, false, prefix)
		})
		for sent := 0; err == nil && sent < len(half); sent += 16 << 10 {
			chunk := half[sent:min(sent+16<<10, len(half))]
			err = h.write(func() error { return h.fr.WriteData(id, false, chunk) })
		}
		if err != nil {
			if h.closed() {
				return // the server may close a connection that ignores its limits
			}
			t.Fatalf("stream %d: %v", i, err)
		}
	}
}

const shouldRateLimitPath = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"

// Half-sent messages: 100 streams each declaring a 4 MB request and
// sending half of it held 439 MB until the client left. Without the
// token the streams are refused before their messages are read; with it
// a declared size above the port's message limit is refused at once, and
// a message under the limit that never arrives whole is ended after
// --grpc-message-timeout.
func TestAttackGRPCHalfSentMessages(t *testing.T) {
	proctest.Long(t)
	n, rlsAddr, _ := grpcAttackNode(t, "--grpc-message-timeout", "2s")
	token := hpack.HeaderField{Name: "authorization", Value: "Bearer " + attackToken}
	var conns []*rawH2
	grew := growth(t, n, func() {
		for _, extra := range [][]hpack.HeaderField{nil, {token}} {
			h := dialRawH2(t, rlsAddr)
			conns = append(conns, h)
			h.halfSend(t, rlsAddr, shouldRateLimitPath, 100, 4<<20, extra...)
		}
		time.Sleep(3 * time.Second)
	})
	t.Logf("2 x 100 streams, each half of a 4 MB message (without and with the token): the node grew by %d MB", grew>>20)
	if grew > attackGrowthBound {
		t.Fatalf("the node grew by %d MB; want under %d MB", grew>>20, attackGrowthBound>>20)
	}

	// With the token, a message under the limit that stops half way is
	// ended by the server, not held until the client leaves.
	h := dialRawH2(t, rlsAddr)
	h.halfSend(t, rlsAddr, shouldRateLimitPath, 10, 16<<10, token)
	proctest.Poll(t, 15*time.Second, func() error {
		ended := 0
		for i := range 10 {
			if _, ok := h.ended.Load(uint32(2*i + 1)); ok {
				ended++
			}
		}
		if ended < 10 && !h.closed() {
			return fmt.Errorf("%d of 10 half-sent streams ended by the server", ended)
		}
		return nil
	})
}

// Unfinished header blocks: 20 connections each sending a 15 MB header
// block (HEADERS then CONTINUATION frames) that never ends held 625 MB,
// on either gRPC port: gRPC's own header list limit is 16 MB. The ports
// now take at most the HTTP port's 64 KiB of headers.
func TestAttackGRPCUnfinishedHeaderBlocks(t *testing.T) {
	proctest.Long(t)
	n, rlsAddr, rlqsAddr := grpcAttackNode(t)
	grew := growth(t, n, func() {
		var wg sync.WaitGroup
		for i := range 20 {
			addr := rlsAddr
			if i%2 == 1 {
				addr = rlqsAddr
			}
			h := dialRawH2(t, addr)
			wg.Add(1)
			go func() {
				defer wg.Done()
				sendUnfinishedHeaderBlock(h, addr, 15<<20)
			}()
		}
		wg.Wait()
		time.Sleep(2 * time.Second)
	})
	t.Logf("20 connections, each an unfinished 15 MB header block: the node grew by %d MB", grew>>20)
	if grew > attackGrowthBound {
		t.Fatalf("the node grew by %d MB; want under %d MB", grew>>20, attackGrowthBound>>20)
	}
}

// sendUnfinishedHeaderBlock sends a request's headers followed by size
// bytes of header fields in CONTINUATION frames, without END_HEADERS; it
// stops early when the server closes the connection.
func sendUnfinishedHeaderBlock(h *rawH2, authority string, size int) {
	block := headerBlock(authority, shouldRateLimitPath)
	if h.write(func() error {
		return h.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: block, EndHeaders: false})
	}) != nil {
		return
	}
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	value := strings.Repeat("v", 15<<10)
	for sent, i := 0, 0; sent < size && !h.closed(); i++ {
		hb.Reset()
		enc.WriteField(hpack.HeaderField{Name: fmt.Sprintf("x-pad-%d", i), Value: value, Sensitive: true})
		frag := hb.Bytes()
		if h.write(func() error { return h.fr.WriteContinuation(1, false, frag) }) != nil {
			return
		}
		sent += len(frag)
	}
}

// slowBodies opens conns connections to addr, each sending a request for
// path with a body of size bytes but all the last byte of it, and holds
// them open until the test ends.
func slowBodies(t *testing.T, addr, method, path string, conns, size int) {
	t.Helper()
	body := bytes.Repeat([]byte(" "), size-1)
	var wg sync.WaitGroup
	for range conns {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		wg.Add(1)
		go func() {
			defer wg.Done()
			fmt.Fprintf(c, "%s %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", method, path, addr, size)
			c.Write(body) // the server may stop reading and answer early
		}()
	}
	wg.Wait()
}

// Issue 35, item 7: 1,000 connections each sending all but the last byte
// of a 1 MiB body took a node to 1.6-2 GB: every JSON route read up to
// 1 MiB. Here 300 connections (half to a public route, half to the policy
// table's, which reads the most) hold such bodies: the public route reads
// at most its cap and answers 413, the table's bodies stop at the port's
// budget (16 MiB here) and are answered 503 busy, and an ordinary check
// is answered meanwhile.
func TestAttackHTTPSlowBodies(t *testing.T) {
	proctest.Long(t)
	const budget = 16 << 20
	n := proctest.StartNode(t, rlnodeBin, "n1", "--http-body-budget", fmt.Sprint(budget))
	proctest.WaitReady(t, n, 15*time.Second)
	time.Sleep(time.Second)
	var during int
	grew := growth(t, n, func() {
		slowBodies(t, n.HTTPAddr, "POST", "/v1/check", 150, 1<<20)
		slowBodies(t, n.HTTPAddr, "PUT", "/v1/policies", 150, 1<<20)
		time.Sleep(2 * time.Second)
		r, err := proctest.DoRaw("POST", n.URL()+"/v1/check", "", []byte(`{"hits":[{"client":"alice"}]}`))
		if err != nil {
			t.Errorf("a check while the bodies are held: %v", err)
		}
		during = r.Status
	})
	t.Logf("300 connections holding all but the last byte of a 1 MiB body: the node grew by %d MB; a check meanwhile answered %d", grew>>20, during)
	if during != 200 {
		t.Errorf("a check while the bodies are held answered %d; want 200", during)
	}
	if bound := int64(budget + 100<<20); grew > bound {
		t.Fatalf("the node grew by %d MB; want under %d MB (the body budget and 100 MB)", grew>>20, bound>>20)
	}
}

// A body over a route's cap is refused naming the cap; a table write
// past the port's budget is 503 busy, with Retry-After.
func TestHTTPBodyCapsAnswer(t *testing.T) {
	proctest.Long(t)
	n := proctest.StartNode(t, rlnodeBin, "n1", "--http-body-budget", fmt.Sprint(4<<20))
	proctest.WaitReady(t, n, 15*time.Second)
	big := []byte(`{"client":"` + strings.Repeat("a", 20<<10) + `"}`)
	r, err := proctest.DoRaw("POST", n.URL()+"/v1/permits", "", big)
	if err != nil || r.Status != 413 || !strings.Contains(string(r.Raw), "over 8192 bytes, the most this endpoint reads") {
		t.Fatalf("a 20 KiB permit body: %v %d %s; want 413 naming the 8192-byte cap", err, r.Status, r.Raw)
	}
	// The budget (4 MiB) is spent by one held table body; the next is busy.
	// The held body counts as the node reads it, which a busy machine
	// (CI runs two test processes of long tests) may take seconds to do.
	slowBodies(t, n.HTTPAddr, "PUT", "/v1/policies", 1, 4<<20)
	proctest.Poll(t, 30*time.Second, func() error {
		r, err := proctest.DoRaw("PUT", n.URL()+"/v1/policies", "", bytes.Repeat([]byte(" "), 1<<20))
		if err != nil || r.Status != 503 || !strings.Contains(string(r.Raw), `"busy"`) {
			return fmt.Errorf("a table write with the budget spent: %v %d %s; want 503 busy", err, r.Status, r.Raw)
		}
		return nil
	})
}
