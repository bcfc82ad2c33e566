package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	neturl "net/url"
	"os"
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/rlnode/rlnode/cluster"
	"github.com/rlnode/rlnode/cmd/rlnode/internal/cli"
	"github.com/rlnode/rlnode/fsm"
	"github.com/rlnode/rlnode/httpapi"
	"github.com/rlnode/rlnode/tlsconf"
)

// adminFlags are shared by every command that talks to a running node.
type adminFlags struct {
	// addr is --addr, else $RLNODE_ADDR: one node or a comma list tried in
	// order (ETCDCTL_ENDPOINTS' rule); via is the one that answered.
	addr      string
	via       string
	token     string
	tokenFile string
	json      bool
	timeout   time.Duration
	tls       tlsconf.Files
	client    *http.Client
	// stderr, when set, hears of retries (a whole-table write's).
	stderr io.Writer
}

// newAdminFlags makes the flag set of an admin command; args names its
// positional arguments for --help ("" for none).
// Asked for, its help goes to help (stdout).
func newAdminFlags(name, args string, help io.Writer) (*flag.FlagSet, *adminFlags) {
	a := &adminFlags{}
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(help)
	setUsage(fs, name, args)
	fs.StringVar(&a.addr, "addr", cli.DefaultAddr(), "HTTP address of any node, or a comma-separated list tried in order until one answers (https:// is used when a --tls-* flag is given); the flag wins over $"+envAddr)
	fs.StringVar(&a.token, "cluster-token", os.Getenv("RLNODE_CLUSTER_TOKEN"), "cluster token (default $RLNODE_CLUSTER_TOKEN)")
	fs.StringVar(&a.tokenFile, "cluster-token-file", os.Getenv("RLNODE_CLUSTER_TOKEN_FILE"), "file holding the cluster token (default $RLNODE_CLUSTER_TOKEN_FILE)")
	fs.BoolVar(&a.json, "json", false, "print JSON instead of a table")
	fs.DurationVar(&a.timeout, "timeout", 30*time.Second, "how long to wait for the node")
	tlsFlags(fs, &a.tls)
	return fs, a
}

// envAddr is the variable --addr defaults to.
const envAddr = cli.EnvAddr

// addrs are the nodes --addr names, in order.
func (a *adminFlags) addrs() []string {
	return splitList(a.addr)
}

// prepare reads the token file and TLS files once, before any request.
func (a *adminFlags) prepare() error {
	if a.client != nil {
		return nil
	}
	if a.tokenFile != "" {
		if a.token != "" {
			return usageErr("--cluster-token-file and --cluster-token (or $RLNODE_CLUSTER_TOKEN) exclude each other: give the token one way")
		}
		tok, err := readTokenFile(a.tokenFile)
		if err != nil {
			return err
		}
		a.token = tok
	}
	if len(a.addrs()) == 0 {
		return usageErr("--addr (or $%s) names no node: give host:port or a URL, or a comma-separated list of them", envAddr)
	}
	a.client = http.DefaultClient
	if a.tls.Enabled() {
		src, err := tlsconf.Load(a.tls)
		if err != nil {
			return err
		}
		a.client = &http.Client{Transport: &http.Transport{DialTLSContext: src.DialTLS}}
	}
	return nil
}

// parseAdmin parses flags; flags may come before or after positional args.
func parseAdmin(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := cli.Parse(fs, args); err != nil {
			return nil, err
		}
		if fs.NArg() == 0 {
			return pos, nil
		}
		pos = append(pos, fs.Arg(0))
		args = fs.Args()[1:]
	}
}

// url is path on the node at addr.
func (a *adminFlags) url(addr, path string) string {
	url := cluster.BaseURL(addr) + path
	if a.tls.Enabled() {
		url = strings.Replace(url, "http://", "https://", 1)
	}
	return url
}

// call sends one request to a node and decodes a 2xx JSON answer into out.
func (a *adminFlags) call(ctx context.Context, method, path string, in, out any) error {
	_, err := a.callWith(ctx, method, path, nil, in, out)
	return err
}

// callWith is call with extra request headers; it returns the answer's.
func (a *adminFlags) callWith(ctx context.Context, method, path string, hdr http.Header, in, out any) (http.Header, error) {
	ctx, cancel := context.WithTimeout(ctx, a.timeout)
	defer cancel()
	var body io.Reader
	var size int64
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return nil, err
		}
		body, size = bytes.NewReader(b), int64(len(b))
		hdr = hdr.Clone()
		if hdr == nil {
			hdr = http.Header{}
		}
		hdr.Set("Content-Type", "application/json")
	}
	resp, url, err := a.sendWith(ctx, method, path, hdr, body, size)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return nil, fmt.Errorf("%s %s: read answer: %w", method, url, err)
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			return nil, fmt.Errorf("%s: decode answer: %w", url, err)
		}
	}
	return resp.Header, nil
}

