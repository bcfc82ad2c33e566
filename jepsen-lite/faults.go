package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
)

// This file holds one function per kind of fault. Each picks its targets,
// fills in rec's Targets and Detail, starts the fault and returns how to
// heal it. A non-nil heal with an error means the fault is partly applied
// and must still be healed.

// apply starts fault name and returns how to heal it.
func (nm *nemesis) apply(ctx context.Context, name string, rec *faultRecord) (healFunc, error) {
	switch name {
	case nemPartitionLeader, nemPartitionHalf, nemPartitionRing, nemPartitionBridge:
		return nm.partition(ctx, name, rec)
	case nemKill, nemKillLeader:
		return nm.kill(ctx, name == nemKillLeader, rec)
	case nemPause, nemPauseLeader:
		return nm.pause(ctx, name == nemPauseLeader, rec)
	case nemClockForward:
		return nm.clockForward(ctx, rec)
	case nemClockBackward:
		return nm.clockBackward(ctx, rec)
	case nemClockStep:
		return nm.clockStep(ctx, rec)
	case nemMembership:
		return nm.membership(ctx, rec)
	case nemRaiseLimit:
		return nm.raiseLimit(ctx, rec)
	}
	return nil, fmt.Errorf("unknown nemesis %q", name)
}

// partition cuts the network along the grudge fault name describes;
// flushing the rules heals it.
func (nm *nemesis) partition(ctx context.Context, name string, rec *faultRecord) (healFunc, error) {
	if nm.net == nil {
		return nil, errors.New("partitions need network namespaces")
	}
	g, err := nm.partitionGrudge(ctx, name, rec)
	if err != nil {
		return nil, err
	}
	rec.Detail += "; " + g.describe(nm.cl.names())
	heal := func(context.Context) error { return nm.net.heal() }
	if err := nm.net.partition(ctx, g); err != nil {
		return heal, err
	}
	return heal, nil
}

// partitionGrudge picks who must not reach whom for partition fault name.
func (nm *nemesis) partitionGrudge(ctx context.Context, name string, rec *faultRecord) (grudge, error) {
	names := nm.cl.names()
	n := len(names)
	switch name {
	case nemPartitionLeader:
		l, err := nm.leader(ctx)
		if err != nil {
			return nil, err
		}
		rec.Targets = []string{names[l]}
		rec.Detail = "isolate leader " + names[l]
		return isolate(n, l), nil
	case nemPartitionHalf:
		minority, majority := halves(nm.rng.Perm(n))
		rec.Targets = pick(names, minority)
		rec.Detail = "minority|majority " + groupNames(names, minority, majority)
		return splitGroups(minority, majority), nil
	case nemPartitionRing:
		perm := nm.rng.Perm(n)
		g, err := majoritiesRing(perm)
		if err != nil {
			return nil, err
		}
		rec.Targets = pick(names, perm)
		rec.Detail = "ring " + strings.Join(pick(names, perm), "-") + " (each node sees only its ring neighbours)"
		return g, nil
	case nemPartitionBridge:
		perm := nm.rng.Perm(n)
		g, b, err := bridgeSplit(perm)
		if err != nil {
			return nil, err
		}
		rec.Targets = []string{names[b]}
		k := (n - 1) / 2
		rec.Detail = fmt.Sprintf("bridge %s between %s", names[b], groupNames(names, perm[:k], perm[k+1:]))
		return g, nil
	}
	return nil, fmt.Errorf("unknown partition %q", name)
}

func pick(names []string, idx []int) []string {
	out := make([]string, len(idx))
	for i, x := range idx {
		out[i] = names[x]
	}
	return out
}

// processTarget picks the node a kill or pause hits (the leader, or any
// running node) and records it as "<action> <node>".
func (nm *nemesis) processTarget(ctx context.Context, leader bool, action string, rec *faultRecord) (int, error) {
	i, err := nm.target(ctx, leader)
	if err != nil {
		return 0, err
	}
	name := nm.cl.names()[i]
	rec.Targets = []string{name}
	rec.Detail = action + " " + name
	return i, nil
}

