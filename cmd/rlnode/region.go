package main

import (
	"errors"
	"flag"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/rlnode/rlnode/cluster"
	"github.com/rlnode/rlnode/httpapi"
	"github.com/rlnode/rlnode/metrics"
	"github.com/rlnode/rlnode/policy"
	"github.com/rlnode/rlnode/region"
	"github.com/rlnode/rlnode/tlsconf"
)

// regionFlags are serve's multi-region flags (docs/multi-region.md).
// Without --region nothing of it runs.
type regionFlags struct {
	name, parent, parentToken string
	lease, sliceWait          time.Duration
	brokenIgnoreDeadline      bool
}

func (r *regionFlags) flags(fs *flag.FlagSet) {
	fs.StringVar(&r.name, "region", "", "this cluster is region NAME of the parent given by --parent: its leader leases slices of the parent's global policies and the region decides their hits from them (docs/multi-region.md); off by default")
	fs.StringVar(&r.parent, "parent", "", "with --region: comma-separated HTTP addresses (host:port or URLs) of the parent cluster, used as given (proxies or load balancers in front of it are fine)")
	fs.StringVar(&r.parentToken, "parent-token", "", "with --region: the parent cluster's token, if it has one (default $RLNODE_PARENT_TOKEN)")
	fs.DurationVar(&r.lease, "region-lease", 5*time.Second, "with --region: how long each slice is asked to last (the parent cuts it at its window's end); a cut-off region decides from its slices for up to this long")
	fs.DurationVar(&r.sliceWait, "region-slice-wait", time.Second, "with --region: how long a hit of a global policy waits for a slice when the region holds none, before it fails 503 parent_unreachable (nothing counted)")
	fs.BoolVar(&r.brokenIgnoreDeadline, "debug-region-ignore-slice-deadline", false, "TESTING ONLY: a broken region that spends slices past their deadline (the multi-region test's stand-in that must fail)")
}

func (r *regionFlags) validate() []error {
	var errs []error
	switch {
	case r.name == "" && r.parent != "":
		errs = append(errs, errors.New("--parent needs --region NAME"))
	case r.name != "":
		cfg := r.config()
		if err := cfg.Validate(); err != nil {
			errs = append(errs, err)
		}
	}
	if r.sliceWait < 10*time.Millisecond || r.sliceWait > time.Minute {
		errs = append(errs, errors.New("--region-slice-wait: want 10ms to 1m"))
	}
	return errs
}

func (r *regionFlags) config() region.Config {
	return region.Config{Name: r.name, Parent: splitList(r.parent), Token: r.parentToken, Lease: r.lease,
		BrokenIgnoreDeadline: r.brokenIgnoreDeadline}
}

// seedable refuses a --policies file that defines what only the parent
// (a global policy, on a region) or a region's holder (a mirrored one)
// may write, as the policy API does.
func (r *regionFlags) seedable(file string, ps []policy.Policy) error {
	for _, p := range ps {
		switch {
		case p.Mirrored:
			return fmt.Errorf("%s: policy %q is marked mirrored: only a region's holder writes those, from its parent's table", file, p.Name)
		case p.IsGlobal() && r.name != "":
			return fmt.Errorf("%s: policy %q is global: with --region, global policies come from the parent (%s), defined there", file, p.Name, r.parent)
		}
	}
	return nil
}

// holder makes the region's holder when --region is set (nil
// otherwise); start runs it, and its stop ends it before the node
// closes.
func (r *regionFlags) holder(node *cluster.Node, tlsSrc *tlsconf.Source, logger hclog.Logger) (*region.Holder, error) {
	if r.name == "" {
		return nil, nil
	}
	cfg := r.config()
	cfg.Logger = logger.Named("region")
	if tlsSrc != nil && strings.Contains(r.parent, "https://") {
		// An https parent is reached with this node's TLS material: its
		// CA must trust the parent's certificates.
		cfg.Transport = &http.Transport{DialTLSContext: tlsSrc.DialTLS, MaxIdleConnsPerHost: 64, IdleConnTimeout: 90 * time.Second}
	}
	if cfg.BrokenIgnoreDeadline {
		logger.Warn("TESTING ONLY: this region spends slices past their deadline and can exceed global limits")
	}
	return region.New(cfg, node, node.Slices())
}

// start runs h (when there is one) and says how to stop it.
func (r *regionFlags) start(h *region.Holder, obs *metrics.Metrics, logger hclog.Logger) (stop func()) {
	if h == nil {
		return func() {}
	}
	obs.WatchRegion(regionView{h: h})
	h.Start()
	logger.Info("region holder started", "region", r.name, "parent", r.parent, "holder", region.HolderID(r.name))
	return h.Stop
}

// statusView is what GET /v1/cluster/region serves (nil: no region).
func (r *regionFlags) statusView(h *region.Holder, node *cluster.Node) httpapi.RegionViewer {
	if h == nil {
		return nil
	}
	return regionStatus{h: h, node: node, parent: r.parent}
}

// regionStatus adapts the holder's view to the HTTP API's.
type regionStatus struct {
	h      *region.Holder
	node   *cluster.Node
	parent string
}

func (s regionStatus) RegionStatus() httpapi.RegionBody {
	v := s.h.StatusView()
	lid, _ := s.node.Leader()
	b := httpapi.RegionBody{Region: v.Region, Holder: v.Leader, LeaderID: lid, KeysTotal: v.KeysTotal,
		StatsReadAtMs: unixMsOrZero(v.StatsAt), Keys: make([]httpapi.RegionKey, 0, len(v.Keys)),
		Parent: httpapi.RegionParent{Addrs: s.parent, Holder: region.HolderID(v.Region), Up: v.ParentUp,
			RTTMs: float64(v.ParentRTT.Microseconds()) / 1000, Calls: v.ParentCalls, Failures: v.ParentFailed,
			UnitsReturned: v.UnitsReturned}}
	for _, k := range v.Keys {
		b.Keys = append(b.Keys, httpapi.RegionKey{Policy: k.Policy, Client: k.Client, Held: k.Held, Got: k.Got,
			Spent: k.Spent, Returned: k.Returned, Short: k.Short})
	}
	return b
}

// regionView adapts the holder's view to the metrics room's.
type regionView struct{ h *region.Holder }

func (v regionView) RegionView() metrics.RegionView {
	rv := v.h.View()
	out := metrics.RegionView{Region: rv.Region, Leader: rv.Leader, ParentUp: rv.ParentUp, ParentRTTSeconds: rv.ParentRTT.Seconds(),
		ParentCalls: rv.ParentCalls, ParentFailed: rv.ParentFailed}
	for _, k := range rv.Keys {
		out.Keys = append(out.Keys, metrics.RegionKey{Policy: k.Policy, Client: k.Client, Held: k.Held, Spent: k.Spent,
			Short: k.Short, Returned: k.Returned, Got: k.Got})
	}
	return out
}

func unixMsOrZero(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}