// send is the one request every admin command makes: path on the first
// node of --addr that can be reached, with the token, returning a 2xx
// answer for the caller to read and the URL that gave it, or an
// *answerError carrying the problem of any other. A node that cannot be
// reached is passed over for the next (the request never left: nothing ran
// twice), as long as body can be read again from its start.
func (a *adminFlags) send(ctx context.Context, method, path, contentType string, body io.Reader, size int64) (*http.Response, string, error) {
	var hdr http.Header
	if contentType != "" {
		hdr = http.Header{"Content-Type": {contentType}}
	}
	return a.sendWith(ctx, method, path, hdr, body, size)
}

// sendWith is send with the request's headers.
func (a *adminFlags) sendWith(ctx context.Context, method, path string, hdr http.Header, body io.Reader, size int64) (*http.Response, string, error) {
	if err := a.prepare(); err != nil {
		return nil, "", err
	}
	var (
		resp *http.Response
		url  string
		err  error
	)
	for i, addr := range a.addrs() {
		if i > 0 {
			seeker, ok := body.(io.Seeker)
			if body != nil && !ok {
				break
			}
			if ok {
				if _, serr := seeker.Seek(0, io.SeekStart); serr != nil {
					break
				}
			}
		}
		url = a.url(addr, path)
		resp, err = a.sendTo(ctx, method, url, hdr, body, size)
		if err == nil || !isUnreachable(err) {
			a.via = addr
			break
		}
	}
	return resp, url, err
}

// isUnreachable reports an error of a request that never reached a node.
func isUnreachable(err error) bool {
	var oe *net.OpError
	return errors.As(err, &oe) && oe.Op == "dial"
}

// sendTo is one request to one node.
func (a *adminFlags) sendTo(ctx context.Context, method, url string, hdr http.Header, body io.Reader, size int64) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, method, url, body)
	if err != nil {
		return nil, usageErr("bad --addr %q: %v", a.addr, err)
	}
	req.ContentLength = size
	for k, vs := range hdr {
		req.Header[k] = vs
	}
	if a.token != "" {
		req.Header.Set("Authorization", "Bearer "+a.token)
	}
	resp, err := a.client.Do(req)
	if err != nil {
		return nil, reachError(method, url, err)
	}
	if resp.StatusCode/100 != 2 {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		resp.Body.Close()
		return nil, newAnswerError(url, resp.StatusCode, b)
	}
	return resp, nil
}

// answerError is a node's answer other than 2xx: its status, its problem
// code and detail.
type answerError struct {
	url    string
	status int
	code   string
	detail string
}

func newAnswerError(url string, status int, body []byte) *answerError {
	var p struct {
		Code string `json:"code"`
	}
	_ = json.Unmarshal(body, &p)
	return &answerError{url: url, status: status, code: p.Code, detail: problemDetail(body)}
}

func (e *answerError) Error() string {
	return fmt.Sprintf("%s: HTTP %d: %s", e.url, e.status, e.detail)
}

// isAnswer reports whether err is a node's answer with the problem code.
func isAnswer(err error, code string) bool {
	var ae *answerError
	return errors.As(err, &ae) && ae.code == code
}

// problemDetail returns the detail of a problem+json body, or the body.
func problemDetail(b []byte) string {
	var p struct {
		Detail string `json:"detail"`
	}
	if json.Unmarshal(b, &p) == nil && p.Detail != "" {
		return p.Detail
	}
	return strings.TrimSpace(string(b))
}

// reachError says once which node could not be reached and why (the
// client's error repeats the URL), with a hint when nothing listens there.
func reachError(method, url string, err error) error {
	var ue *neturl.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	if errors.Is(err, syscall.ECONNREFUSED) {
		return &refusedError{msg: fmt.Sprintf("%s %s: connection refused: no node listens there (is rlnode serve running? --addr or $%s names any node)", method, url, envAddr), err: err}
	}
	return fmt.Errorf("%s %s: %w", method, url, err)
}

// refusedError says no node listens at an address, in one line, and keeps
// the dial error for isUnreachable.
type refusedError struct {
	msg string
	err error
}

func (e *refusedError) Error() string { return e.msg }
func (e *refusedError) Unwrap() error { return e.err }

func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// peerRow is one line of `rlnode peers`: the configuration plus what each
// server says about itself, when it answers.
type peerRow struct {
	cluster.Peer
	Reachable    bool   `json:"reachable"`
	State        string `json:"state,omitempty"`
	Term         uint64 `json:"term,omitempty"`
	AppliedIndex uint64 `json:"appliedIndex,omitempty"`
	CommitIndex  uint64 `json:"commitIndex,omitempty"`
	LastContact  string `json:"lastContact,omitempty"`
	LiveWindows  int    `json:"liveWindows,omitempty"`
	// Version and Format: the member's release and log format (absent
	// from releases before formats were reported).
	Version string     `json:"version,omitempty"`
	Format  fsm.Format `json:"format,omitempty"`
}

