package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"go.opentelemetry.io/otel/attribute"

	"github.com/rlnode/rlnode/fsm"
	"github.com/rlnode/rlnode/internal/problem"
	"github.com/rlnode/rlnode/policy"
)

// The one forwarding rule (rqlite's proxy is the model): an operation that
// only the leader may run is run here when this node leads; otherwise the
// same operation goes to the leader's internal endpoint for it, which runs
// it without forwarding again (a node that lost the lead meanwhile answers
// not-leader). Requests and answers are JSON, errors a problem document
// naming the cluster errors it stands for (errorCodes), and every answer
// says which node served it (HeaderServedBy). Hits follow the same rule
// over their own binary wire (forward.go, wire.go), being the hot path;
// backup and restore over streams (Backup, RestoreBackup).

// HeaderServedBy names the node that served a request: the one whose log
// entry decided a hit, or that ran a forwarded operation.
const HeaderServedBy = "X-Rlnode-Served-By"

// leaderOp is one operation only the leader runs.
type leaderOp[Req, Resp any] struct {
	name string
	// check refuses bad input before the request runs or travels, and
	// again where it arrives; nil accepts every request.
	check func(req Req) error
	// run is the operation on the leader.
	run func(n *Node, ctx context.Context, req Req) (Resp, error)
	// format is the log format req needs (nil: the oldest). The version
	// gate is checked here, once for every operation: on the node asked
	// (a leader of an older release has no gate and may not know the
	// operation) and again on the leader before run (gate.go).
	format func(req Req) fsm.Format
	// wait says a caller may wait briefly for a leader to be elected (an
	// admin call); reads fail at once when none is known.
	wait bool
	// bounded: a forward of op that the leader does not answer within
	// GrantAttemptTimeout fails fast, and the next waits for a new leader
	// (attempt.go); only for an operation whose lost answer can only
	// under-admit (a grant).
	bounded bool
}

func (op leaderOp[Req, Resp]) path() string { return leaderPrefix + op.name }

// do applies the rule for a caller of this node.
func (op leaderOp[Req, Resp]) do(ctx context.Context, n *Node, req Req) (resp Resp, err error) {
	ctx, span := n.tracer.start(ctx, "rlnode.leader_op", attribute.String("rlnode.op", op.name))
	defer func() { fail(span, err); span.End() }()
	if op.check != nil {
		if err := op.check(req); err != nil {
			return resp, err
		}
	}
	if op.format != nil {
		if err := n.gate.requireLeader(op.format(req)); err != nil {
			return resp, err
		}
	}
	if n.IsLeader() {
		return op.lead(n, ctx, req)
	}
	if op.bounded {
		err = n.hung.forwardBounded(ctx, n.Leader, n.stop, func(ctx context.Context) error {
			return n.fwd.call(ctx, op.wait, op.path(), req, &resp)
		})
		return resp, err
	}
	err = n.fwd.call(ctx, op.wait, op.path(), req, &resp)
	return resp, err
}

// lead runs op on the leader, behind the version gate.
func (op leaderOp[Req, Resp]) lead(n *Node, ctx context.Context, req Req) (resp Resp, err error) {
	if op.format != nil {
		if err := n.gate.RequireFormat(op.format(req)); err != nil {
			return resp, err
		}
	}
	return op.run(n, ctx, req)
}

// needs is the format rule of an operation that always needs format f.
func needs[Req any](f fsm.Format) func(Req) fsm.Format { return func(Req) fsm.Format { return f } }

// retrying is the one retry rule for leader operations on a caller's
// path that write the log (a grant, a return): run op until it succeeds
// or fails otherwise than not counted, or budget (or ctx) ends; an
// operation that never reached the log (no leader, the leader moved, the
// dial failed, the clock was off) is asked of the next leader (not of a
// node that says it was removed: not_member is final), and so is a grant
// the leader did not answer within GrantAttemptTimeout (attempt.go), once
// a new leader is known. An answer about the request itself is final
// (isFinal): asking again would get it again. Failures have the hit
// path's shape: a *HitError, not counted or outcome unknown.
func (op leaderOp[Req, Resp]) retrying(ctx context.Context, n *Node, req Req, budget time.Duration) (Resp, error) {
	ctx, cancel := context.WithTimeout(ctx, budget)
	defer cancel()
	for {
		resp, err := op.do(ctx, n, req)
		if err == nil {
			return resp, nil
		}
		if isFinal(err) {
			return resp, finalError(err)
		}
		he := opError(err)
		if !errors.Is(he, ErrNotCounted) {
			return resp, he
		}
		select {
		case <-ctx.Done():
			return resp, he
		case <-n.stop:
			return resp, notCounted(nil, ErrClosed)
		case <-time.After(opRetryInterval):
		}
	}
}

