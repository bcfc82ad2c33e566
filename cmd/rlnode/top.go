package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"golang.org/x/term"

	"github.com/rlnode/rlnode/cluster"
	"github.com/rlnode/rlnode/httpapi"
)

// topView is what one frame of `rlnode top` shows: GET /v1/cluster/members
// and GET /v1/top, and on a region's node GET /v1/cluster/region, all
// admin-guarded.
type topView struct {
	Members []cluster.Member `json:"members"`
	Top     httpapi.TopBody  `json:"top"`
	// Region is the asked node's region view (absent outside a region).
	Region *httpapi.RegionBody `json:"region,omitempty"`
}

// runTop is `rlnode top`: the cluster, per-policy rates and the most
// limited clients, redrawn every second until q or Ctrl-C (--once: one
// table, for scripts).
func runTop(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs, a := newAdminFlags("top", "", stderr)
	var pol, by string
	var n int
	var once bool
	var every time.Duration
	fs.StringVar(&pol, "policy", "", "show one policy (default: all)")
	fs.StringVar(&by, "by", "refused", "rank clients by refused, allowed or would_refuse hits (would_refuse: shadow policies)")
	fs.IntVar(&n, "n", 5, "clients shown per policy (1 to 100)")
	fs.BoolVar(&once, "once", false, "print one table and exit")
	fs.DurationVar(&every, "interval", time.Second, "time between refreshes")
	pos, err := parseAdmin(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usageErr("rlnode top takes no arguments")
	}
	if by != "refused" && by != "allowed" && by != "would_refuse" {
		return usageErr("--by %q: want refused, allowed or would_refuse", by)
	}
	if n < 1 || n > 100 {
		return usageErr("-n %d: want 1 to 100", n)
	}
	q := url.Values{"by": {by}, "n": {strconv.Itoa(n)}}
	if pol != "" {
		q.Set("policy", pol)
	}
	frame := func() error {
		v, err := fetchTop(ctx, a, q.Encode())
		if err != nil {
			return err
		}
		if a.json {
			return printJSON(stdout, v)
		}
		return renderTop(stdout, v, time.Now())
	}
	if once {
		return frame()
	}
	return topLoop(ctx, stdout, every, frame)
}

func fetchTop(ctx context.Context, a *adminFlags, query string) (topView, error) {
	var v topView
	var ms struct {
		Members []cluster.Member `json:"members"`
	}
	if err := a.call(ctx, http.MethodGet, "/v1/cluster/members", nil, &ms); err != nil {
		return v, err
	}
	v.Members = ms.Members
	if err := a.call(ctx, http.MethodGet, "/v1/top?"+query, nil, &v.Top); err != nil {
		return v, err
	}
	var rb httpapi.RegionBody
	err := a.call(ctx, http.MethodGet, httpapi.RegionPath, nil, &rb)
	var ae *answerError
	switch {
	case errors.As(err, &ae) && ae.status == http.StatusNotFound:
		// Not a region's node (or a release before regions).
	case err != nil:
		return v, err
	default:
		v.Region = &rb
	}
	return v, nil
}

