package grpcserve

import (
	"context"
	"errors"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/tap"
)

// The guard runs when a stream's headers have arrived, before gRPC reads
// a byte of its message (grpc.InTapHandle): a unary call's request is
// read and decoded before any interceptor runs, so a guard in an
// interceptor let callers without the token make the node decode
// megabytes (issue 35: ten 4 MB requests grew a node by 2 GB and were
// refused only afterwards).
//
// tap checks the token and takes a stream from the budgets; the stream's
// context ending (the call answered, the stream closed or reset, the
// connection gone) gives it back. For a call whose client sends one
// message (unary, or server-streaming like a health Watch) it also starts
// the message clock: the request must arrive whole within MessageTimeout,
// or the call is cancelled, so a half-sent request is not held until the
// client leaves. The interceptors stop the clock once gRPC has the
// message (a unary call's interceptor runs after its request is decoded;
// a stream's first RecvMsg returns). A client-streaming call (the quota
// service's stream, reflection) may rightly wait before it sends: what it
// holds is bounded by MaxMessageBytes and its service's own idle rule
// (--rlqs-stream-idle).
//
// gRPC calls tap on the connection's reader goroutine, one stream at a
// time: it must not block. It takes two short locks (the budget's) and
// starts a timer.
func (g *Guard) tap(ctx context.Context, info *tap.Info) (context.Context, error) {
	release, err := g.admit(ctx, info.FullMethodName)
	if err != nil {
		return nil, err
	}
	if g.clientStreams(info.FullMethodName) {
		context.AfterFunc(ctx, release)
		return ctx, nil
	}
	ctx, cancel := context.WithCancelCause(ctx)
	clock := time.AfterFunc(g.cfg.Limits.MessageTimeout, func() { cancel(errMessageLate) })
	context.AfterFunc(ctx, func() {
		clock.Stop()
		release()
	})
	return context.WithValue(ctx, messageClockKey{}, clock), nil
}

// clientStreams reports whether method is a client-streaming one of the
// server's services (read once: services are registered before Serve).
func (g *Guard) clientStreams(method string) bool {
	g.streamingOnce.Do(func() {
		g.streaming = map[string]bool{}
		if g.server == nil {
			return
		}
		for svc, info := range g.server.GetServiceInfo() {
			for _, m := range info.Methods {
				if m.IsClientStream {
					g.streaming["/"+svc+"/"+m.Name] = true
				}
			}
		}
	})
	return g.streaming[method]
}

// errMessageLate is why a stream whose first message did not arrive
// whole in time was cancelled.
var errMessageLate = errors.New("the request message did not arrive whole within the port's message timeout")

type messageClockKey struct{}

// messageArrived stops ctx's message clock.
func messageArrived(ctx context.Context) {
	if clock, ok := ctx.Value(messageClockKey{}).(*time.Timer); ok {
		clock.Stop()
	}
}

// unary runs once the request is decoded: the message has arrived.
func (g *Guard) unary(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	messageArrived(ctx)
	return h(ctx, req)
}

// stream stops the message clock when the stream's first message has
// arrived; later messages on a long stream are bounded by the service
// (the quota service closes a stream that sends no report for
// --rlqs-stream-idle) and by MaxMessageBytes.
func (g *Guard) stream(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	return h(srv, &firstMessageStream{ServerStream: ss})
}

type firstMessageStream struct {
	grpc.ServerStream
	arrived bool
}

func (s *firstMessageStream) RecvMsg(m any) error {
	err := s.ServerStream.RecvMsg(m)
	if !s.arrived && err == nil {
		s.arrived = true
		messageArrived(s.Context())
	}
	return err
}