// opRetryInterval is how long retrying waits before asking again.
const opRetryInterval = 20 * time.Millisecond

// finals are the answers about a request itself (its policy, its id, its
// input, its credential's budget, the cluster's format or membership):
// the same leader or the next would give them again, so the one retry
// rule returns them at once. Nothing was written for any of them.
var finals = []error{ErrUnknownPolicy, ErrNotMember, ErrWrongPolicy, ErrNotFound, ErrAlreadySettled, ErrClusterUpgrading,
	errMalformed, ErrForbidden, ErrBadRequest, ErrConflict, ErrTooManyPermits, ErrNeverFits, ErrCredentialBudget}

func isFinal(err error) bool {
	for _, f := range finals {
		if errors.Is(err, f) {
			return true
		}
	}
	return false
}

// finalError is a final answer as a failure of the one shape: not counted.
func finalError(err error) *HitError {
	var he *HitError
	if errors.As(err, &he) && errors.Is(he, ErrNotCounted) {
		return he
	}
	return notCounted(nil, err)
}

// opError sorts a failed leader operation into not counted (it never
// reached the log) or outcome unknown, as a *HitError.
func opError(err error) *HitError {
	var he *HitError
	var hte *HTTPError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &he):
		return he
	case errors.Is(err, ErrNotLeader), errors.Is(err, ErrNoLeader):
		reason := ErrNotLeader
		if errors.Is(err, ErrNoLeader) {
			reason = ErrNoLeader
		}
		return notCounted(reason, err)
	case errors.Is(err, ErrNotCounted), errors.Is(err, ErrNotMember), errors.Is(err, ErrClockSkew), isDialError(err):
		return notCounted(nil, err)
	case errors.As(err, &hte) && hte.Status/100 == 4:
		return notCounted(nil, err)
	}
	return outcomeUnknown(err)
}

// handler serves op for another node.
func (op leaderOp[Req, Resp]) handler(n *Node) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var req Req
		if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20)).Decode(&req); err != nil {
			writeError(w, n.cfg.ID, fmt.Errorf("%w: %s: %w", errMalformed, op.name, err))
			return
		}
		if op.check != nil {
			if err := op.check(req); err != nil {
				writeError(w, n.cfg.ID, fmt.Errorf("%w: %w", errMalformed, err))
				return
			}
		}
		if !n.IsLeader() {
			writeError(w, n.cfg.ID, ErrNotLeader)
			return
		}
		resp, err := op.lead(n, r.Context(), req)
		if err != nil {
			writeError(w, n.cfg.ID, err)
			return
		}
		w.Header().Set(HeaderServedBy, n.cfg.ID)
		writeJSON(w, resp)
	}
}

// The leader operations and their messages.
type (
	setPolicyResult struct {
		Result string `json:"result"`
	}
	policyName struct {
		Name string `json:"name"`
	}
	keyRequest struct {
		Policy string `json:"policy"`
		Client string `json:"client"`
	}
	resetResult struct {
		Reset bool `json:"reset"`
	}
	policiesResult struct {
		Policies []policy.Policy `json:"policies"`
		// Version is the table's fsm.TableVersion (read-policies);
		// a leader of the previous release leaves it out.
		Version string `json:"version,omitempty"`
	}
	// replaceRequest is a whole-table write and the version it was
	// computed from ("*": whatever the table is).
	replaceRequest struct {
		Policies []policy.Policy `json:"policies"`
		IfMatch  string          `json:"ifMatch"`
	}
	none struct{}
)

