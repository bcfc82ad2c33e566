package cluster

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/rlnode/rlnode/fsm"
	"github.com/rlnode/rlnode/window"
)

// The batched hop of per-call requests (callforward.go): a follower posts
// the requests its callers sent meanwhile to the leader's CallsPath in one
// binary body and gets one answer per request back.
//
//	request:  version, uvarint n, n × bytes(the request as a calls entry:
//	          fsm.EncodeCalls with now 1 and bounds 1, the owner and items)
//	response: version, servedBy, uvarint n, n × (status, body)
//	          status decided: varint now, uvarint items, items × (flags
//	          byte: 1 over, 2 full, 4 policy, 8 forget, 16 leasable;
//	          varint limit, remaining, reset, units, expiry, usable ms; uvarint grant
//	          index; err string)
//	          other statuses: message string
//
// A leader without the path (an earlier release) answers 404: the
// follower then sends each request as before (opCalls, JSON), so nodes of
// both releases keep talking during a rolling upgrade.
const (
	callsWireVersion byte = 1

	callsDecided    byte = 0
	callsNotCounted byte = 1
	callsUnknown    byte = 2
	callsUpgrading  byte = 3 // final: ErrClusterUpgrading
	callsBad        byte = 4 // final: ErrBadRequest

	// maxCallsPerHop bounds the requests and items of one hop.
	maxCallsPerHop     = 256
	maxCallItemsPerHop = 4 * MaxCallsPerRequest
	// maxCallsHopBytes bounds a hop's body.
	maxCallsHopBytes = 8 << 20
)

func encodeCallsHop(reqs []CallsRequest) []byte {
	b := []byte{callsWireVersion}
	b = binary.AppendUvarint(b, uint64(len(reqs)))
	for _, r := range reqs {
		b = appendStr(b, string(fsm.EncodeCalls(fsm.CallsEntry{Now: 1, Owner: r.Owner, MaxKeys: 1, MaxKeysPerOwner: 1, Items: r.Items})))
	}
	return b
}

func decodeCallsHop(b []byte) ([]CallsRequest, error) {
	r := wireReader{b: b}
	if err := r.version(callsWireVersion, "calls hop version"); err != nil {
		return nil, err
	}
	n := r.uvarint()
	if r.err == nil && (n == 0 || n > maxCallsPerHop) {
		return nil, fmt.Errorf("%w: %d calls requests", ErrBadForward, n)
	}
	reqs := make([]CallsRequest, 0, min(n, maxCallsPerHop))
	items := 0
	for i := uint64(0); r.err == nil && i < n; i++ {
		e, err := fsm.DecodeCalls([]byte(r.str(maxCallsHopBytes)))
		if r.err != nil {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("%w: request %d: %w", ErrBadForward, i, err)
		}
		if items += len(e.Items); items > maxCallItemsPerHop {
			return nil, fmt.Errorf("%w: more than %d items", ErrBadForward, maxCallItemsPerHop)
		}
		reqs = append(reqs, CallsRequest{Owner: e.Owner, Items: e.Items})
	}
	if err := r.end(); err != nil {
		return nil, err
	}
	return reqs, nil
}

// callsResult is one request's answer on the hop.
type callsResult struct {
	ans CallsAnswer
	err error
}

const (
	outOver byte = 1 << iota
	outFull
	outPolicy
	outForget
	outLeasable
)

func encodeCallsHopAnswer(servedBy string, res []callsResult) []byte {
	b := []byte{callsWireVersion}
	b = appendStr(b, servedBy)
	b = binary.AppendUvarint(b, uint64(len(res)))
	for _, r := range res {
		switch {
		case r.err == nil:
			b = append(b, callsDecided)
			b = binary.AppendVarint(b, r.ans.Now)
			b = binary.AppendUvarint(b, uint64(len(r.ans.Items)))
			for _, o := range r.ans.Items {
				var f byte
				for _, x := range []struct {
					on  bool
					bit byte
				}{{o.Over, outOver}, {o.Full, outFull}, {o.Policy, outPolicy}, {o.Forget, outForget}, {o.Leasable, outLeasable}} {
					if x.on {
						f |= x.bit
					}
				}
				b = append(b, f)
				for _, v := range [...]int64{o.Limit, o.Remaining, o.Reset, o.Units, o.Expiry, o.UsableMs} {
					b = binary.AppendVarint(b, v)
				}
				b = binary.AppendUvarint(b, o.GrantIndex)
				b = appendStr(b, o.Err)
			}
		case errors.Is(r.err, ErrClusterUpgrading):
			b = append(b, callsUpgrading)
			b = appendStr(b, r.err.Error())
		case errors.Is(r.err, ErrBadRequest):
			b = append(b, callsBad)
			b = appendStr(b, r.err.Error())
		case errors.Is(r.err, ErrNotCounted):
			b = append(b, callsNotCounted)
			b = appendStr(b, why(r.err))
		default:
			b = append(b, callsUnknown)
			b = appendStr(b, why(r.err))
		}
	}
	return b
}

func decodeCallsHopAnswer(b []byte, reqs []CallsRequest) ([]callsResult, error) {
	r := wireReader{b: b}
	if v := r.byte(); r.err == nil && v != callsWireVersion {
		return nil, fmt.Errorf("calls hop answer version %d", v)
	}
	servedBy := r.str(1024)
	n := r.uvarint()
	if r.err == nil && n != uint64(len(reqs)) {
		return nil, fmt.Errorf("calls hop answer has %d results for %d requests", n, len(reqs))
	}
	out := make([]callsResult, len(reqs))
	for i := 0; r.err == nil && i < len(reqs); i++ {
		switch status := r.byte(); status {
		case callsDecided:
			a := CallsAnswer{Now: r.varint(), ServedBy: servedBy}
			if m := r.uvarint(); r.err == nil && m != uint64(len(reqs[i].Items)) {
				r.err = fmt.Errorf("request %d: %d outcomes for %d items", i, m, len(reqs[i].Items))
			}
			a.Items = make([]CallOutcome, len(reqs[i].Items))
			for j := 0; r.err == nil && j < len(a.Items); j++ {
				f := r.byte()
				o := CallOutcome{CallResult: window.CallResult{Over: f&outOver != 0, Forget: f&outForget != 0},
					Full: f&outFull != 0, Policy: f&outPolicy != 0, Leasable: f&outLeasable != 0}
				o.Limit, o.Remaining, o.Reset, o.Units, o.Expiry, o.UsableMs = r.varint(), r.varint(), r.varint(), r.varint(), r.varint(), r.varint()
				o.GrantIndex = r.uvarint()
				o.Err = r.str(1 << 16)
				a.Items[j] = o
			}
			out[i].ans = a
		case callsNotCounted:
			out[i].err = notCounted(nil, remoteError{r.str(1 << 16)})
		case callsUnknown:
			out[i].err = outcomeUnknown(remoteError{r.str(1 << 16)})
		case callsUpgrading:
			out[i].err = notCounted(ErrClusterUpgrading, remoteError{r.str(1 << 16)})
		case callsBad:
			out[i].err = notCounted(ErrBadRequest, remoteError{r.str(1 << 16)})
		default:
			r.err = fmt.Errorf("status %d", status)
		}
	}
	if r.err != nil {
		return nil, fmt.Errorf("decode calls hop answer: %w", r.err)
	}
	return out, nil
}
