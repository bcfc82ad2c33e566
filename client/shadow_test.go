package client_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/rlnode/rlnode/client"
	"github.com/rlnode/rlnode/cluster/clustertest"
	"github.com/rlnode/rlnode/httpapi/apitest"
	"github.com/rlnode/rlnode/policy"
)

// TestCheckShadowPolicy: a shadow policy's would-be refusal reaches the Go
// client as an allowed Result with WouldRefuse set, from Check and from
// CheckAll.
func TestCheckShadowPolicy(t *testing.T) {
	sh := policy.Fixed("sh", 1, time.Minute)
	sh.Mode = policy.Shadow
	cl := apitest.Start(t, 1, clustertest.Options{Policies: []policy.Policy{sh}})
	c := newClient(t, client.Config{Addrs: []string{cl.Leader(10 * time.Second).HTTPAddr}})
	ctx := context.Background()
	if r, err := c.Check(ctx, "sh", "k", 1); err != nil || !r.Allowed || r.WouldRefuse {
		t.Fatalf("first: %+v %v", r, err)
	}
	if r, err := c.Check(ctx, "sh", "k", 1); err != nil || !r.Allowed || !r.WouldRefuse || r.Remaining != 0 {
		t.Fatalf("second: %+v %v; want allowed, would refuse", r, err)
	}
	m, err := c.CheckAll(ctx, client.Hit{Policy: "sh", Key: "k"}, client.Hit{Policy: "sh", Key: "other"})
	if err != nil || !m.Allowed || !m.Results[0].WouldRefuse || m.Results[1].WouldRefuse {
		t.Fatalf("CheckAll: %+v %v", m, err)
	}
}

// TestSetHeadersShadowAndCalendar: the middleware's headers carry a shadow
// policy's would-refuse and name calendar limits as the node does.
func TestSetHeadersShadowAndCalendar(t *testing.T) {
	h := http.Header{}
	month := 2_629_746 * time.Second
	client.SetHeaders(h, client.Result{Allowed: true, WouldRefuse: true, Policy: "q", Limit: 5, Window: month, ResetAt: time.Now().Add(time.Hour),
		Limits: []client.Limit{{Limit: 5, Window: month, ResetAt: time.Now().Add(time.Hour)}, {Limit: 1, Window: 24 * time.Hour, ResetAt: time.Now().Add(time.Hour)}}})
	if h.Get("X-Rlnode-Shadow") != "would-refuse" || !strings.Contains(h.Get("RateLimit-Policy"), `"q-1mo";q=5`) {
		t.Fatalf("headers %v", h)
	}
}