// kill sends SIGKILL; the heal restarts the node on the same data dir and
// records how long it took to come back.
func (nm *nemesis) kill(ctx context.Context, leader bool, rec *faultRecord) (healFunc, error) {
	i, err := nm.processTarget(ctx, leader, "kill -9", rec)
	if err != nil {
		return nil, err
	}
	if err := nm.cl.kill(i); err != nil {
		return nil, err
	}
	return func(ctx context.Context) error {
		t := time.Now()
		if err := nm.cl.start(i); err != nil {
			return err
		}
		err := nm.cl.waitLive(ctx, nm.adm, i, 15*time.Second)
		rec.Extra["restartSeconds"] = time.Since(t).Seconds()
		return err
	}, nil
}

// pause sends SIGSTOP; the heal sends SIGCONT.
func (nm *nemesis) pause(ctx context.Context, leader bool, rec *faultRecord) (healFunc, error) {
	var i int
	var err error
	if leader {
		i, err = nm.processTarget(ctx, true, "SIGSTOP", rec)
	} else {
		i, err = nm.holderTarget(ctx, rec)
	}
	if err != nil {
		return nil, err
	}
	if err := nm.cl.pause(i); err != nil {
		return nil, err
	}
	return func(context.Context) error { return nm.cl.resume(i) }, nil
}

// clockForward skews the leader itself: its clock jumps ahead mid-term,
// and jumps back at heal, which the FSM's clamp has to absorb.
func (nm *nemesis) clockForward(ctx context.Context, rec *faultRecord) (healFunc, error) {
	i, err := nm.leader(ctx)
	if err != nil {
		return nil, err
	}
	name := nm.cl.names()[i]
	rec.Targets = []string{name}
	rec.Detail = fmt.Sprintf("leader %s clock +%s", name, nm.skew)
	return nm.skewClock(ctx, i, nm.skew)
}

// clockBackward skews a follower back, then hands it the leadership: a
// failover to a lagging clock, which may stretch windows but must never
// reopen one early.
func (nm *nemesis) clockBackward(ctx context.Context, rec *faultRecord) (healFunc, error) {
	l, err := nm.leader(ctx)
	if err != nil {
		return nil, err
	}
	var followers []int
	for _, i := range nm.cl.runningNodes() {
		if i != l {
			followers = append(followers, i)
		}
	}
	if len(followers) == 0 {
		return nil, errors.New("no running follower to skew")
	}
	i := followers[nm.rng.IntN(len(followers))]
	name := nm.cl.names()[i]
	rec.Targets = []string{name}
	rec.Detail = fmt.Sprintf("follower %s clock -%s, then leadership transferred to it", name, nm.skew)
	heal, err := nm.skewClock(ctx, i, -nm.skew)
	if err != nil {
		return heal, err
	}
	if err := nm.adm.transferLeadership(ctx, nm.cl.specs[l].url(), name); err != nil {
		// The skew is in place; a failed transfer is worth knowing
		// but the fault still ran.
		rec.Extra["transferError"] = err.Error()
		nm.log.Printf("clock-skew-backward: leadership transfer to %s failed: %v", name, err)
	} else {
		rec.Extra["leaderAfterTransfer"] = name
	}
	return heal, nil
}

