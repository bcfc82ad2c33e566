package main

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	grpcstatus "google.golang.org/grpc/status"

	"github.com/rlnode/rlnode/cmd/rlnode/internal/proctest"
)

// Issue 39: the CLI pointed at the Raft port printed "EOF", at a gRPC
// port `malformed HTTP response "\x00\x00\f\x04..."`, and a gRPC client
// pointed at the HTTP port waited. Each port now says what it is and where
// the HTTP API (or the gRPC service) is: on a node without a token (where
// raft reads the request) and on one with a token (where the handshake
// does).
func TestWrongPortsSayWhatTheyAre(t *testing.T) {
	proctest.Long(t)
	for _, token := range []string{"", "wrong-port-token"} {
		name := "open"
		if token != "" {
			name = "token"
		}
		t.Run(name, func(t *testing.T) {
			rlsAddr, rlqsAddr := proctest.FreeAddr(t), proctest.FreeAddr(t)
			args := []string{"--grpc-addr", rlsAddr, "--rlqs-addr", rlqsAddr}
			if token != "" {
				args = append(args, "--cluster-token", token)
			}
			n := proctest.StartNode(t, rlnodeBin, "n1", args...)
			proctest.WaitReady(t, n, 15*time.Second)
			for _, c := range []struct{ port, addr, says string }{
				{"Raft", n.RaftAddr, "this is rlnode's Raft port, for node-to-node traffic only; the HTTP API is at " + n.URL()},
				{"gRPC", rlsAddr, "this is rlnode's gRPC port (Envoy's rate limit service), not its HTTP API; the HTTP API is at " + n.URL()},
				{"RLQS", rlqsAddr, "this is rlnode's gRPC port (Envoy's rate limit quota service), not its HTTP API; the HTTP API is at " + n.URL()},
			} {
				_, errs, code := proctest.Run(t, rlnodeBin, nil, "status", "--addr", c.addr, "--timeout", "10s")
				t.Logf("rlnode status --addr <%s port>: exit %d: %s", c.port, code, strings.TrimSpace(errs))
				if code == 0 || !strings.Contains(errs, c.says) {
					t.Errorf("rlnode status --addr <%s port>: exit %d\n%s\nwant it to say %q", c.port, code, errs, c.says)
				}
			}

			conn, err := grpc.NewClient("passthrough:///"+n.HTTPAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			start := time.Now()
			_, err = healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
			t.Logf("a gRPC health check on the HTTP port: %v after %s", err, time.Since(start).Round(time.Millisecond))
			want := "this is rlnode's HTTP port (HTTP/1.1 API), not gRPC; Envoy's rate limit service is on " + rlsAddr
			if grpcstatus.Code(err) != codes.Unimplemented || !strings.Contains(grpcstatus.Convert(err).Message(), want) {
				t.Fatalf("a gRPC call on the HTTP port: %v; want UNIMPLEMENTED saying %q", err, want)
			}
			proctest.WaitReady(t, n, 5*time.Second) // the node serves on
		})
	}
}

// A release before these answers (or any other service) closed the
// connection or sent HTTP/2 frames: the CLI says what that most likely
// means instead of "EOF" alone.
func TestCLIExplainsWhatAWrongPortAnswered(t *testing.T) {
	serve := func(t *testing.T, handle func(net.Conn)) string {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ln.Close() })
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				go handle(c)
			}
		}()
		return ln.Addr().String()
	}
	closes := serve(t, func(c net.Conn) { c.Read(make([]byte, 4096)); c.Close() })
	resets := serve(t, func(c net.Conn) { c.Read(make([]byte, 1)); c.Close() })
	frames := serve(t, func(c net.Conn) {
		http2.NewFramer(c, c).WriteSettings(http2.Setting{ID: http2.SettingMaxConcurrentStreams, Val: 256})
		c.Read(make([]byte, 4096))
		c.Close()
	})
	for _, c := range []struct{ addr, says string }{
		{closes, "such as rlnode's Raft port (--raft-addr)"},
		{resets, "such as rlnode's Raft port (--raft-addr)"},
		{frames, "this is a gRPC port (rlnode's --grpc-addr or --rlqs-addr, for Envoy), not the HTTP API"},
	} {
		_, errs, code := proctest.Run(t, rlnodeBin, nil, "status", "--addr", c.addr, "--timeout", "5s")
		if code == 0 || !strings.Contains(errs, c.says) {
			t.Errorf("rlnode status --addr %s: exit %d\n%s\nwant it to say %q", c.addr, code, errs, c.says)
		} else {
			t.Logf("rlnode status --addr %s: %s", c.addr, strings.TrimSpace(errs))
		}
	}
}

// Under TLS the ports cannot answer in plain text, and both close the
// connection (a gRPC port refuses a TLS client that does not ask for
// HTTP/2; the Raft port, a certificate that is not a node's): the CLI
// still names what it most likely reached.
func TestWrongPortsUnderTLS(t *testing.T) {
	proctest.Long(t)
	dir := t.TempDir()
	proctest.TLSInit(t, rlnodeBin, dir, "n1")
	grpcAddr := proctest.FreeAddr(t)
	n := proctest.StartNode(t, rlnodeBin, "n1", append(proctest.TLSFlags(dir, "n1"), "--grpc-addr", grpcAddr)...)
	n.TLS = proctest.ClientTLS(t, dir, true)
	proctest.WaitReady(t, n, 15*time.Second)
	env := []string{"RLNODE_TLS_CERT=" + dir + "/client.pem", "RLNODE_TLS_KEY=" + dir + "/client-key.pem", "RLNODE_TLS_CA=" + dir + "/ca.pem"}
	for _, c := range []struct{ port, addr, says string }{
		{"gRPC", grpcAddr, "or, over TLS, a gRPC port (--grpc-addr, --rlqs-addr)"},
		{"Raft", n.RaftAddr, "such as rlnode's Raft port (--raft-addr)"},
	} {
		_, errs, code := proctest.Run(t, rlnodeBin, env, "status", "--addr", c.addr, "--timeout", "10s")
		t.Logf("rlnode status --addr <%s port> over TLS: exit %d: %s", c.port, code, strings.TrimSpace(errs))
		if code == 0 || !strings.Contains(errs, c.says) {
			t.Errorf("rlnode status --addr <%s port> over TLS: exit %d\n%s\nwant it to say %q", c.port, code, errs, c.says)
		}
	}
}
