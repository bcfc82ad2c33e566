package main

import (
	"context"
	"errors"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/rlnode/rlnode/client"
	"github.com/rlnode/rlnode/cmd/rlnode/internal/proctest"
)

// The Go client against three real rlnode processes, the leader killed
// with -9 mid-traffic: no panic, never more admissions than the limit, every
// failure one of the documented typed errors, and the client follows the
// new leader.
func TestClientLeaderKillMidTraffic(t *testing.T) {
	proctest.Long(t)
	const limit = 60
	nodes := proctest.StartCluster(t, rlnodeBin, 3, "--limit", "60", "--window", "1h")
	leader := leaderOf(t, nodes)
	var addrs []string
	for _, n := range nodes {
		addrs = append(addrs, n.HTTPAddr)
	}
	c, err := client.New(client.Config{Addrs: addrs, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()

	var mu sync.Mutex
	var allowed, refused, unknown, notCounted int
	var wg sync.WaitGroup
	killed := make(chan struct{})
	var once sync.Once
	for w := 0; w < 6; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 20; i++ {
				if w == 0 && i == 4 {
					once.Do(func() { close(killed) })
				}
				res, err := c.Check(ctx, "default", "shared", 1)
				mu.Lock()
				switch {
				case err == nil && res.Allowed:
					allowed++
				case err == nil:
					refused++
				case errors.Is(err, client.ErrOutcomeUnknown):
					unknown++
				case errors.Is(err, client.ErrNotCounted):
					notCounted++
				default:
					t.Errorf("undocumented error: %v", err)
				}
				mu.Unlock()
			}
		}()
	}
	<-killed
	leader.Kill()
	wg.Wait()
	t.Logf("allowed %d, refused %d, outcome unknown %d, not counted %d", allowed, refused, unknown, notCounted)
	if allowed > limit {
		t.Fatalf("%d admissions with a limit of %d", allowed, limit)
	}
	var res client.Result
	proctest.Poll(t, 20*time.Second, func() error {
		res, err = c.Check(ctx, "default", "after-kill", 1)
		return err
	})
	if res.ServedBy == leader.ID || c.Members()[0] == leader.HTTPAddr {
		t.Fatalf("served by %s, members %v: the client still goes to the killed leader %s", res.ServedBy, c.Members(), leader.ID)
	}
	// What the survivors remember: every allowed hit counted (and perhaps
	// some whose outcome was unknown), never fewer.
	var st client.Result
	proctest.Poll(t, 10*time.Second, func() error {
		st, err = c.Check(ctx, "default", "shared", 1)
		return err
	})
	if used := limit - st.Remaining - boolInt(st.Allowed); used < int64(allowed) {
		t.Fatalf("the cluster counts %d hits for the key, %d were allowed", used, allowed)
	}
}

func boolInt(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

// The client over mutual TLS with the client certificate rlnode tls init
// writes; without a certificate the node refuses it: ErrUnauthorized.
func TestClientMutualTLS(t *testing.T) {
	dir := t.TempDir()
	proctest.TLSInit(t, rlnodeBin, dir, "n1")
	n := startTLSNode(t, dir, "n1")
	proctest.WaitReady(t, n, 15*time.Second)
	t.Setenv(client.EnvTLSCert, filepath.Join(dir, "client.pem"))
	t.Setenv(client.EnvTLSKey, filepath.Join(dir, "client-key.pem"))
	t.Setenv(client.EnvTLSCA, filepath.Join(dir, "ca.pem"))
	cfg, err := client.TLSFromEnv()
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.New(client.Config{Addrs: []string{n.HTTPAddr}, TLS: cfg})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	res, err := c.Check(context.Background(), "default", "tls-user", 1)
	if err != nil || !res.Allowed || res.Remaining != 9 {
		t.Fatalf("over mutual TLS: %+v, %v", res, err)
	}
	noCert, err := client.TLSFromFiles("", "", filepath.Join(dir, "ca.pem"))
	if err != nil {
		t.Fatal(err)
	}
	c2, err := client.New(client.Config{Addrs: []string{n.HTTPAddr}, TLS: noCert, Timeout: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	if _, err := c2.Check(context.Background(), "default", "tls-user", 1); !errors.Is(err, client.ErrUnauthorized) {
		t.Fatalf("a client without a certificate: %v, want ErrUnauthorized", err)
	}
}
