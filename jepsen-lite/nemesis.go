package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"
)

// Nemesis names, as --nemesis takes them.
const (
	nemPartitionLeader = "partition-leader"
	nemPartitionHalf   = "partition-half"
	nemPartitionRing   = "partition-ring"
	nemPartitionBridge = "partition-bridge"
	nemKill            = "kill"
	nemKillLeader      = "kill-leader"
	nemPause           = "pause"
	nemPauseLeader     = "pause-leader"
	nemClockForward    = "clock-skew-forward"
	nemClockBackward   = "clock-skew-backward"
	nemClockStep       = "clock-step"
	nemMembership      = "membership"
	nemRaiseLimit      = "raise-limit"
)

// allNemeses is every fault, in a stable order for docs and errors.
var allNemeses = []string{
	nemPartitionLeader, nemPartitionHalf, nemPartitionRing, nemPartitionBridge,
	nemKill, nemKillLeader, nemPause, nemPauseLeader,
	nemClockForward, nemClockBackward, nemClockStep, nemMembership, nemRaiseLimit,
}

// aliases expand to several nemeses; "all" is every one that applies.
var aliases = map[string][]string{
	"partition":  {nemPartitionLeader, nemPartitionHalf, nemPartitionRing, nemPartitionBridge},
	"clock-skew": {nemClockForward, nemClockBackward},
	"all":        allNemeses,
}

func isPartition(name string) bool { return strings.HasPrefix(name, "partition-") }

// needsFive reports faults that only mean something with at least 5 nodes.
func needsFive(name string) bool { return name == nemPartitionRing || name == nemPartitionBridge }

// parseNemeses expands --nemesis into a de-duplicated list. Faults that
// need 5 nodes (or, for raise-limit, the run's own policies) are dropped
// quietly from an alias (noted in skipped) but are an error when named
// explicitly: the user asked for a test that cannot run.
func parseNemeses(spec string, nodes int, policies bool) (list []string, skipped []string, err error) {
	cannot := func(n string) string {
		switch {
		case needsFive(n) && nodes < 5:
			return "needs --nodes 5"
		case n == nemRaiseLimit && !policies:
			return "needs --policies"
		}
		return ""
	}
	seen := map[string]bool{}
	for _, raw := range strings.Split(spec, ",") {
		name := strings.TrimSpace(raw)
		if name == "" || name == "none" {
			continue
		}
		expanded, alias := aliases[name]
		if !alias {
			if !slices.Contains(allNemeses, name) {
				return nil, nil, fmt.Errorf("unknown nemesis %q (want a comma list of %s, or partition, clock-skew, all, none)",
					name, strings.Join(allNemeses, ", "))
			}
			if why := cannot(name); why != "" {
				return nil, nil, fmt.Errorf("nemesis %s %s", name, why)
			}
			expanded = []string{name}
		}
		for _, n := range expanded {
			if cannot(n) != "" {
				if !slices.Contains(skipped, n) {
					skipped = append(skipped, n)
				}
				continue
			}
			if !seen[n] {
				seen[n] = true
				list = append(list, n)
			}
		}
	}
	return list, skipped, nil
}

// healAllowance is the time a heal is expected to take beyond the fault
// itself: a restart has to come back up, and a wiped member has to rejoin
// and install a snapshot.
func healAllowance(name string) time.Duration {
	switch name {
	case nemKill, nemKillLeader:
		return 2 * time.Second
	case nemMembership:
		return 6 * time.Second
	case nemClockStep: // its steps and transfers run before the hold
		return 8 * time.Second
	default:
		return 500 * time.Millisecond
	}
}

// roundTime estimates one pass over list: each fault held for fault, its
// heal, then the quiet gap.
func roundTime(list []string, fault, quiet time.Duration) time.Duration {
	var d time.Duration
	for _, n := range list {
		d += fault + healAllowance(n) + quiet
	}
	return d
}

// effectiveDuration is --duration, extended (rounded up to a second) when
// it is too short for every listed nemesis to run once.
func effectiveDuration(list []string, duration, fault, quiet time.Duration) (time.Duration, bool) {
	need := roundTime(list, fault, quiet).Round(time.Second)
	if need > duration {
		return need, true
	}
	return duration, false
}

