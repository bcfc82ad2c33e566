package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"

	"github.com/rlnode/rlnode/httpapi"
)

const permitUsage = `usage:
  rlnode permit acquire POLICY CLIENT [--ttl 30s]   take a permit of a concurrency policy; prints its id
  rlnode permit release ID                          end the permit
  rlnode permit renew ID [--ttl 30s]                extend the permit to TTL from now
(and --addr, --cluster-token, --json as for every admin command; a permit is
bound to the token or client certificate that took it; a key holding its
limit of permits is an error saying when the earliest ends.)`

// runPermit is `rlnode permit acquire|release|renew` over /v1/permits.
func runPermit(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	verb, err := pickVerb(args, permitUsage, stdout, stderr, "acquire", "release", "renew")
	if verb == "" {
		return err
	}
	want := map[string]string{"acquire": "POLICY CLIENT", "release": "ID", "renew": "ID"}[verb]
	fs, a := newAdminFlags("permit "+verb, want, stderr)
	var ttl time.Duration
	if verb != "release" {
		fs.DurationVar(&ttl, "ttl", 0, "how long the permit lives unless released or renewed (default 30s, at most 1h)")
	}
	pos, err := parseAdmin(fs, args[1:])
	if err != nil {
		return err
	}
	if (verb == "acquire" && len(pos) != 2) || (verb != "acquire" && len(pos) != 1) {
		return usageErr("rlnode permit %s %s", verb, want)
	}
	ttlText := ""
	if ttl != 0 {
		ttlText = ttl.String()
	}
	var res map[string]any
	switch verb {
	case "acquire":
		err = a.call(ctx, http.MethodPost, httpapi.PermitsPath, map[string]string{"policy": pos[0], "client": pos[1], "ttl": ttlText}, &res)
	case "release":
		err = a.call(ctx, http.MethodDelete, httpapi.PermitsPath+"/"+url.PathEscape(pos[0]), nil, &res)
	case "renew":
		err = a.call(ctx, http.MethodPost, httpapi.PermitsPath+"/"+url.PathEscape(pos[0])+"/renew", map[string]string{"ttl": ttlText}, &res)
	}
	if err != nil {
		return err
	}
	if a.json {
		return printJSON(stdout, res)
	}
	switch verb {
	case "release":
		fmt.Fprintf(stdout, "released %s (%v of %v live)\n", pos[0], res["live"], res["limit"])
	default:
		fmt.Fprintf(stdout, "%s\texpires %s\t%v of %v live\n", res["permit"], res["expiresAt"], res["live"], res["limit"])
	}
	return nil
}
