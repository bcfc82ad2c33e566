package main

// The attack on clock readings (issue 35, item 9), on real processes: a
// token cluster without TLS reads every member's clock, release and log
// format at its HTTP address once a second. Before the fix the requests
// carried the cluster token as a bearer, so whoever bound a down
// member's port received it, and by answering a newer format opened the
// version gate while the member was of an older release (which then
// halted on the entries). docs/security.md's row names this test.

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rlnode/rlnode/cmd/rlnode/internal/proctest"
	"github.com/rlnode/rlnode/fsm"
)

// impostor is a plain HTTP listener on a down member's port: it records
// every request's headers and answers each as that member with a clock
// reading of a format no release has.
type impostor struct {
	id  string
	srv *http.Server

	mu       sync.Mutex
	requests []string        // method and path
	headers  []http.Header   // as received
	paths    map[string]bool // paths asked
}

func startImpostor(t *testing.T, addr, id string) *impostor {
	t.Helper()
	var ln net.Listener
	proctest.Poll(t, 10*time.Second, func() (err error) {
		ln, err = net.Listen("tcp", addr) // the member just exited: its port frees at once
		return err
	})
	im := &impostor{id: id, paths: map[string]bool{}}
	im.srv = &http.Server{Handler: im, ReadHeaderTimeout: 5 * time.Second}
	go im.srv.Serve(ln)
	t.Cleanup(func() { im.srv.Close() })
	return im
}

func (im *impostor) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	im.mu.Lock()
	im.requests = append(im.requests, r.Method+" "+r.URL.Path)
	im.headers = append(im.headers, r.Header.Clone())
	im.paths[r.URL.Path] = true
	im.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(map[string]any{"id": im.id, "nowMs": time.Now().UnixMilli(), "version": "v99.0.0", "format": 99})
}

// leaked returns the requests whose headers carried token anywhere.
func (im *impostor) leaked(token string) (leaks []string, total int, clockAsked bool) {
	im.mu.Lock()
	defer im.mu.Unlock()
	for i, h := range im.headers {
		for name, vs := range h {
			for _, v := range vs {
				if strings.Contains(v, token) {
					leaks = append(leaks, fmt.Sprintf("%s (%s: %s)", im.requests[i], name, v))
				}
			}
		}
	}
	return leaks, len(im.requests), im.paths["/internal/v1/clock"]
}

