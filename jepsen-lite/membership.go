package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"
)

// membership removes a random member through the API, lets the clients
// keep calling it for removedGrace (a removed node must answer them "try
// another node", 503 not_member, never 403: the checker flags any 4xx
// that is not the caller's mistake), kills it, wipes its data dir and, at
// heal, starts it empty with --join so it has to be added
// again (as a non-voter, promoted by the leader once caught up) and catch
// up (from a snapshot, given the low snapshot threshold and trailing logs
// the nodes run with).
func (nm *nemesis) membership(ctx context.Context, rec *faultRecord) (healFunc, error) {
	names := nm.cl.names()
	running := nm.cl.runningNodes()
	if len(running) < len(names) {
		return nil, fmt.Errorf("only %d of %d nodes running", len(running), len(names))
	}
	i := running[nm.rng.IntN(len(running))]
	id := names[i]
	rec.Targets = []string{id}
	rec.Detail = fmt.Sprintf("remove %s, kill it, wipe its data, rejoin it empty at heal", id)
	var others []string
	for j, s := range nm.cl.specs {
		if j != i {
			others = append(others, s.url())
		}
	}
	if err := nm.removeMember(ctx, id, others); err != nil {
		return nil, err
	}
	nm.whileRemoved(ctx, i, rec)
	if err := nm.cl.kill(i); err != nil {
		return nil, err
	}
	if err := nm.cl.wipe(i); err != nil {
		return nil, err
	}
	nm.cl.setJoin(i, others)
	return func(ctx context.Context) error { return nm.rejoin(ctx, i, rec) }, nil
}

// removedGrace is how long a removed node keeps running, with clients
// calling it, before the fault stops it.
const removedGrace = 2 * time.Second

// whileRemoved waits removedGrace and records how long the removed node
// i took to fail its readiness (removedNotReadySeconds; -1: it never
// did).
func (nm *nemesis) whileRemoved(ctx context.Context, i int, rec *faultRecord) {
	base := nm.cl.specs[i].url()
	start := time.Now()
	rec.Extra["removedNotReadySeconds"] = -1.0
	for time.Since(start) < removedGrace {
		if err := nm.adm.ready(ctx, base); err != nil {
			rec.Extra["removedNotReadySeconds"] = time.Since(start).Seconds()
			break
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(50 * time.Millisecond):
		}
	}
	select {
	case <-ctx.Done():
	case <-time.After(time.Until(start.Add(removedGrace))):
	}
}

// removeMember asks the other members in turn to remove id: any member
// forwards the removal to the leader, and the leader may be moving.
func (nm *nemesis) removeMember(ctx context.Context, id string, others []string) error {
	err := retry(ctx, 15*time.Second, func() error {
		var errs []error
		for _, u := range others {
			err := nm.adm.remove(ctx, u, id)
			if err == nil {
				return nil
			}
			errs = append(errs, err)
		}
		return errors.Join(errs...)
	})
	if err != nil {
		return fmt.Errorf("remove %s: %w", id, err)
	}
	return nil
}

// rejoin heals the membership fault: it starts the wiped node empty, waits
// until it is a ready member and then a voter, and records how long each
// took and whether it caught up through a snapshot.
func (nm *nemesis) rejoin(ctx context.Context, i int, rec *faultRecord) error {
	id := nm.cl.specs[i].id
	t := time.Now()
	if err := nm.cl.start(i); err != nil {
		return err
	}
	st, err := nm.waitRejoined(ctx, i)
	rec.Extra["rejoinSeconds"] = time.Since(t).Seconds()
	if err != nil {
		return fmt.Errorf("%s did not rejoin: %w", id, err)
	}
	// It joined as a non-voter; the leader promotes it once its log has
	// caught up. Wait for that, so the next fault meets a full set of
	// voters, and record how long the catch-up took.
	err = nm.waitVoter(ctx, i)
	rec.Extra["promotedSeconds"] = time.Since(t).Seconds()
	if err != nil {
		return fmt.Errorf("%s rejoined but was not promoted to voter: %w", id, err)
	}
	rec.Extra["rejoinAppliedIndex"] = st.AppliedIndex
	rec.Extra["rejoinSnapshotIndex"] = st.LastSnapshotIndex
	// A node that starts empty and reports a snapshot index has installed
	// one (or taken one after catching up, which the low threshold makes
	// likely too); the log shows which.
	rec.Extra["snapshotAfterRejoin"] = st.LastSnapshotIndex > 0
	// Hand it the lead: its newest snapshot may be the one it installed,
	// taken before it was added back, and the next membership fault's
	// node joins from it: a configuration without its own leader (issue
	// 41: the joiner refused that leader for good). Best effort.
	rec.Extra["ledAfterRejoin"] = nm.adm.transferLeadership(ctx, nm.cl.specs[i].url(), id) == nil
	// The fault is healed only when the whole cluster is: every node a
	// voter again, as every node sees it (a node stuck outside is
	// otherwise only a warning, and every later membership fault skipped).
	if err := nm.waitWhole(ctx); err != nil {
		rec.Extra["clusterWhole"] = false
		return fmt.Errorf("after %s rejoined: %w", id, err)
	}
	rec.Extra["clusterWhole"] = true
	return nil
}

// waitWhole waits until every node's view of the configuration has every
// node as a voter.
func (nm *nemesis) waitWhole(ctx context.Context) error {
	want := nm.cl.names()
	return retry(ctx, 60*time.Second, func() error {
		for _, s := range nm.cl.specs {
			ps, err := nm.adm.peers(ctx, s.url())
			if err != nil {
				return fmt.Errorf("peers of %s: %w", s.id, err)
			}
			var voters []string
			for _, p := range ps {
				if p.Voter {
					voters = append(voters, p.ID)
				}
			}
			slices.Sort(voters)
			if !slices.Equal(voters, slices.Sorted(slices.Values(want))) {
				return fmt.Errorf("%s sees voters %v, want %v", s.id, voters, want)
			}
		}
		return nil
	})
}

// waitRejoined waits until node i's new incarnation is ready and returns
// its status.
func (nm *nemesis) waitRejoined(ctx context.Context, i int) (nodeStatus, error) {
	s := nm.cl.specs[i]
	var st nodeStatus
	err := retry(ctx, 30*time.Second, func() error {
		if !nm.cl.running(i) {
			return retryStop(fmt.Errorf("%s exited while rejoining", s.id))
		}
		if err := nm.adm.ready(ctx, s.url()); err != nil {
			return err
		}
		var err error
		st, err = nm.adm.status(ctx, s.url())
		return err
	})
	return st, err
}

// waitVoter waits until node i is a voter in the configuration it sees.
func (nm *nemesis) waitVoter(ctx context.Context, i int) error {
	s := nm.cl.specs[i]
	return retry(ctx, 60*time.Second, func() error {
		ps, err := nm.adm.peers(ctx, s.url())
		if err != nil {
			return err
		}
		for _, p := range ps {
			if p.ID == s.id && p.Voter {
				return nil
			}
			if p.ID == s.id {
				return fmt.Errorf("%s is still a non-voter", s.id)
			}
		}
		return fmt.Errorf("%s is not in the configuration", s.id)
	})
}