// topLoop redraws every interval until ctx ends or q is typed. On a
// terminal stdin goes raw so q needs no Enter (and is restored after).
func topLoop(ctx context.Context, stdout io.Writer, every time.Duration, frame func() error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if fd := int(os.Stdin.Fd()); term.IsTerminal(fd) {
		if old, err := term.MakeRaw(fd); err == nil {
			defer term.Restore(fd, old)
			stdout = crlf{stdout}
		}
	}
	go func() {
		// Owned by topLoop: stdin closing or q/Ctrl-C (raw mode turns
		// Ctrl-C into byte 3) ends the loop. A blocked read outlives the
		// loop only until the process exits.
		b := make([]byte, 1)
		for {
			k, err := os.Stdin.Read(b)
			if err != nil || (k == 1 && (b[0] == 'q' || b[0] == 'Q' || b[0] == 3)) {
				cancel()
				return
			}
		}
	}()
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		fmt.Fprint(stdout, "\x1b[H\x1b[2J")
		if err := frame(); err != nil {
			fmt.Fprintf(stdout, "rlnode top: %v\n", err)
		}
		fmt.Fprintln(stdout, "\n(q or Ctrl-C quits)")
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// crlf writes \r\n for \n: a raw terminal does not return the carriage.
type crlf struct{ w io.Writer }

func (c crlf) Write(p []byte) (int, error) {
	if _, err := c.w.Write([]byte(strings.ReplaceAll(string(p), "\n", "\r\n"))); err != nil {
		return 0, err
	}
	return len(p), nil
}

func renderTop(w io.Writer, v topView, now time.Time) error {
	leader, term, up := "none", uint64(0), 0
	for _, m := range v.Members {
		if m.Reachable {
			up++
			if m.Status.State == "Leader" {
				leader, term = m.ID, m.Status.Term
			}
		}
	}
	fmt.Fprintf(w, "cluster: leader %s, term %d, %d/%d members reachable   %s\n\n", leader, term, up, len(v.Members), now.UTC().Format(time.TimeOnly))
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "MEMBER\tROLE\tVERSION\tTERM\tCOMMIT\tAPPLIED\tLAG\tLAST CONTACT\tSKEW\tLOG\tSNAPSHOTS\tLEASES HELD\tLOCAL")
	for _, m := range v.Members {
		if !m.Reachable {
			fmt.Fprintf(tw, "%s\tunreachable\t\t\t\t\t\t%s\t\t\t\t\t\n", m.ID, lastPart(m.Error))
			continue
		}
		s := m.Status
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%d\t%d\t%s\t%+dms\t%s\t%s\t%d keys, %d units\t%d\n", m.ID, s.State, memberVersion(s.Version, s.Format), s.Term, s.CommitIndex, s.AppliedIndex, m.Lag,
			orDash(strings.TrimPrefix(s.LastContact, "never")), s.ClockSkewMs, humanBytes(s.LogBytes), humanBytes(s.SnapshotBytes),
			s.Leases.KeysHeld, s.Leases.UnitsHeld, s.Leases.DecidedLocal)
	}
	tw.Flush()
	t := v.Top
	exact := "exact"
	fmt.Fprintf(w, "\nhits in the last %s, by policy:\n", (time.Duration(t.WindowMs) * time.Millisecond).Round(time.Second))
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "POLICY\tALLOWED/S\tREFUSED/S\tALLOWED\tREFUSED")
	for _, p := range t.Policies {
		fmt.Fprintf(tw, "%s\t%.1f\t%.1f\t%d\t%d\n", p.Policy, p.AllowedPerSec, p.RefusedPerSec, p.Allowed, p.Refused)
	}
	tw.Flush()
	for _, p := range t.Policies {
		if len(p.Keys) == 0 {
			continue
		}
		if !p.Exact {
			exact = "approximate"
		}
		fmt.Fprintf(w, "\ntop %s clients of %s:\n", t.By, p.Policy)
		tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "CLIENT\tHITS\tAT LEAST")
		for _, k := range p.Keys {
			fmt.Fprintf(tw, "%s\t%d\t%d\n", k.Key, k.Count, k.Min)
		}
		tw.Flush()
	}
	var missing []string
	for _, nd := range t.Nodes {
		if !nd.OK {
			missing = append(missing, nd.ID)
		}
	}
	fmt.Fprintf(w, "\ncounts: %s", exact)
	if len(missing) > 0 {
		fmt.Fprintf(w, " for the nodes reached; without %s (unreachable)", strings.Join(missing, ", "))
	}
	if t.Dropped > 0 {
		fmt.Fprintf(w, ", %d hits not sampled (recorder busy)", t.Dropped)
	}
	fmt.Fprintln(w)
	if v.Region != nil {
		renderRegion(w, *v.Region)
	}
	return nil
}

// renderRegion is top's region section: the holder at the parent and
// per global key the slice units (docs/multi-region.md, "Operator's
// view").
func renderRegion(w io.Writer, r httpapi.RegionBody) {
	p := r.Parent
	fmt.Fprintf(w, "\nregion %s, holder %s at parent %s: ", r.Region, p.Holder, p.Addrs)
	if r.Holder {
		up := "down (no slice request succeeded in 3 s)"
		if p.Up {
			up = "up"
		}
		fmt.Fprintf(w, "%s, round trip %.1fms, %d calls, %d failed, %d units returned\n", up, p.RTTMs, p.Calls, p.Failures, p.UnitsReturned)
	} else {
		fmt.Fprintf(w, "held by the region's leader %s (ask it for the parent's round trip)\n", orDash(r.LeaderID))
	}
	if len(r.Keys) == 0 {
		fmt.Fprintln(w, "no global key has slices")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "GLOBAL POLICY\tCLIENT\tHELD\tGOT\tSPENT\tRETURNED\tSHORT")
	for _, k := range r.Keys {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%d\t%d\n", k.Policy, k.Client, k.Held, k.Got, k.Spent, k.Returned, k.Short)
	}
	tw.Flush()
	if r.KeysTotal > len(r.Keys) {
		fmt.Fprintf(w, "(%d of %d keys, most spent first)\n", len(r.Keys), r.KeysTotal)
	}
}

// lastPart is the innermost cause of a wrapped error ("connection
// refused"), short enough for a table cell.
func lastPart(s string) string {
	if i := strings.LastIndex(s, ": "); i >= 0 {
		s = s[i+2:]
	}
	return s
}

func humanBytes(b int64) string {
	switch {
	case b >= 1<<30:
		return fmt.Sprintf("%.1fGiB", float64(b)/(1<<30))
	case b >= 1<<20:
		return fmt.Sprintf("%.1fMiB", float64(b)/(1<<20))
	case b >= 1<<10:
		return fmt.Sprintf("%.1fKiB", float64(b)/(1<<10))
	}
	return fmt.Sprintf("%dB", b)
}
