// Package region is a regional cluster's side of global budgets: its
// leader is the region's one holder of slices of its parent's global
// policies (holder id "region:NAME"), asked for by demand through the
// parent's lease API and recorded in the region's log, where the state
// machine spends them on strict hits (fsm/slice.go); and it mirrors the
// parent's global policies into the region's table. DESIGN.md has the
// safety argument.
package region

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/rlnode/rlnode/cluster"
	"github.com/rlnode/rlnode/fsm"
	"github.com/rlnode/rlnode/lease"
	"github.com/rlnode/rlnode/policy"
)

// Node is what the holder needs of the region's node.
type Node interface {
	IsLeader() bool
	Policies() []policy.Policy
	SetPolicy(ctx context.Context, p policy.Policy) (string, error)
	DeletePolicy(ctx context.Context, name string) error
}

// Slices records the parent's grants in the region's log and reads them
// back: *cluster.Slices.
type Slices interface {
	WriteSlices(items []cluster.SliceWrite) ([]int64, error)
	SliceStats() []fsm.SliceStat
}

var _ Slices = (*cluster.Slices)(nil)

// Config configures a Holder.
type Config struct {
	// Name is the region's name: the holder id at the parent is
	// "region:" + Name.
	Name string
	// Parent lists the parent cluster's HTTP addresses (host:port or
	// URLs), used as given (a region reaches its parent through proxies
	// or load balancers, never through the members the parent lists).
	Parent []string
	// Token is the parent's token, if it has one.
	Token string
	// Transport, when set, carries the calls to the parent (an https
	// parent: the node's own TLS material).
	Transport http.RoundTripper
	// Lease is how long each slice is asked to last (default 5s; the
	// parent cuts it at its window's end). Longer: fewer round trips,
	// and a cut-off region decides longer; units a dead region held are
	// lost to the others for as long.
	Lease time.Duration
	// MirrorEvery is how often the parent's global policies are read
	// (default 2s).
	MirrorEvery time.Duration
	// Tick is how often demand is read and slices are asked for
	// (default 20ms).
	Tick time.Duration
	// Logger receives the holder's log; nil discards it.
	Logger Logger
	// BrokenIgnoreDeadline makes the holder record every slice as usable
	// for a minute, ignoring its deadline: the broken stand-in the
	// multi-region test must catch. Testing only.
	BrokenIgnoreDeadline bool
}

// Validate says what is wrong with c, if anything, after defaults.
func (c *Config) Validate() error {
	if c.Lease == 0 {
		c.Lease = 5 * time.Second
	}
	if c.MirrorEvery == 0 {
		c.MirrorEvery = 2 * time.Second
	}
	if c.Tick == 0 {
		c.Tick = 20 * time.Millisecond
	}
	if c.Logger == nil {
		c.Logger = nopLogger{}
	}
	var errs []error
	if err := validName(c.Name); err != nil {
		errs = append(errs, err)
	}
	if len(c.Parent) == 0 {
		errs = append(errs, errors.New("region: --parent needs at least one address of the parent cluster"))
	}
	if c.Lease < 100*time.Millisecond || c.Lease > lease.MaxLease {
		errs = append(errs, fmt.Errorf("region: lease %s: want 100ms to %s", c.Lease, lease.MaxLease))
	}
	if c.MirrorEvery < 100*time.Millisecond || c.Tick < time.Millisecond {
		errs = append(errs, fmt.Errorf("region: mirror every %s, tick %s: too short", c.MirrorEvery, c.Tick))
	}
	return errors.Join(errs...)
}

// Logger is the holder's log (hclog's and slog's loggers both fit).
type Logger interface {
	Debug(msg string, args ...any)
	Warn(msg string, args ...any)
}

type nopLogger struct{}

func (nopLogger) Debug(string, ...any) {}
func (nopLogger) Warn(string, ...any)  {}

// MaxNameLen bounds a region's name.
const MaxNameLen = 64

func validName(name string) error {
	if name == "" || len(name) > MaxNameLen {
		return fmt.Errorf("region: name %q: want 1 to %d characters", name, MaxNameLen)
	}
	for _, c := range name {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune("-_.", c)) {
			return fmt.Errorf("region: name %q may only contain letters, digits and - _ .", name)
		}
	}
	return nil
}

// HolderID is the region's holder id at the parent.
func HolderID(name string) string { return "region:" + name }