// buildPlan orders the faults: rounds of shuffled permutations of list, so
// the first round runs every nemesis once and later rounds repeat them in
// a new order; enough rounds to fill duration with some to spare (the run
// stops taking faults from the plan once duration has passed). A round
// never starts with the fault the previous one ended with.
func buildPlan(list []string, duration, fault, quiet time.Duration, rng *rand.Rand) []string {
	if len(list) == 0 {
		return nil
	}
	rt := roundTime(list, fault, quiet)
	rounds := 2
	if rt > 0 {
		rounds = int(duration/rt) + 2
	}
	var plan []string
	for range rounds {
		round := slices.Clone(list)
		rng.Shuffle(len(round), func(i, j int) { round[i], round[j] = round[j], round[i] })
		if len(plan) > 0 && len(round) > 1 && round[0] == plan[len(plan)-1] {
			round[0], round[len(round)-1] = round[len(round)-1], round[0]
		}
		plan = append(plan, round...)
	}
	return plan
}

// faultRecord is one fault as it happened, for the log, summary.json and
// the picture. Times are seconds since the run started.
type faultRecord struct {
	Name    string         `json:"name"`
	Targets []string       `json:"targets,omitempty"`
	Detail  string         `json:"detail,omitempty"`
	Start   float64        `json:"start"`
	End     float64        `json:"end"`
	Began   string         `json:"began"` // wall clock, RFC 3339
	Ended   string         `json:"ended"`
	Error   string         `json:"error,omitempty"` // the fault could not be (fully) applied or healed
	Extra   map[string]any `json:"extra,omitempty"`
}

// nemesis injects faults into the cluster. It runs in the orchestrating
// goroutine: one fault at a time, each healed before the next.
type nemesis struct {
	cl    *cluster
	net   *network // nil on loopback: no partitions
	adm   *admin
	rng   *rand.Rand
	log   *logger
	t0    time.Time
	fault time.Duration
	quiet time.Duration
	skew  time.Duration
	// maxOffset is the nodes' --max-clock-offset (the clock-step fault
	// steps clocks within and beyond it).
	maxOffset time.Duration
	pols      *policySet // the run's policies; nil without --policies
}

// run executes plan until duration has passed since phaseStart, but always
// at least the first mustRun faults (one full round). It returns every
// fault it ran, including failed attempts.
func (nm *nemesis) run(ctx context.Context, plan []string, mustRun int, phaseStart time.Time, duration time.Duration) ([]faultRecord, error) {
	s := schedule{apply: nm.apply, log: nm.log, t0: nm.t0, fault: nm.fault, quiet: nm.quiet}
	return s.run(ctx, plan, mustRun, phaseStart, duration)
}

// healFunc undoes one fault.
type healFunc func(ctx context.Context) error

// schedule runs faults one at a time: apply, hold, heal, quiet gap. Both
// modes' nemeses run through it; apply is theirs.
type schedule struct {
	apply func(ctx context.Context, name string, rec *faultRecord) (healFunc, error)
	log   *logger
	t0    time.Time
	fault time.Duration
	quiet time.Duration
}

func (s schedule) since() float64 { return time.Since(s.t0).Seconds() }

// run executes plan until duration has passed since phaseStart, but
// always at least the first mustRun faults.
func (s schedule) run(ctx context.Context, plan []string, mustRun int, phaseStart time.Time, duration time.Duration) ([]faultRecord, error) {
	var out []faultRecord
	for i, name := range plan {
		if ctx.Err() != nil {
			return out, ctx.Err()
		}
		if i >= mustRun && time.Since(phaseStart)+s.fault+s.quiet > duration {
			break
		}
		rec := s.runOne(ctx, name)
		out = append(out, rec)
		if ctx.Err() != nil {
			return out, ctx.Err()
		}
		if err := sleepCtx(ctx, s.quiet); err != nil {
			return out, err
		}
	}
	return out, nil
}

