package cluster

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/rlnode/rlnode/fsm"
	"github.com/rlnode/rlnode/window"
)

// The forwarding protocol: a follower posts a batch of all-or-nothing
// groups of hits to the leader's ForwardPath and gets one status per group
// back. It is binary because it carries every hit a follower serves.
//
//	request:  version, uvarint groups, groups × (uvarint n, n × (policy, client, uvarint cost))
//	response: version, servedBy, uvarint groups, groups × (status, body)
//	          status decided: allowed byte, varint now, per hit: flags byte
//	          (1 = unknown policy), outcome byte, uvarint main, uvarint parts,
//	          parts × (outcome byte, varint limit, windowMs, remaining,
//	          resetAt, retryAfterMs, windowStart)
//	          status notCounted / unknown: message string
//
// Version 2 came with replicated policies; a node answers only its own
// version (a mixed-version cluster forwards nothing until upgraded).
const (
	wireVersion byte = 2

	statusDecided    byte = 0
	statusNotCounted byte = 1
	statusUnknown    byte = 2
)

// ErrBadForward is returned for a forwarding request that does not decode.
var ErrBadForward = errors.New("malformed forwarding request")

func encodeForwardRequest(dst []byte, reqs []group) []byte {
	dst = append(dst, wireVersion)
	dst = binary.AppendUvarint(dst, uint64(len(reqs)))
	for _, g := range reqs {
		dst = binary.AppendUvarint(dst, uint64(len(g)))
		for _, r := range g {
			dst = appendStr(dst, r.Policy)
			dst = appendStr(dst, r.Client)
			dst = binary.AppendUvarint(dst, uint64(r.Cost))
		}
	}
	return dst
}

func decodeForwardRequest(b []byte) ([]group, error) {
	r := wireReader{b: b}
	if err := r.version(wireVersion, "version"); err != nil {
		return nil, err
	}
	n := r.uvarint()
	if r.err == nil && (n == 0 || n > fsm.MaxHitsPerLog) {
		return nil, fmt.Errorf("%w: %d groups", ErrBadForward, n)
	}
	reqs := make([]group, 0, min(n, 4096))
	total := uint64(0)
	for i := uint64(0); r.err == nil && i < n; i++ {
		size := r.uvarint()
		total += size
		if r.err == nil && (size == 0 || size > MaxGroup || total > fsm.MaxHitsPerLog) {
			return nil, fmt.Errorf("%w: group of %d hits", ErrBadForward, size)
		}
		g := make(group, 0, size)
		for j := uint64(0); r.err == nil && j < size; j++ {
			req := hitReq{Policy: r.str(fsm.MaxPolicyLen), Client: r.str(fsm.MaxClientLen)}
			req.Cost = int64(r.uvarint())
			g = append(g, req)
		}
		reqs = append(reqs, g)
	}
	if err := r.end(); err != nil {
		return nil, err
	}
	for _, g := range reqs {
		for _, req := range g {
			if err := req.Validate(); err != nil {
				return nil, fmt.Errorf("%w: %v", ErrBadForward, err)
			}
		}
	}
	return reqs, nil
}

func encodeForwardResponse(dst []byte, servedBy string, outs []outcome) []byte {
	dst = append(dst, wireVersion)
	dst = appendStr(dst, servedBy)
	dst = binary.AppendUvarint(dst, uint64(len(outs)))
	for _, o := range outs {
		switch {
		case o.err == nil:
			dst = append(dst, statusDecided, boolByte(o.res.Allowed))
			dst = binary.AppendVarint(dst, o.res.Now)
			for _, h := range o.res.Hits {
				dst = append(dst, hitFlag(h), byte(h.Outcome))
				dst = binary.AppendUvarint(dst, uint64(h.Main))
				dst = binary.AppendUvarint(dst, uint64(len(h.Parts)))
				for _, p := range h.Parts {
					dst = append(dst, byte(p.Outcome))
					for _, v := range [...]int64{p.Limit, p.WindowMs, p.Remaining, p.ResetAt, p.RetryAfterMs, p.WindowStart} {
						dst = binary.AppendVarint(dst, v)
					}
				}
			}
		case errors.Is(o.err, ErrNotCounted):
			dst = append(dst, statusNotCounted)
			dst = appendStr(dst, why(o.err))
		default:
			dst = append(dst, statusUnknown)
			dst = appendStr(dst, why(o.err))
		}
	}
	return dst
}

