package httpapi

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync/atomic"

	"github.com/gin-gonic/gin"
)

// Request bodies are bounded twice. Each route declares the most it reads
// (Route.MaxBody: a few KiB for a public call, up to 4 MiB for a whole
// policy table), and the port holds at most a budget of body bytes read
// into memory across every request in flight. Before this, every JSON
// route read up to 1 MiB, so 1,000 connections each sending all but the
// last byte of a 1 MiB body held 1.6-2 GB (issue 35, item 7).

// Body caps of the routes (routes.go). A public call names one key (a
// policy of 64 bytes, a client of 256, a holder, a few numbers): 8 KiB
// leaves room for every id escaped as \uXXXX. A batch (a check of 64 hits,
// a reservation of 64 keys) is 64 of those at their usual size.
const (
	MaxBodyCall  = 8 << 10
	MaxBodyBatch = 64 << 10
	// MaxBodyItems is a body of up to 1,000 items, each answered on its
	// own: POST /v1/check with "independent": true, gubernator's
	// POST /v1/GetRateLimits (its batch size).
	MaxBodyItems = 1 << 20
	// MaxBodyPolicy and MaxBodyTable are PUT /v1/policies/:name's and PUT
	// /v1/policies's (4096 policies).
	MaxBodyPolicy = 1 << 20
	MaxBodyTable  = 4 << 20
	// bodyStreamed marks a route that streams its body instead of holding
	// it (a restore, written to disk as it arrives): it is bounded by its
	// own checks and counts against no budget.
	bodyStreamed = -1
)

// DefaultBodyBudget is the port's default budget of body bytes held in
// memory at once: sixteen whole policy tables, or 8,192 batch checks.
const DefaultBodyBudget = 64 << 20

// freeBodyBytes of each request's body count against no budget: the
// port's connection cap (8192 by default) bounds them to 32 MiB, and an
// ordinary call then never meets a budget that large bodies have filled.
const freeBodyBytes = 4 << 10

// bodyChunk is the most one read of a budgeted body asks for.
const bodyChunk = 32 << 10

// errBodyBudget is the error a body read gets once the port's budget is
// spent.
var errBodyBudget = errors.New("this node holds its limit of request bodies in memory")

// bodyBudget counts the body bytes requests in flight have read.
type bodyBudget struct {
	limit int64
	held  atomic.Int64
}

// wrap counts r's body against the budget until release.
func (b *bodyBudget) wrap(r *http.Request) (release func()) {
	if r.Body == nil || r.Body == http.NoBody {
		return func() {}
	}
	bb := &budgetedBody{ReadCloser: r.Body, budget: b}
	r.Body = bb
	return bb.release
}

// budgetedBody is a request body whose reads take from the port's budget.
type budgetedBody struct {
	io.ReadCloser
	budget   *bodyBudget
	read     int64 // bytes read so far
	taken    int64 // of them, taken from the budget
	streamed atomic.Bool
}

func (r *budgetedBody) Read(p []byte) (int, error) {
	if r.streamed.Load() {
		return r.ReadCloser.Read(p)
	}
	// Read a chunk at most (io.ReadAll offers its whole spare capacity),
	// then take what it added past the free bytes: a body over the budget
	// fails before its reader grows a buffer for more.
	if len(p) > bodyChunk {
		p = p[:bodyChunk]
	}
	n, err := r.ReadCloser.Read(p)
	r.read += int64(n)
	if want := max(0, r.read-freeBodyBytes) - r.taken; want > 0 {
		if r.budget.held.Add(want) > r.budget.limit {
			r.budget.held.Add(-want)
			return 0, errBodyBudget
		}
		r.taken += want
	}
	return n, err
}

// release stops counting and gives the budget back: when the request
// ends (net/http may read on, to keep the connection, after the handler
// returns), or when a handler streams the body out as it reads it.
func (r *budgetedBody) release() {
	r.streamed.Store(true)
	r.budget.held.Add(-r.taken)
	r.taken = 0
}

// StreamBody stops counting the body against the port's budget: its
// handler writes it out as it reads it (a restore, on the node that takes
// it from the client and on the leader a follower streams it to). A
// handler outside this package (the cluster's internal restore endpoint)
// reaches it through an interface assertion on the request's body.
func (r *budgetedBody) StreamBody() { r.release() }

// BodyStreamer is what a request body offers when the port counts it: a
// handler that streams the body calls StreamBody first.
type BodyStreamer interface{ StreamBody() }

// routeBody is the middleware of a route that reads at most n body bytes
// (bodyStreamed: a streamed body, out of the port's budget).
func routeBody(n int64) gin.HandlerFunc {
	return func(c *gin.Context) {
		if n == bodyStreamed {
			if bb, ok := c.Request.Body.(BodyStreamer); ok {
				bb.StreamBody()
			}
			return
		}
		c.Request.Body = http.MaxBytesReader(c.Writer, c.Request.Body, n)
	}
}

// bodyReadFailed answers a body that could not be read: 413 naming the
// route's cap, 503 busy when the port's budget is spent, else 400.
func bodyReadFailed(c *gin.Context, err error) {
	var tooLarge *http.MaxBytesError
	switch {
	case errors.As(err, &tooLarge):
		writeProblem(c, http.StatusRequestEntityTooLarge, CodeInvalidRequest,
			fmt.Sprintf("request body is over %d bytes, the most this endpoint reads", tooLarge.Limit))
	case errors.Is(err, errBodyBudget):
		c.Header("Retry-After", strconv.Itoa(1))
		c.Header("Connection", "close")
		writeProblem(c, http.StatusServiceUnavailable, CodeBusy,
			"this node holds its limit of request bodies in memory (--http-body-budget); nothing was read or counted: retry")
	default:
		writeProblem(c, http.StatusBadRequest, CodeInvalidRequest, "request body unreadable: "+err.Error())
	}
}
