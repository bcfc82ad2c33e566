package httpapi

import (
	"encoding/json"
	"net/http"
	"strconv"
	"sync"
	"unicode/utf8"

	"github.com/gin-gonic/gin"

	"github.com/rlnode/rlnode/cluster"
	"github.com/rlnode/rlnode/window"
)

// The answer of a single check is written by hand, append-style, into a
// pooled buffer: the same bytes encoding/json writes for wire.CheckBody and
// quotaProblem (the golden test holds them to it), without reflection.
// Rarer answers (422, errors, POST /v1/check) still go through jsonRender.

// answerBufs holds answer buffers between requests. A buffer is put back
// once written: ResponseWriter.Write copies what it is given.
type answerBufs struct{ pool sync.Pool }

func newAnswerBufs() *answerBufs {
	return &answerBufs{pool: sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}}
}

// Content types as header values, built once: assigned to the header map
// directly (the keys are canonical), where Header.Set would allocate a
// slice per answer. The capacity is the length, so an Add copies.
var (
	jsonContentType    = []string{"application/json; charset=utf-8"}
	shadowWouldRefuse  = []string{ShadowWouldRefuse}
	problemContentType = []string{problemJSON}
	noStore            = []string{"no-store"}
)

// write sends an encoded answer with status and content type, and puts
// its buffer back.
func (bufs *answerBufs) write(c *gin.Context, status int, contentType []string, b *[]byte) {
	c.Writer.Header()["Content-Type"] = contentType
	c.Status(status)
	c.Writer.Write(*b)
	*b = (*b)[:0]
	bufs.pool.Put(b)
}

func (bufs *answerBufs) get() *[]byte { return bufs.pool.Get().(*[]byte) }

// retryAfterOf is the hit's wait in ms when it was refused: the longest of
// its refused limits' (bodyOf's retryAfterMs).
func retryAfterOf(h cluster.HitResult) (int64, bool) {
	if h.Outcome != window.Refused {
		return 0, false
	}
	retry := int64(0)
	for _, p := range h.Parts {
		if p.Outcome == window.Refused {
			retry = max(retry, p.RetryAfterMs)
		}
	}
	return retry, true
}

// appendCheckMembers appends wire.CheckBody's members for a single check (no
// client), without braces: what bodyOf(h, allowed, false) encodes with
// retryAfterMs as given (present when hasRetry) and decided set.
func appendCheckMembers(b []byte, h cluster.HitResult, allowed bool, retry int64, hasRetry bool, decided string) []byte {
	m := h.MainPart()
	b = append(b, `"allowed":`...)
	b = strconv.AppendBool(b, allowed)
	b = appendIntMember(b, `,"remaining":`, m.Remaining)
	b = appendIntMember(b, `,"resetAt":`, m.ResetAt)
	b = appendIntMember(b, `,"limit":`, m.Limit)
	b = appendIntMember(b, `,"windowMs":`, m.WindowMs)
	b = append(b, `,"policy":`...)
	b = appendJSONString(b, h.Policy)
	if len(h.Parts) > 0 {
		b = append(b, `,"limits":[`...)
		for i, p := range h.Parts {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendIntMember(b, `{"limit":`, p.Limit)
			b = appendIntMember(b, `,"windowMs":`, p.WindowMs)
			b = appendIntMember(b, `,"remaining":`, p.Remaining)
			b = appendIntMember(b, `,"resetAt":`, p.ResetAt)
			if p.WindowStart != 0 {
				b = appendIntMember(b, `,"windowStart":`, p.WindowStart)
			}
			b = append(b, '}')
		}
		b = append(b, ']')
	}
	if hasRetry {
		b = appendIntMember(b, `,"retryAfterMs":`, retry)
	}
	b = append(b, `,"decided":`...)
	b = appendJSONString(b, decided)
	if h.WouldRefuse() {
		b = append(b, `,"wouldRefuse":true`...)
	}
	return b
}

func appendIntMember(b []byte, name string, v int64) []byte {
	return strconv.AppendInt(append(b, name...), v, 10)
}

// appendJSONString appends s as encoding/json quotes it (HTML-escaped, as
// Marshal and Encoder do by default). Printable ASCII other than the
// characters that need escaping is copied; anything else goes to
// encoding/json itself, so the bytes are its own.
func appendJSONString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= utf8.RuneSelf || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, err := json.Marshal(s)
			if err != nil { // never for a string; keep the answer well-formed
				return append(b, `""`...)
			}
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// writeAllowed answers an allowed single check: wire.CheckBody, 200.
func (bufs *answerBufs) writeAllowed(c *gin.Context, h cluster.HitResult, decided string) {
	b := bufs.get()
	retry, hasRetry := retryAfterOf(h)
	*b = append(*b, '{')
	*b = appendCheckMembers(*b, h, true, retry, hasRetry, decided)
	*b = append(*b, "}\n"...)
	bufs.write(c, http.StatusOK, jsonContentType, b)
}

// writeRefused answers a refused single check: quotaProblem with status.
func (bufs *answerBufs) writeRefused(c *gin.Context, status int, h cluster.HitResult, retry int64, detail, decided string) {
	b := bufs.get()
	*b = append(*b, `{"type":"https://iana.org/assignments/http-problem-types#quota-exceeded","title":"Request quota exceeded","status":`...)
	*b = strconv.AppendInt(*b, int64(status), 10)
	*b = append(*b, `,"detail":`...)
	*b = appendJSONString(*b, detail)
	*b = append(*b, `,"code":"`+CodeQuotaExceeded+`",`...)
	*b = appendCheckMembers(*b, h, false, retry, true, decided)
	*b = append(*b, "}\n"...)
	bufs.write(c, status, problemContentType, b)
}
