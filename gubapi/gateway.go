package gubapi

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/rlnode/rlnode/gubapi/gubpb"
)

// The HTTP gateway paths gubernator's grpc-gateway serves.
const (
	GetRateLimitsPath = "/v1/GetRateLimits"
	HealthCheckPath   = "/v1/HealthCheck"
)

// MaxGatewayBody bounds a gateway request: 1,000 items of the longest
// name and key, with room for JSON's spelling.
const MaxGatewayBody = 1 << 20

// As gubernator configures its gateway: proto field names, every field
// written, unknown fields ignored.
var (
	gatewayOut = protojson.MarshalOptions{UseProtoNames: true, EmitUnpopulated: true}
	gatewayIn  = protojson.UnmarshalOptions{DiscardUnknown: true}
)

// Gateway serves the gateway's two paths on the HTTP port (the public
// routes' guard applies: anyone who reaches the port, under mutual TLS
// anyone with a certificate of the cluster's CA).
type Gateway struct{ svc *Service }

// NewGateway returns the gateway over svc.
func NewGateway(svc *Service) *Gateway { return &Gateway{svc: svc} }

// GetRateLimits is POST /v1/GetRateLimits.
func (g *Gateway) GetRateLimits(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxGatewayBody))
	if err != nil {
		writeStatus(w, status.Errorf(codes.InvalidArgument, "read the request: %v (at most %d bytes)", err, MaxGatewayBody))
		return
	}
	var req gubpb.GetRateLimitsReq
	if err := gatewayIn.Unmarshal(body, &req); err != nil {
		writeStatus(w, status.Errorf(codes.InvalidArgument, "%v", err))
		return
	}
	resp, err := g.svc.GetRateLimits(r.Context(), httpCredential(r), &req)
	if err != nil {
		writeStatus(w, err)
		return
	}
	writeMessage(w, http.StatusOK, resp)
}

// HealthCheck is GET /v1/HealthCheck.
func (g *Gateway) HealthCheck(w http.ResponseWriter, _ *http.Request) {
	writeMessage(w, http.StatusOK, g.svc.HealthCheck())
}

// httpCredential names who owns the per-call keys a gateway request
// creates: the client certificate, else the source address (a bearer
// token is not checked on public routes, so it cannot name a credential).
func httpCredential(r *http.Request) string {
	if r.TLS != nil && len(r.TLS.PeerCertificates) > 0 {
		sum := sha256.Sum256(r.TLS.PeerCertificates[0].Raw)
		return "cert:" + hex.EncodeToString(sum[:8])
	}
	if host, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		return "addr:" + host
	}
	return "addr:" + r.RemoteAddr
}

func writeMessage(w http.ResponseWriter, code int, m proto.Message) {
	b, err := gatewayOut.Marshal(m)
	if err != nil {
		code, b = http.StatusInternalServerError, fmt.Appendf(nil, `{"code":13,"message":%q}`, err.Error())
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	w.Write(b)
}

// writeStatus writes a gRPC status as grpc-gateway does: its HTTP code and
// {"code", "message", "details"}.
func writeStatus(w http.ResponseWriter, err error) {
	st := status.Convert(err)
	writeMessage(w, httpCode(st.Code()), st.Proto())
}

func httpCode(c codes.Code) int {
	switch c {
	case codes.InvalidArgument, codes.OutOfRange:
		return http.StatusBadRequest
	case codes.FailedPrecondition: // cluster_upgrading, as rlnode's other writes answer it
		return http.StatusConflict
	case codes.Unauthenticated:
		return http.StatusUnauthorized
	case codes.ResourceExhausted:
		return http.StatusTooManyRequests
	case codes.DeadlineExceeded:
		return http.StatusGatewayTimeout
	case codes.Unavailable:
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError
}