// runOne applies a fault, holds it, heals it and records all of it.
func (s schedule) runOne(ctx context.Context, name string) faultRecord {
	rec := faultRecord{Name: name, Start: s.since(), Began: time.Now().Format(time.RFC3339Nano), Extra: map[string]any{}}
	heal, err := s.apply(ctx, name, &rec)
	if err != nil {
		rec.Error = "apply: " + err.Error()
		s.log.Loudf("fault %s could not be applied: %v", name, err)
	} else {
		s.log.Printf("FAULT START %-19s %s", name, rec.Detail)
		_ = sleepCtx(ctx, s.fault)
	}
	if heal != nil {
		// Heal even when the run is being cancelled: the teardown that
		// follows works better on a cluster without stopped processes.
		hctx := context.WithoutCancel(ctx)
		if herr := heal(hctx); herr != nil {
			rec.Error = strings.TrimPrefix(rec.Error+"; heal: "+herr.Error(), "; ")
			s.log.Loudf("fault %s: heal failed: %v", name, herr)
		}
	}
	rec.End, rec.Ended = s.since(), time.Now().Format(time.RFC3339Nano)
	if len(rec.Extra) == 0 {
		rec.Extra = nil
	}
	s.log.Printf("FAULT END   %-19s after %.1fs%s", name, rec.End-rec.Start, errSuffix(rec.Error))
	return rec
}

func errSuffix(s string) string {
	if s == "" {
		return ""
	}
	return " (error: " + s + ")"
}

// target picks the leader (leader=true) or any running node.
func (nm *nemesis) target(ctx context.Context, leader bool) (int, error) {
	if leader {
		return nm.leader(ctx)
	}
	running := nm.cl.runningNodes()
	if len(running) == 0 {
		return 0, errors.New("no node running")
	}
	return running[nm.rng.IntN(len(running))], nil
}

// leader finds the current leader: among the running, unpaused nodes that
// call themselves leader, the one with the highest term (a deposed leader
// on the minority side may not know yet). It retries for a few seconds,
// since a leader may be being elected right now.
func (nm *nemesis) leader(ctx context.Context) (int, error) {
	var found int
	err := retry(ctx, 10*time.Second, func() error {
		i, err := findLeader(ctx, nm.cl, nm.adm)
		found = i
		return err
	})
	return found, err
}

func findLeader(ctx context.Context, cl *cluster, adm *admin) (int, error) {
	type answer struct {
		i  int
		st nodeStatus
		ok bool
	}
	running := cl.runningNodes()
	answers := make([]answer, len(running))
	var wg sync.WaitGroup
	for k, i := range running {
		if cl.isPaused(i) {
			continue
		}
		wg.Go(func() {
			st, err := adm.status(ctx, cl.specs[i].url())
			answers[k] = answer{i: i, st: st, ok: err == nil}
		})
	}
	wg.Wait()
	best, bestTerm := -1, uint64(0)
	for _, a := range answers {
		if a.ok && a.st.State == "Leader" && (best < 0 || a.st.Term > bestTerm) {
			best, bestTerm = a.i, a.st.Term
		}
	}
	if best < 0 {
		return 0, errors.New("no node reports itself leader")
	}
	return best, nil
}

// healAll is the safety net after the schedule: no partition, no paused
// process, no skewed clock, every node running.
func (nm *nemesis) healAll(ctx context.Context) error {
	var errs []error
	if nm.net != nil {
		if err := nm.net.heal(); err != nil {
			errs = append(errs, err)
		}
	}
	for i, s := range nm.cl.specs {
		if !nm.cl.running(i) {
			nm.log.Printf("heal-all: restarting %s", s.id)
			if err := nm.cl.start(i); err != nil {
				errs = append(errs, err)
			}
			continue
		}
		if nm.cl.isPaused(i) {
			if err := nm.cl.resume(i); err != nil {
				errs = append(errs, err)
			}
		}
	}
	for i, s := range nm.cl.specs {
		if nm.cl.running(i) {
			if err := retry(ctx, 10*time.Second, func() error { return nm.adm.setClockOffset(ctx, s.url(), 0) }); err != nil {
				errs = append(errs, fmt.Errorf("reset clock of %s: %w", s.id, err))
			}
		}
	}
	return errors.Join(errs...)
}
