package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"

	"github.com/rlnode/rlnode/httpapi"
	"github.com/rlnode/rlnode/internal/wire"
)

const counterUsage = `usage:
  rlnode counter set POLICY CLIENT N   the key's used count becomes N (within the policy's limit; 0 forgets it)
  rlnode counter inc POLICY CLIENT N   count N hits without a limit check (may pass the limit)
(and --addr, --cluster-token, --json as for every admin command)`

// runCounter is `rlnode counter set|inc`: seed or charge a key's count
// through the log (POST /v1/windows/POLICY/CLIENT).
func runCounter(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	kind, err := pickVerb(args, counterUsage, stdout, stderr, "set", "inc")
	if kind == "" {
		return err
	}
	fs, a := newAdminFlags("counter "+kind, "POLICY CLIENT N", stderr)
	pos, err := parseAdmin(fs, args[1:])
	if err != nil {
		return err
	}
	if len(pos) != 3 {
		return usageErr("rlnode counter %s POLICY CLIENT N", kind)
	}
	n, err := strconv.ParseInt(pos[2], 10, 64)
	if err != nil || n < 0 || (kind == "inc" && n < 1) {
		return usageErr("N %q: want a whole number (set: 0 or more; inc: 1 or more)", pos[2])
	}
	req := httpapi.CounterRequest{Set: &n}
	if kind == "inc" {
		req = httpapi.CounterRequest{Inc: &n}
	}
	var res struct {
		Remaining int64 `json:"remaining"`
		Limit     int64 `json:"limit"`
		ResetAt   int64 `json:"resetAt"`
	}
	if err := a.call(ctx, http.MethodPost, wire.WindowsPath+"/"+url.PathEscape(pos[0])+"/"+url.PathEscape(pos[1]), req, &res); err != nil {
		return err
	}
	if a.json {
		return printJSON(stdout, map[string]any{"policy": pos[0], "client": pos[1], kind: n, "remaining": res.Remaining, "limit": res.Limit, "resetAt": res.ResetAt})
	}
	fmt.Fprintf(stdout, "%s %s/%s %d: %d of %d remaining\n", kind, pos[0], pos[1], n, res.Remaining, res.Limit)
	return nil
}