func boolByte(b bool) byte {
	if b {
		return 1
	}
	return 0
}

// why is a failed hit's message without its outcome, which the status
// byte already carries.
func why(err error) string {
	var he *HitError
	if errors.As(err, &he) && he.Why() != "" {
		return he.Why()
	}
	return err.Error()
}

// remoteError is an error reported by the leader for a forwarded hit.
type remoteError struct{ msg string }

func (e remoteError) Error() string { return "leader: " + e.msg }

func decodeForwardResponse(b []byte, reqs []group) ([]outcome, error) {
	r := wireReader{b: b}
	if v := r.byte(); r.err == nil && v != wireVersion {
		return nil, fmt.Errorf("forward response version %d", v)
	}
	servedBy := r.str(1024)
	n := r.uvarint()
	if r.err == nil && n != uint64(len(reqs)) {
		return nil, fmt.Errorf("forward response has %d results for %d groups", n, len(reqs))
	}
	outs := make([]outcome, len(reqs))
	for i := 0; r.err == nil && i < len(reqs); i++ {
		switch status := r.byte(); status {
		case statusDecided:
			outs[i].res = r.checkResult(reqs[i], servedBy)
		case statusNotCounted:
			outs[i].err = notCounted(nil, remoteError{r.str(1 << 16)})
		case statusUnknown:
			outs[i].err = outcomeUnknown(remoteError{r.str(1 << 16)})
		default:
			r.err = fmt.Errorf("status %d", status)
		}
	}
	if r.err != nil {
		return nil, fmt.Errorf("decode forward response: %w", r.err)
	}
	return outs, nil
}

func (r *wireReader) checkResult(g group, servedBy string) CheckResult {
	res := CheckResult{Allowed: r.byte() == 1, Now: r.varint(), ServedBy: servedBy, Hits: make([]HitResult, len(g))}
	for j := 0; r.err == nil && j < len(g); j++ {
		h := HitResult{Policy: g[j].Policy, Client: g[j].Client, Cost: g[j].Cost}
		flag := r.byte()
		h.UnknownPolicy, h.NoSlice = flag == 1, flag == noSliceFlag
		h.Outcome = window.Outcome(r.byte())
		h.Main = int(r.uvarint())
		parts := r.uvarint()
		if r.err == nil && (parts > 8 || (parts > 0 && uint64(h.Main) >= parts)) {
			r.err = fmt.Errorf("hit %d has %d parts, main %d", j, parts, h.Main)
		}
		for k := uint64(0); r.err == nil && k < parts; k++ {
			p := window.Result{Outcome: window.Outcome(r.byte())}
			p.Limit, p.WindowMs, p.Remaining = r.varint(), r.varint(), r.varint()
			p.ResetAt, p.RetryAfterMs, p.WindowStart = r.varint(), r.varint(), r.varint()
			h.Parts = append(h.Parts, p)
		}
		res.Hits[j] = h
	}
	return res
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

// version reads the leading version byte: a body of another version is
// ErrBadForward, naming what.
func (r *wireReader) version(want byte, what string) error {
	if v := r.byte(); r.err == nil && v != want {
		return fmt.Errorf("%w: %s %d", ErrBadForward, what, v)
	}
	return nil
}

// end is the reader's verdict once a body is read: nil, or ErrBadForward
// for a short read or bytes left over.
func (r *wireReader) end() error {
	if r.err == nil && r.off != len(r.b) {
		r.err = errors.New("trailing bytes")
	}
	if r.err != nil {
		return fmt.Errorf("%w: %v", ErrBadForward, r.err)
	}
	return nil
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

func (r *wireReader) uvarint() uint64 { return readVarint(r, binary.Uvarint) }

func (r *wireReader) varint() int64 { return readVarint(r, binary.Varint) }

// readVarint reads one varint of either kind (binary.Uvarint or
// binary.Varint).
func readVarint[T uint64 | int64](r *wireReader, read func([]byte) (T, int)) T {
	if r.err != nil {
		return 0
	}
	v, n := read(r.b[r.off:])
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