var (
	opSetPolicy = leaderOp[policy.Policy, setPolicyResult]{name: "set-policy", wait: true,
		check:  func(p policy.Policy) error { return p.Validate() },
		format: fsm.PolicyFormat,
		run:    onPolicies((*policyWriter).setPolicy)}
	opDeletePolicy = leaderOp[policyName, none]{name: "delete-policy", wait: true,
		check: func(r policyName) error {
			if err := policy.ValidateName(r.Name); err != nil {
				return fmt.Errorf("%w %q", ErrUnknownPolicy, r.Name)
			}
			return nil
		},
		run: onPolicies((*policyWriter).deletePolicy)}
	opResetKey = leaderOp[keyRequest, resetResult]{name: "reset-key", wait: true,
		check: func(r keyRequest) error { return (Hit{Policy: r.Policy, Client: r.Client, Cost: 1}).Validate() },
		run:   onPolicies((*policyWriter).resetKey)}
	opPeek = leaderOp[keyRequest, PeekResult]{name: "peek",
		check: func(r keyRequest) error {
			return (Hit{Policy: r.Policy, Client: r.Client, Cost: 1}).Validate()
		},
		run: func(n *Node, ctx context.Context, r keyRequest) (PeekResult, error) {
			return n.peek(ctx, r.Policy, r.Client, false)
		}}
	opReadPolicies = leaderOp[none, policiesResult]{name: "read-policies", wait: true,
		run: onPolicies((*policyWriter).readPolicies)}
	opJoin = leaderOp[JoinRequest, JoinResult]{name: "join", wait: true,
		check: func(j JoinRequest) error {
			if err := j.Validate(); err != nil {
				return fmt.Errorf("join %s: %w", j.ID, err)
			}
			return nil
		},
		run: func(n *Node, _ context.Context, j JoinRequest) (JoinResult, error) {
			if err := n.joinOnLeader(j); err != nil {
				return JoinResult{}, err
			}
			return JoinResult{Index: n.raft.LastIndex()}, nil
		}}
	opRemove = leaderOp[RemoveRequest, none]{name: "remove", wait: true,
		check: func(r RemoveRequest) error {
			if r.ID == "" {
				return errors.New("remove: id is required")
			}
			return nil
		},
		run: func(n *Node, _ context.Context, r RemoveRequest) (none, error) {
			return none{}, n.removeOnLeader(r.ID)
		}}
	opTransfer = leaderOp[TransferRequest, TransferResult]{name: "transfer-leadership", wait: true,
		run: (*Node).transferLeadership}
	opReplaceTable = leaderOp[replaceRequest, TableChange]{name: "replace-table", wait: true,
		check: func(r replaceRequest) error {
			if r.IfMatch == "" {
				return errors.New("replace the policy table: no version to match")
			}
			return checkTable(r.Policies)
		},
		format: func(r replaceRequest) fsm.Format { return fsm.PoliciesFormat(r.Policies) },
		run:    onPolicies((*policyWriter).replacePolicies)}
	// opReplacePolicies is the previous release's replace, without a
	// version: served for its followers during a rolling upgrade (their
	// API took unconditional writes), never sent.
	opReplacePolicies = leaderOp[policiesResult, TableChange]{name: "replace-policies", wait: true,
		check:  func(r policiesResult) error { return checkTable(r.Policies) },
		format: func(r policiesResult) fsm.Format { return fsm.PoliciesFormat(r.Policies) },
		run: func(n *Node, ctx context.Context, r policiesResult) (TableChange, error) {
			return n.policyWriter.replacePolicies(ctx, replaceRequest{Policies: r.Policies, IfMatch: AnyVersion})
		}}
)

// Paths of the streamed leader operations.
const (
	backupPath  = leaderPrefix + "backup"
	restorePath = leaderPrefix + "restore"
)

// mountLeaderOps serves every leader operation.
func (n *Node) mountLeaderOps(mux *http.ServeMux) {
	for path, h := range map[string]http.HandlerFunc{
		opSetPolicy.path():       opSetPolicy.handler(n),
		opDeletePolicy.path():    opDeletePolicy.handler(n),
		opResetKey.path():        opResetKey.handler(n),
		opPeek.path():            opPeek.handler(n),
		opReadPolicies.path():    opReadPolicies.handler(n),
		opJoin.path():            opJoin.handler(n),
		opRemove.path():          opRemove.handler(n),
		opTransfer.path():        opTransfer.handler(n),
		opReplacePolicies.path(): opReplacePolicies.handler(n),
		opReplaceTable.path():    opReplaceTable.handler(n),
		opWriteCounter.path():    opWriteCounter.handler(n),
		restorePath:              func(w http.ResponseWriter, r *http.Request) { n.backups.serveRestore(w, r) },
	} {
		mux.HandleFunc("POST "+path, h)
	}
	// The backups exist once the node opened; the mux is built before.
	mux.HandleFunc("GET "+backupPath, func(w http.ResponseWriter, r *http.Request) { n.backups.serveBackup(w, r) })
}