// TestAttackClockReadingFromADownMembersPort: a token cluster, no TLS, in
// mid-upgrade: n1 runs the previous release (its format unknown to the
// gate, which stays closed), n2 and n3 this one. n1 stops, as in every
// rolling upgrade, and an impostor binds its HTTP port answering as n1
// with format 99. It must never receive the cluster token, and the gate
// must stay closed: the cluster's format stays the oldest on n2 and n3,
// and a write that needs the new format is still refused with 409
// cluster_upgrading. n2 and n3 keep serving (their clocks prove to each
// other). Before the fix the impostor got the token in every reading
// request and n2 and n3 opened the gate within a second.
func TestAttackClockReadingFromADownMembersPort(t *testing.T) {
	proctest.Long(t)
	oldBin, _ := buildUpgradeBins(t)
	const token = "clock-attack-token-5c1e"
	flags := []string{"--cluster-token", token}
	n1 := proctest.StartNode(t, oldBin, "n1", flags...)
	proctest.WaitReady(t, n1, 15*time.Second)
	n2 := proctest.StartNode(t, rlnodeBin, "n2", append([]string{"--join", n1.URL()}, flags...)...)
	n3 := proctest.StartNode(t, rlnodeBin, "n3", append([]string{"--join", n1.URL()}, flags...)...)
	for _, n := range []*proctest.Node{n2, n3} {
		proctest.WaitReady(t, n, 15*time.Second)
	}
	proctest.WaitVoters(t, n1, 3, 30*time.Second)
	live := []*proctest.Node{n2, n3}
	clusterFormatIs(t, live, fsm.OldestFormat)
	proctest.Poll(t, 15*time.Second, func() error {
		r, err := proctest.DoRaw("PUT", n2.URL()+"/v1/policies/clockattack", token, []byte(`{"algorithm":"fixed_window","limits":[{"limit":1000,"window":"1h"}]}`))
		if err != nil || r.Status/100 != 2 {
			return fmt.Errorf("put policy: %v %d %s", err, r.Status, r.Raw)
		}
		return nil
	})

	if code := n1.Signal(syscall.SIGTERM, 30*time.Second); code == -1 {
		n1.Kill()
	}
	im := startImpostor(t, n1.HTTPAddr, "n1")

	// The clock check reads every member each second: give it several
	// rounds, watching the gate on both live nodes all along.
	deadline := time.Now().Add(8 * time.Second)
	for time.Now().Before(deadline) {
		for _, n := range live {
			st, err := proctest.Status(n)
			if err != nil {
				continue // an election after n1 left
			}
			if f, _ := st["clusterFormat"].(float64); fsm.Format(f) != fsm.OldestFormat {
				t.Errorf("%s: the cluster's format is %v with n1 down and an impostor on its port answering format 99; want %d (n1's format is unknown)",
					n.ID, st["clusterFormat"], fsm.OldestFormat)
				deadline = time.Now()
			}
		}
		time.Sleep(300 * time.Millisecond)
	}
	// The operator's views ask every member too (its status with its
	// release and format, its top keys): n1 is shown without either.
	for _, path := range []string{"/v1/cluster/members", "/v1/top?policy=clockattack"} {
		r, err := n2.Do("GET", path, token, nil)
		if err != nil || r.Status != 200 {
			t.Fatalf("GET %s with n1 down: %v %d %s", path, err, r.Status, r.Raw)
		}
		if path == "/v1/cluster/members" {
			members, _ := r.JSON["members"].([]any)
			for _, raw := range members {
				m, _ := raw.(map[string]any)
				if ver, _ := m["version"].(string); m["id"] == "n1" && (m["format"] != float64(0) || ver != "") {
					t.Errorf("members via n2 show the impostor's answer for n1: %v", m)
				}
			}
		}
	}
	leaks, total, clockAsked := im.leaked(token)
	t.Logf("the impostor on %s got %d requests; %d carried the cluster token", n1.HTTPAddr, total, len(leaks))
	if !clockAsked {
		t.Fatalf("the impostor on n1's port was never asked for a clock reading (%d requests): the attack did not run", total)
	}
	if len(leaks) > 0 {
		t.Errorf("the impostor on n1's port received the cluster token in %d of %d requests, e.g. %s", len(leaks), total, leaks[0])
	}

	w := gatedWrites[0]
	proctest.Poll(t, 20*time.Second, func() error {
		r, err := proctest.DoRaw(w.method, n2.URL()+w.path, token, []byte(w.body))
		if err != nil {
			return err
		}
		if r.Status != 409 || !strings.Contains(string(r.Raw), "cluster_upgrading") {
			if r.Status/100 == 2 {
				t.Fatalf("%s with n1 (previous release) down and an impostor on its port: %d %s; want 409 cluster_upgrading", w.what, r.Status, r.Raw)
			}
			return fmt.Errorf("%s: %d %s; want 409 cluster_upgrading", w.what, r.Status, r.Raw)
		}
		return nil
	})
	for _, n := range live {
		proctest.Poll(t, 20*time.Second, func() error {
			r, err := n.Do("GET", "/check/clockattack/c1", token, nil)
			if err != nil || r.Status != 200 {
				return fmt.Errorf("check through %s with n1 down: %v %d %s", n.ID, err, r.Status, r.Raw)
			}
			return nil
		})
	}
}

// clusterFormatIs waits until every node's status shows the cluster's
// format as want.
func clusterFormatIs(t *testing.T, nodes []*proctest.Node, want fsm.Format) {
	t.Helper()
	for _, n := range nodes {
		proctest.Poll(t, 15*time.Second, func() error {
			st, err := proctest.Status(n)
			if err != nil {
				return err
			}
			if f, _ := st["clusterFormat"].(float64); fsm.Format(f) != want {
				return fmt.Errorf("%s: clusterFormat %v, want %d", n.ID, st["clusterFormat"], want)
			}
			return nil
		})
	}
}
