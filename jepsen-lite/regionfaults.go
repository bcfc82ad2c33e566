package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/rlnode/rlnode/internal/delayproxy"
)

// The multi-cluster mode's faults: inside a region (kill a node or its
// leader, pause the leader while it holds slices) and between a region
// and its parent (cut the path, spike its delay), and in the parent
// (kill a node). Partitions inside a region need network namespaces the
// loopback mode does not have; the cut is the partition this mode runs
// (a region from its parent, both directions, connections held silent).
const (
	nemRegionKill        = "region-kill"
	nemRegionKillLeader  = "region-kill-leader"
	nemRegionPauseLeader = "region-pause-leader"
	nemRegionCut         = "region-cut"
	nemRegionSpike       = "region-delay-spike"
	nemParentKill        = "parent-kill"
)

var allRegionNemeses = []string{nemRegionKill, nemRegionKillLeader, nemRegionPauseLeader, nemRegionCut, nemRegionSpike, nemParentKill}

// parseRegionNemeses reads --nemesis in the multi-cluster mode: a comma
// list of the names above, "all" or "none".
func parseRegionNemeses(spec string) ([]string, error) {
	switch strings.TrimSpace(spec) {
	case "all":
		return append([]string(nil), allRegionNemeses...), nil
	case "none", "":
		return nil, nil
	}
	var out []string
	for _, n := range strings.Split(spec, ",") {
		n = strings.TrimSpace(n)
		known := false
		for _, k := range allRegionNemeses {
			known = known || k == n
		}
		if !known {
			return nil, fmt.Errorf("--nemesis %q: with --regions want a comma list of %s, or all, none", n, strings.Join(allRegionNemeses, ", "))
		}
		out = append(out, n)
	}
	return out, nil
}

// regionCluster is one region: its cluster and the proxies its nodes
// reach the parent's nodes through (one per parent node).
type regionCluster struct {
	name    string
	cl      *cluster
	proxies []*delayproxy.Proxy
	delay   time.Duration // each way, when not spiked
	broken  bool          // runs the --debug-region-ignore-slice-deadline stand-in
}

// regionNemesis injects the mode's faults, one at a time.
type regionNemesis struct {
	parent  *cluster
	regions []*regionCluster
	adm     *admin
	rng     *rand.Rand
	log     *logger
	t0      time.Time
	fault   time.Duration
	quiet   time.Duration
	// target, when set, is the only region the region faults hit (the
	// broken stand-in's run aims them at the broken region).
	target string
}

// run executes plan as the single-cluster nemesis does: at least the
// first mustRun faults, then until duration has passed.
func (nm *regionNemesis) run(ctx context.Context, plan []string, mustRun int, phaseStart time.Time, duration time.Duration) ([]faultRecord, error) {
	s := schedule{apply: nm.apply, log: nm.log, t0: nm.t0, fault: nm.fault, quiet: nm.quiet}
	return s.run(ctx, plan, mustRun, phaseStart, duration)
}

// pickRegion is the region a fault hits: --fault-region's, else random.
func (nm *regionNemesis) pickRegion() *regionCluster {
	for _, rg := range nm.regions {
		if rg.name == nm.target {
			return rg
		}
	}
	return nm.regions[nm.rng.IntN(len(nm.regions))]
}

func (nm *regionNemesis) apply(ctx context.Context, name string, rec *faultRecord) (healFunc, error) {
	rg := nm.pickRegion()
	switch name {
	case nemRegionKill, nemRegionKillLeader:
		return nm.kill(ctx, rg.cl, "region "+rg.name, name == nemRegionKillLeader, rec)
	case nemParentKill:
		return nm.kill(ctx, nm.parent, "the parent", false, rec)
	case nemRegionPauseLeader:
		i, err := nm.leaderOf(ctx, rg.cl)
		if err != nil {
			return nil, err
		}
		id := rg.cl.specs[i].id
		rec.Targets, rec.Detail = []string{id}, fmt.Sprintf("SIGSTOP region %s's leader %s (the region's holder, with its slices)", rg.name, id)
		if err := rg.cl.pause(i); err != nil {
			return nil, err
		}
		return func(context.Context) error { return rg.cl.resume(i) }, nil
	case nemRegionCut:
		rec.Targets, rec.Detail = []string{rg.name}, fmt.Sprintf("cut region %s off from the parent (its %d proxies forward nothing)", rg.name, len(rg.proxies))
		for _, p := range rg.proxies {
			p.Cut()
		}
		return func(context.Context) error {
			for _, p := range rg.proxies {
				p.Heal()
			}
			return nil
		}, nil
	case nemRegionSpike:
		d := 500*time.Millisecond + time.Duration(nm.rng.Int64N(int64(500*time.Millisecond)))
		rec.Targets, rec.Detail = []string{rg.name}, fmt.Sprintf("delay region %s's path to the parent %s each way (from %s)", rg.name, d.Round(time.Millisecond), rg.delay)
		rec.Extra["delayMs"] = d.Milliseconds()
		for _, p := range rg.proxies {
			p.SetDelay(d)
		}
		return func(context.Context) error {
			for _, p := range rg.proxies {
				p.SetDelay(rg.delay)
			}
			return nil
		}, nil
	}
	return nil, fmt.Errorf("unknown nemesis %q", name)
}

// kill SIGKILLs a node of cl (its leader with leader) and restarts it on
// the same data dir at the heal.
func (nm *regionNemesis) kill(ctx context.Context, cl *cluster, where string, leader bool, rec *faultRecord) (healFunc, error) {
	var i int
	if leader {
		var err error
		if i, err = nm.leaderOf(ctx, cl); err != nil {
			return nil, err
		}
	} else {
		running := cl.runningNodes()
		if len(running) == 0 {
			return nil, errors.New("no node running")
		}
		i = running[nm.rng.IntN(len(running))]
	}
	id := cl.specs[i].id
	rec.Targets = []string{id}
	rec.Detail = fmt.Sprintf("SIGKILL %s's node %s", where, id)
	if leader {
		rec.Detail = fmt.Sprintf("SIGKILL %s's leader %s (the region's holder, with its slices)", where, id)
	}
	if err := cl.kill(i); err != nil {
		return nil, err
	}
	return func(context.Context) error { return cl.start(i) }, nil
}

func (nm *regionNemesis) leaderOf(ctx context.Context, cl *cluster) (int, error) {
	var found int
	err := retry(ctx, 10*time.Second, func() error {
		i, err := findLeader(ctx, cl, nm.adm)
		found = i
		return err
	})
	return found, err
}

// healAll is the safety net after the schedule: every path healed at its
// own delay, no paused process, every node running.
func (nm *regionNemesis) healAll() error {
	var errs []error
	for _, rg := range nm.regions {
		for _, p := range rg.proxies {
			p.Heal()
			p.SetDelay(rg.delay)
		}
	}
	for _, cl := range append([]*cluster{nm.parent}, nm.clusters()...) {
		for i, s := range cl.specs {
			switch {
			case !cl.running(i):
				nm.log.Printf("heal-all: restarting %s", s.id)
				if err := cl.start(i); err != nil {
					errs = append(errs, err)
				}
			case cl.isPaused(i):
				if err := cl.resume(i); err != nil {
					errs = append(errs, err)
				}
			}
		}
	}
	return errors.Join(errs...)
}

func (nm *regionNemesis) clusters() []*cluster {
	var out []*cluster
	for _, rg := range nm.regions {
		out = append(out, rg.cl)
	}
	return out
}