func runPeers(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs, a := newAdminFlags("peers", "", stdout)
	if pos, err := parseAdmin(fs, args); err != nil {
		return err
	} else if len(pos) > 0 {
		return usageErr("peers takes no arguments")
	}
	var peers []cluster.Peer
	if err := a.call(ctx, http.MethodGet, "/v1/cluster/peers", nil, &peers); err != nil {
		return err
	}
	rows := make([]peerRow, len(peers))
	var wg sync.WaitGroup
	for i, p := range peers {
		rows[i].Peer = p
		if p.HTTPAddr == "" {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			pa := *a
			pa.addr, pa.timeout = p.HTTPAddr, 2*time.Second
			var st cluster.Status
			if pa.call(ctx, http.MethodGet, "/v1/status", nil, &st) == nil {
				r := &rows[i]
				r.Reachable, r.State, r.Term, r.AppliedIndex, r.CommitIndex = true, st.State, st.Term, st.AppliedIndex, st.CommitIndex
				r.LastContact, r.LiveWindows = st.LastContact, st.LiveWindows
				r.Version, r.Format = st.Version, st.Format
			}
		}()
	}
	wg.Wait()
	if a.json {
		return printJSON(stdout, rows)
	}
	if len(rows) == 0 {
		// A node in no cluster yet: say what it waits for.
		var st cluster.Status
		why := "this node belongs to no cluster yet"
		if a.call(ctx, http.MethodGet, "/v1/status", nil, &st) == nil && st.Waiting != "" {
			why = st.Waiting
		}
		fmt.Fprintf(stdout, "no servers: %s\n", why)
		return nil
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tRAFT ADDR\tHTTP ADDR\tLEADER\tVOTER\tSTATE\tVERSION\tTERM\tAPPLIED\tLAST CONTACT")
	for _, r := range rows {
		state, ver, term, applied := "unreachable", "-", "-", "-"
		if r.Reachable {
			state, ver, term, applied = r.State, memberVersion(r.Version, r.Format), fmt.Sprint(r.Term), fmt.Sprint(r.AppliedIndex)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%v\t%v\t%s\t%s\t%s\t%s\t%s\n", r.ID, r.RaftAddr, orDash(r.HTTPAddr), r.Leader, r.Voter, state, ver, term, applied, orDash(r.LastContact))
	}
	return tw.Flush()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func runStatus(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs, a := newAdminFlags("status", "", stdout)
	if pos, err := parseAdmin(fs, args); err != nil {
		return err
	} else if len(pos) > 0 {
		return usageErr("status takes no arguments")
	}
	var st cluster.Status
	if err := a.call(ctx, http.MethodGet, "/v1/status", nil, &st); err != nil {
		return err
	}
	if a.json {
		return printJSON(stdout, st)
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	for _, kv := range [][2]string{
		{"id", st.ID}, {"state", st.State}, {"term", fmt.Sprint(st.Term)},
		{"leader", fmt.Sprintf("%s (%s)", orDash(st.LeaderID), orDash(st.LeaderHTTPAddr))},
		{"last log index", fmt.Sprint(st.LastLogIndex)}, {"commit index", fmt.Sprint(st.CommitIndex)},
		{"applied index", fmt.Sprint(st.AppliedIndex)},
		{"last snapshot", fmt.Sprintf("index %d, term %d", st.LastSnapshotIndex, st.LastSnapshotTerm)},
		{"last contact", orDash(st.LastContact)}, {"live windows", fmt.Sprint(st.LiveWindows)},
		{"state digest", fmt.Sprintf("%s at index %d", st.Digest, st.DigestIndex)},
	} {
		fmt.Fprintf(tw, "%s:\t%s\n", kv[0], kv[1])
	}
	clock := fmt.Sprintf("%+.3fs from the median peer (max %s)", float64(st.ClockSkewMs)/1000, time.Duration(st.MaxClockOffset)*time.Millisecond)
	if st.ClockSkewed {
		clock += "  SKEWED: refuses to lead"
	}
	fmt.Fprintf(tw, "clock:\t%s\n", clock)
	if st.Halted != "" {
		fmt.Fprintf(tw, "HALTED:\t%s\n", st.Halted)
	}
	if st.Waiting != "" {
		fmt.Fprintf(tw, "waiting:\t%s\n", st.Waiting)
	}
	switch {
	case st.Removed != "":
		fmt.Fprintf(tw, "membership:\tREMOVED: %s\n", st.Removed)
	case st.Membership != "":
		fmt.Fprintf(tw, "membership:\t%s\n", st.Membership)
	}
	if st.RefusedPeer != "" {
		fmt.Fprintf(tw, "refused peer:\t%s\n", st.RefusedPeer)
	}
	return tw.Flush()
}

func runJoin(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs, a := newAdminFlags("join", "", stdout)
	var j cluster.JoinRequest
	var nonVoter bool
	fs.StringVar(&j.ID, "id", "", "id of the server to add (required)")
	fs.StringVar(&j.RaftAddr, "raft-addr", "", "its Raft address (required)")
	fs.StringVar(&j.HTTPAddr, "http-addr", "", "its HTTP address (required)")
	fs.BoolVar(&nonVoter, "non-voter", false, "add it as a non-voter (receives the log, does not vote)")
	if pos, err := parseAdmin(fs, args); err != nil {
		return err
	} else if len(pos) > 0 {
		return usageErr("join takes flags only")
	}
	voter := !nonVoter
	j.Voter = &voter
	if err := j.Validate(); err != nil {
		return usageErr("%v", strings.ReplaceAll(err.Error(), "\n", "; "))
	}
	if err := a.call(ctx, http.MethodPost, httpapi.JoinPath, j, nil); err != nil {
		return err
	}
	if a.json {
		return printJSON(stdout, map[string]any{"joined": j.ID, "voter": voter})
	}
	if voter {
		fmt.Fprintf(stdout, "joined %s (raft %s, http %s) as a non-voter; the leader promotes it to voter once it has caught up, or removes it if it does not within the leader's --join-catchup-timeout\n", j.ID, j.RaftAddr, j.HTTPAddr)
		return nil
	}
	fmt.Fprintf(stdout, "joined %s (raft %s, http %s, non-voter)\n", j.ID, j.RaftAddr, j.HTTPAddr)
	return nil
}

func runRemove(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs, a := newAdminFlags("remove", "ID", stdout)
	pos, err := parseAdmin(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usageErr("remove takes one argument, the server ID: rlnode remove [--addr URL] ID")
	}
	if err := a.call(ctx, http.MethodPost, httpapi.RemovePath, cluster.RemoveRequest{ID: pos[0]}, nil); err != nil {
		return err
	}
	if a.json {
		return printJSON(stdout, map[string]string{"removed": pos[0]})
	}
	fmt.Fprintf(stdout, "removed %s\n", pos[0])
	return nil
}

func runTransfer(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs, a := newAdminFlags("transfer-leadership", "[ID]", stdout)
	var fromSelf bool
	fs.BoolVar(&fromSelf, "from-self", false, "only if the node at --addr leads now; otherwise do nothing (a preStop hook)")
	pos, err := parseAdmin(fs, args)
	if err != nil {
		return err
	}
	if fromSelf {
		var st cluster.Status
		if err := a.call(ctx, http.MethodGet, "/v1/status", nil, &st); err != nil {
			return err
		}
		if st.State != "Leader" {
			fmt.Fprintf(stdout, "%s is not the leader (%s leads): nothing to hand over\n", st.ID, orDash(st.LeaderID))
			return nil
		}
	}
	if len(pos) > 1 {
		return usageErr("transfer-leadership takes at most one argument, the target ID: rlnode transfer-leadership [--addr URL] [ID]")
	}
	var req cluster.TransferRequest
	if len(pos) == 1 {
		req.ID = pos[0]
	}
	var res cluster.TransferResult
	if err := a.call(ctx, http.MethodPost, httpapi.TransferPath, req, &res); err != nil {
		return err
	}
	if a.json {
		return printJSON(stdout, res)
	}
	fmt.Fprintf(stdout, "leader is now %s\n", res.LeaderID)
	return nil
}

func runSnapshot(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs, a := newAdminFlags("snapshot", "", stdout)
	if pos, err := parseAdmin(fs, args); err != nil {
		return err
	} else if len(pos) > 0 {
		return usageErr("snapshot takes no arguments")
	}
	var res struct {
		Snapshot string `json:"snapshot"`
	}
	if err := a.call(ctx, http.MethodPost, "/v1/cluster/snapshot", nil, &res); err != nil {
		return err
	}
	if a.json {
		return printJSON(stdout, res)
	}
	fmt.Fprintf(stdout, "snapshot %s taken\n", res.Snapshot)
	return nil
}

func runHealth(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs, a := newAdminFlags("health", "", stdout)
	live := fs.Bool("live", false, "check liveness (/livez) instead of readiness (/readyz)")
	a.timeout = 3 * time.Second
	if pos, err := parseAdmin(fs, args); err != nil {
		return err
	} else if len(pos) > 0 {
		return usageErr("health takes no arguments")
	}
	path := "/readyz"
	if *live {
		path = "/livez"
	}
	if err := a.call(ctx, http.MethodGet, path, nil, nil); err != nil {
		return err
	}
	if !a.json {
		fmt.Fprintln(stdout, "ok")
	}
	return nil
}
