package cluster

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/rlnode/rlnode/fsm"
	"github.com/rlnode/rlnode/window"
)

// The forwarding protocol: a follower posts a batch of hits to the leader's
// ForwardPath and gets one status per hit back. It is binary because it
// carries every hit a follower serves.
//
//	request:  version, uvarint n, n × (policy, client, uvarint cost)
//	response: version, servedBy, uvarint n, n × (status, body)
//	          status decided: outcome byte, varint now, windowStart, count,
//	          remaining, resetAt, limit, windowMs
//	          status notCounted / unknown: message string
const (
	wireVersion byte = 1

	statusDecided    byte = 0
	statusNotCounted byte = 1
	statusUnknown    byte = 2
)

// ForwardPath is the leader's internal endpoint for forwarded hits.
const ForwardPath = "/internal/v1/hits"

// ErrBadForward is returned for a forwarding request that does not decode.
var ErrBadForward = errors.New("malformed forwarding request")

func encodeForwardRequest(dst []byte, reqs []hitReq) []byte {
	dst = append(dst, wireVersion)
	dst = binary.AppendUvarint(dst, uint64(len(reqs)))
	for _, r := range reqs {
		dst = appendStr(dst, r.Policy)
		dst = appendStr(dst, r.Client)
		dst = binary.AppendUvarint(dst, uint64(r.Cost))
	}
	return dst
}

func decodeForwardRequest(b []byte) ([]hitReq, error) {
	r := wireReader{b: b}
	if v := r.byte(); r.err == nil && v != wireVersion {
		return nil, fmt.Errorf("%w: version %d", ErrBadForward, v)
	}
	n := r.uvarint()
	if r.err == nil && (n == 0 || n > fsm.MaxHitsPerLog) {
		return nil, fmt.Errorf("%w: %d hits", ErrBadForward, n)
	}
	reqs := make([]hitReq, 0, min(n, 4096))
	for i := uint64(0); r.err == nil && i < n; i++ {
		req := hitReq{Policy: r.str(fsm.MaxPolicyLen), Client: r.str(fsm.MaxClientLen)}
		req.Cost = int64(r.uvarint())
		reqs = append(reqs, req)
	}
	if r.err == nil && r.off != len(b) {
		r.err = errors.New("trailing bytes")
	}
	if r.err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadForward, r.err)
	}
	for _, req := range reqs {
		if err := validateReq(req); err != nil {
			return nil, fmt.Errorf("%w: %v", ErrBadForward, err)
		}
	}
	return reqs, nil
}

func validateReq(r hitReq) error {
	return fsm.Hit{Policy: r.Policy, Client: r.Client, Limit: 1, WindowMs: 1, Cost: r.Cost}.Validate()
}

func encodeForwardResponse(dst []byte, servedBy string, outs []outcome) []byte {
	dst = append(dst, wireVersion)
	dst = appendStr(dst, servedBy)
	dst = binary.AppendUvarint(dst, uint64(len(outs)))
	for _, o := range outs {
		switch {
		case o.err == nil:
			d := o.res.Decision
			dst = append(dst, statusDecided, byte(d.Outcome))
			for _, v := range []int64{o.res.Now, d.WindowStart, d.Count, d.Remaining, d.ResetAt, o.res.Limit, o.res.WindowMs} {
				dst = binary.AppendVarint(dst, v)
			}
		case errors.Is(o.err, ErrNotCounted):
			dst = append(dst, statusNotCounted)
			dst = appendStr(dst, o.err.Error())
		default:
			dst = append(dst, statusUnknown)
			dst = appendStr(dst, o.err.Error())
		}
	}
	return dst
}

// remoteError is an error reported by the leader for a forwarded hit.
type remoteError struct{ msg string }

func (e remoteError) Error() string { return "leader: " + e.msg }

func decodeForwardResponse(b []byte, reqs []hitReq) ([]outcome, error) {
	r := wireReader{b: b}
	if v := r.byte(); r.err == nil && v != wireVersion {
		return nil, fmt.Errorf("forward response version %d", v)
	}
	servedBy := r.str(1024)
	n := r.uvarint()
	if r.err == nil && n != uint64(len(reqs)) {
		return nil, fmt.Errorf("forward response has %d results for %d hits", n, len(reqs))
	}
	outs := make([]outcome, len(reqs))
	for i := 0; r.err == nil && i < len(reqs); i++ {
		switch status := r.byte(); status {
		case statusDecided:
			oc := window.Outcome(r.byte())
			var v [7]int64
			for j := range v {
				v[j] = r.varint()
			}
			outs[i].res = CheckResult{
				Policy: reqs[i].Policy, Client: reqs[i].Client, ServedBy: servedBy, Now: v[0],
				Decision: window.Decision{Outcome: oc, WindowStart: v[1], Count: v[2], Remaining: v[3], ResetAt: v[4]},
				Limit:    v[5], WindowMs: v[6],
			}
		case statusNotCounted:
			outs[i].err = errors.Join(ErrNotCounted, remoteError{r.str(1 << 16)})
		case statusUnknown:
			outs[i].err = errors.Join(ErrOutcomeUnknown, remoteError{r.str(1 << 16)})
		default:
			r.err = fmt.Errorf("status %d", status)
		}
	}
	if r.err != nil {
		return nil, fmt.Errorf("decode forward response: %w", r.err)
	}
	return outs, nil
}

func appendStr(dst []byte, s string) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(s)))
	return append(dst, s...)
}

type wireReader struct {
	b   []byte
	off int
	err error
}

func (r *wireReader) byte() byte {
	if r.err != nil {
		return 0
	}
	if r.off >= len(r.b) {
		r.err = errors.New("short message")
		return 0
	}
	r.off++
	return r.b[r.off-1]
}

func (r *wireReader) uvarint() uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b[r.off:])
	if n <= 0 {
		r.err = errors.New("bad varint")
		return 0
	}
	r.off += n
	return v
}

func (r *wireReader) varint() int64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Varint(r.b[r.off:])
	if n <= 0 {
		r.err = errors.New("bad varint")
		return 0
	}
	r.off += n
	return v
}

func (r *wireReader) str(max int) string {
	n := r.uvarint()
	if r.err != nil {
		return ""
	}
	if n > uint64(max) || n > uint64(len(r.b)-r.off) {
		r.err = fmt.Errorf("string of %d bytes", n)
		return ""
	}
	s := string(r.b[r.off : r.off+int(n)])
	r.off += int(n)
	return s
}
