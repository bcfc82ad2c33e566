package httpapi

import (
	"fmt"
	"strconv"

	"github.com/gin-gonic/gin"

	"github.com/rlnode/rlnode/cluster"
	"github.com/rlnode/rlnode/window"
)

// HeaderSet chooses the rate-limit headers a decided check answers with
// (rlnode serve --headers): the IETF draft's RateLimit and
// RateLimit-Policy pair, the X-RateLimit-Limit/Remaining/Reset trio most
// client libraries and proxy configs read, or both. Every header is a
// key in the map net/http clones, sorts and writes per answer, so fewer
// cost less (docs/performance.md, "Rate-limit headers").
type HeaderSet uint8

// The zero value is HeadersBoth: an API built without a choice answers as
// it always has.
const (
	HeadersBoth HeaderSet = iota
	HeadersIETF
	HeadersLegacy
)

var headerSetNames = [...]string{HeadersBoth: "both", HeadersIETF: "ietf", HeadersLegacy: "legacy"}

func (s HeaderSet) String() string {
	if int(s) < len(headerSetNames) {
		return headerSetNames[s]
	}
	return "HeaderSet(" + strconv.Itoa(int(s)) + ")"
}

// ParseHeaderSet reads "ietf", "legacy" or "both".
func ParseHeaderSet(v string) (HeaderSet, error) {
	for i, name := range headerSetNames {
		if v == name {
			return HeaderSet(i), nil
		}
	}
	return 0, fmt.Errorf("%q: want ietf (RateLimit, RateLimit-Policy), legacy (X-RateLimit-Limit, -Remaining, -Reset) or both", v)
}

// Set parses v into s (flag.Value: rlnode serve --headers).
func (s *HeaderSet) Set(v string) error {
	set, err := ParseHeaderSet(v)
	if err != nil {
		return err
	}
	*s = set
	return nil
}

// setRateLimitHeaders writes Cache-Control, X-Rlnode-Served-By and the
// chosen rate-limit headers: the IETF draft's structured fields, one item
// per limit, and/or the X-RateLimit-* trio (the most constraining limit).
// This runs on every decided hit, so the values are built with strconv
// into one buffer turned into one string that they slice, held in one
// slice of values, and stored under their canonical keys (what Header.Set
// would store them under, so the same bytes go on the wire) without Set's
// canonicalising or a slice per header: two allocations whatever the set.
func (a *API) setRateLimitHeaders(c *gin.Context, now int64, servedBy string, hr cluster.HitResult) {
	h := c.Writer.Header()
	set := a.cfg.Headers
	ietf, legacy := set != HeadersLegacy, set != HeadersIETF
	b := make([]byte, 0, 192)
	var ends [5]int // where each value ends in b
	n := 0
	if ietf {
		for i, p := range hr.Parts {
			if i > 0 {
				b = append(b, ", "...)
			}
			b = appendPartName(b, hr, p)
			b = append(b, ";q="...)
			b = strconv.AppendInt(b, p.Limit, 10)
			b = append(b, ";w="...)
			b = strconv.AppendInt(b, (p.WindowMs+999)/1000, 10)
		}
		ends[n], n = len(b), n+1
		for i, p := range hr.Parts {
			if i > 0 {
				b = append(b, ", "...)
			}
			b = appendPartName(b, hr, p)
			b = append(b, ";r="...)
			b = strconv.AppendInt(b, p.Remaining, 10)
			b = append(b, ";t="...)
			b = strconv.AppendInt(b, max(0, (p.ResetAt-now+999)/1000), 10)
		}
		ends[n], n = len(b), n+1
	}
	if legacy {
		m := hr.MainPart()
		b = strconv.AppendInt(b, m.Limit, 10)
		ends[n], n = len(b), n+1
		b = strconv.AppendInt(b, m.Remaining, 10)
		ends[n], n = len(b), n+1
		b = strconv.AppendInt(b, (m.ResetAt+999)/1000, 10)
		ends[n], n = len(b), n+1
	}
	s := string(b)
	// v[0] is the served-by value, v[1:] the rate-limit values in order;
	// each header gets a one-element slice of it, capacity one, so an Add
	// on it copies rather than writing into its neighbour.
	v := make([]string, n+1)
	v[0] = servedBy
	from := 0
	for i := range n {
		v[i+1], from = s[from:ends[i]], ends[i]
	}
	h["Cache-Control"] = noStore
	h[cluster.HeaderServedBy] = v[0:1:1]
	i := 1
	if ietf {
		h["Ratelimit-Policy"] = v[i : i+1 : i+1]
		h["Ratelimit"] = v[i+1 : i+2 : i+2]
		i += 2
	}
	if legacy {
		h["X-Ratelimit-Limit"] = v[i : i+1 : i+1]
		h["X-Ratelimit-Remaining"] = v[i+1 : i+2 : i+2]
		h["X-Ratelimit-Reset"] = v[i+2 : i+3 : i+3]
	}
}

// appendPartName appends a RateLimit item's quoted name: the policy's, with
// the window when the policy has more than one limit.
func appendPartName(b []byte, hr cluster.HitResult, p window.Result) []byte {
	if len(hr.Parts) == 1 {
		return strconv.AppendQuote(b, hr.Policy)
	}
	return strconv.AppendQuote(b, hr.Policy+"-"+shortWindow(p.WindowMs))
}

// shortWindow names a window for a RateLimit item: 1s, 5m, 1h, 1d, 250ms,
// and the calendar periods 1mo and 1y.
func shortWindow(ms int64) string {
	switch ms {
	case window.MonthMs:
		return "1mo"
	case window.YearMs:
		return "1y"
	}
	for _, u := range []struct {
		ms   int64
		name string
	}{{86_400_000, "d"}, {3_600_000, "h"}, {60_000, "m"}, {1000, "s"}} {
		if ms%u.ms == 0 {
			return strconv.FormatInt(ms/u.ms, 10) + u.name
		}
	}
	return strconv.FormatInt(ms, 10) + "ms"
}