// clockStep is issue 34's fault, as NTP steps clocks, with the nodes'
// own --max-clock-offset in force: the leader's clock steps ahead within
// the bound, then beyond it (the clock check must keep it from stamping);
// then the leadership goes to a follower whose clock is 0.9x the bound
// behind, and then to one 0.9x ahead (reproduction 1). Cluster time must
// move with none of it: a holder's units are never spent after their
// window ends, and no window admits more than its limit, judged in
// cluster time. Each step holds a quarter of the fault.
func (nm *nemesis) clockStep(ctx context.Context, rec *faultRecord) (healFunc, error) {
	l, err := nm.leader(ctx)
	if err != nil {
		return nil, err
	}
	names := nm.cl.names()
	within, beyond := nm.maxOffset*9/10, nm.maxOffset*3
	var stepped []int
	heal := func(ctx context.Context) error {
		var errs []error
		for _, i := range stepped {
			if nm.cl.running(i) {
				errs = append(errs, retry(ctx, 5*time.Second, func() error { return nm.adm.setClockOffset(ctx, nm.cl.specs[i].url(), 0) }))
			}
		}
		return errors.Join(errs...)
	}
	step := func(i int, off time.Duration) error {
		stepped = append(stepped, i)
		return nm.adm.setClockOffset(ctx, nm.cl.specs[i].url(), off)
	}
	hold := nm.fault / 4
	rec.Targets = []string{names[l]}
	rec.Detail = fmt.Sprintf("leader %s clock +%s (within --max-clock-offset), then +%s (beyond)", names[l], within, beyond)
	if err := step(l, within); err != nil {
		return heal, err
	}
	_ = sleepCtx(ctx, hold)
	if err := step(l, beyond); err != nil {
		return heal, err
	}
	_ = sleepCtx(ctx, hold)
	if err := step(l, 0); err != nil {
		return heal, err
	}
	var followers []int
	for _, i := range nm.cl.runningNodes() {
		if i != l {
			followers = append(followers, i)
		}
	}
	if len(followers) < 2 {
		return heal, errors.New("clock-step needs two running followers")
	}
	nm.rng.Shuffle(len(followers), func(a, b int) { followers[a], followers[b] = followers[b], followers[a] })
	behind, ahead := followers[0], followers[1]
	rec.Targets = append(rec.Targets, names[behind], names[ahead])
	rec.Detail += fmt.Sprintf("; leadership to %s (clock -%s), then to %s (clock +%s)", names[behind], within, names[ahead], within)
	// The lead goes to the follower behind; then its clock is set right
	// (a step on a leader) and the one ahead gets the lead: a leader
	// refuses a target more than the bound from its own clock, so the
	// two are never both off at a transfer.
	for _, to := range []struct {
		i   int
		off time.Duration
	}{{behind, -within}, {ahead, within}} {
		if err := step(to.i, to.off); err != nil {
			return heal, err
		}
		_ = sleepCtx(ctx, 1500*time.Millisecond) // let every node read the new clock
		from := l
		if cur, err := nm.leader(ctx); err == nil {
			from = cur
		}
		if err := nm.adm.transferLeadership(ctx, nm.cl.specs[from].url(), names[to.i]); err != nil {
			rec.Extra["transferError"] = err.Error()
			nm.log.Printf("clock-step: leadership transfer to %s failed: %v", names[to.i], err)
		}
		_ = sleepCtx(ctx, hold)
		if to.i == behind {
			if err := step(behind, 0); err != nil {
				return heal, err
			}
		}
	}
	return heal, nil
}

// skewClock sets node i's clock offset and returns the heal that sets it
// back to zero.
func (nm *nemesis) skewClock(ctx context.Context, i int, off time.Duration) (healFunc, error) {
	url := nm.cl.specs[i].url()
	heal := func(ctx context.Context) error {
		if !nm.cl.running(i) {
			return nil // a restarted node starts at offset 0 anyway
		}
		return retry(ctx, 5*time.Second, func() error { return nm.adm.setClockOffset(ctx, url, 0) })
	}
	if err := nm.adm.setClockOffset(ctx, url, off); err != nil {
		return heal, err
	}
	return heal, nil
}

// raiseLimit raises every policy's limits mid-run (never lowers them: the
// checker's models take each answer's reported limits as the version that
// decided it). Nothing to heal: the limits stay.
func (nm *nemesis) raiseLimit(ctx context.Context, rec *faultRecord) (healFunc, error) {
	if nm.pols == nil {
		return nil, errors.New("raise-limit needs --policies")
	}
	var urls []string
	for _, i := range nm.cl.runningNodes() {
		if !nm.cl.isPaused(i) {
			urls = append(urls, nm.cl.specs[i].url())
		}
	}
	done, err := nm.pols.raise(ctx, nm.adm, urls)
	rec.Detail = "raise limits: " + done
	if err != nil {
		return nil, err
	}
	nm.log.Printf("policies now: %s", nm.pols.describe())
	return nil, nil
}

// holderTarget picks a running follower for the pause: every node holds
// leases for the hot keys of leased policies it serves, and a follower
// paused past its lease, while the rest of the cluster goes on, is the
// classic lease bug the leased checks look for. Without a follower (or a
// leader) it falls back to any running node.
func (nm *nemesis) holderTarget(ctx context.Context, rec *faultRecord) (int, error) {
	l, err := nm.leader(ctx)
	if err != nil {
		return nm.processTarget(ctx, false, "SIGSTOP", rec)
	}
	var followers []int
	for _, i := range nm.cl.runningNodes() {
		if i != l && !nm.cl.isPaused(i) {
			followers = append(followers, i)
		}
	}
	if len(followers) == 0 {
		return nm.processTarget(ctx, false, "SIGSTOP", rec)
	}
	i := followers[nm.rng.IntN(len(followers))]
	name := nm.cl.names()[i]
	rec.Targets = []string{name}
	rec.Detail = "SIGSTOP lease holder (follower) " + name
	return i, nil
}