// serveJoin is JoinPath: a server that is not a member yet may ask any
// member, which applies the rule (this is the one internal endpoint that
// passes a request on).
func (n *Node) serveJoin(w http.ResponseWriter, r *http.Request) {
	var j JoinRequest
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20)).Decode(&j); err != nil {
		writeError(w, n.cfg.ID, fmt.Errorf("%w: join: %w", errMalformed, err))
		return
	}
	if err := n.AuthorizeJoin(r, j.ID); err != nil {
		writeError(w, n.cfg.ID, err)
		return
	}
	res, err := n.JoinAt(r.Context(), j)
	if err != nil {
		writeError(w, n.cfg.ID, err)
		return
	}
	writeJSON(w, joinAnswer{Joined: j.ID, Index: res.Index})
}

// errMalformed marks a request a node refused as malformed.
var errMalformed = errors.New("malformed request")

// errorCodes names the cluster's errors on the internal endpoints, so the
// node that sent a request matches them with errors.Is as if it had run
// the operation itself. The first match gives the status.
var errorCodes = []struct {
	err    error
	code   string
	status int
}{
	{ErrNotLeader, "not_leader", http.StatusServiceUnavailable},
	{ErrNoLeader, "no_leader", http.StatusServiceUnavailable},
	{ErrClosed, "closed", http.StatusServiceUnavailable},
	{ErrUnknownPolicy, "unknown_policy", http.StatusNotFound},
	{ErrUnknownServer, "unknown_server", http.StatusNotFound},
	{ErrClusterUpgrading, "cluster_upgrading", http.StatusConflict},
	{ErrTableChanged, "table_changed", http.StatusConflict},
	{ErrConflict, "conflict", http.StatusConflict},
	{policy.ErrTooManyPolicies, "too_many_policies", http.StatusConflict},
	{ErrTooManyPermits, "too_many_permits", http.StatusConflict},
	{ErrClockSkew, "clock_skew", http.StatusConflict},
	{ErrNotEmpty, "not_empty", http.StatusConflict},
	{ErrInvalidBackup, "invalid_backup", http.StatusBadRequest},
	{errMalformed, "invalid_request", http.StatusBadRequest},
	// A leader refusing a removed node: 403 as before this code existed
	// (an older sender takes it as a definite refusal, nothing counted);
	// the sender answers its own callers 503 not_member.
	{ErrNotMember, "not_member", http.StatusForbidden},
	{ErrForbidden, "forbidden", http.StatusForbidden},
	{ErrOverLimit, "over_limit", http.StatusUnprocessableEntity},
	{ErrNotFound, "not_found", http.StatusNotFound},
	{ErrAlreadySettled, "already_settled", http.StatusConflict},
	{ErrWrongPolicy, "wrong_policy", http.StatusBadRequest},
	{ErrBadRequest, "bad_request", http.StatusBadRequest},
	{ErrNeverFits, "cost_exceeds_limit", http.StatusUnprocessableEntity},
	{ErrCredentialBudget, "credential_budget", http.StatusTooManyRequests},
	// Last, so a named cause gives the status: the leader knows nothing
	// was written (cluster time catching up, say), and the sender asks
	// again instead of reporting an outcome it cannot know. A sender that
	// predates the code takes the 503 as unknown, as it took the 500.
	{ErrNotCounted, "not_counted", http.StatusServiceUnavailable},
}

// writeError answers err as a problem document naming its cluster errors.
func writeError(w http.ResponseWriter, servedBy string, err error) {
	d := problem.New(http.StatusInternalServerError, "internal", err.Error())
	for _, c := range errorCodes {
		if errors.Is(err, c.err) {
			if d.Errors == nil {
				d = problem.New(c.status, c.code, err.Error())
			}
			d.Errors = append(d.Errors, c.code)
		}
	}
	w.Header().Set(HeaderServedBy, servedBy)
	problem.Write(w, d)
}

// codeErrors is the inverse of errorCodes.
func codeError(code string) error {
	for _, c := range errorCodes {
		if c.code == code {
			return c.err
		}
	}
	return nil
}
