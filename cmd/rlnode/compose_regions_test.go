package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestComposeRegions runs docker-compose.regions.yml for real: a parent
// and two one-node regions in containers (FROM scratch around the static
// binary, built as TestComposeCluster builds it), on free loopback ports.
// It writes a global policy at the parent and sees both regions mirror
// it and decide its hits from one budget: every hit of both regions
// answers 200, 429 or 503, at most the limit is allowed in all, and each
// region is allowed some. It skips as TestComposeCluster does (no Docker,
// -short, RLNODE_SKIP_DOCKER=1).
func TestComposeRegions(t *testing.T) {
	if os.Getenv("RLNODE_SKIP_DOCKER") == "1" {
		t.Skip("RLNODE_SKIP_DOCKER=1: skipping the Docker Compose regions test")
	}
	if testing.Short() {
		t.Skip("-short: skipping the Docker Compose regions test (it builds an image and runs three containers)")
	}
	compose := composeCommand(t)
	root := composeRepoRoot(t)
	start := time.Now()
	project := "rlnoderegions" + composeRandHex(4)
	token := composeRandHex(16)
	composeBuildImage(t, root, project)
	t.Logf("built the image in %s", time.Since(start).Round(100*time.Millisecond))

	services := []string{"parent", "eu", "us"}
	ports := composeFreePorts(t, len(services))
	env := []string{"RLNODE_IMAGE=" + project + ":latest", "RLNODE_PUBLISH_HOST=127.0.0.1", "RLNODE_CLUSTER_TOKEN=" + token,
		fmt.Sprintf("RLNODE_PARENT_PORT=%d", ports[0]), fmt.Sprintf("RLNODE_EU_PORT=%d", ports[1]), fmt.Sprintf("RLNODE_US_PORT=%d", ports[2])}
	c := &composeProject{t: t, cmd: compose, project: project, file: filepath.Join(root, "docker-compose.regions.yml"), env: env}
	t.Cleanup(c.teardown)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if out, err := c.run(ctx, "up", "-d"); err != nil {
		t.Fatalf("compose up: %v\n%s", err, out)
	}
	composeEventually(t, 60*time.Second, "parent and regions ready", func() error {
		for i, p := range ports {
			if code, body, err := composeGet(ctx, p, "/readyz", nil); err != nil || code != 200 {
				return fmt.Errorf("%s /readyz: %d %v %s", services[i], code, err, body)
			}
		}
		return nil
	})

	// The global policy, written where only it can be: at the parent.
	const limit = 40
	pol := fmt.Sprintf(`{"algorithm": "fixed_window", "limits": [{"limit": %d, "window": "1m"}], "consistency": "leased", "scope": "global"}`, limit)
	if code, body, err := composeAuthDo(ctx, http.MethodPut, ports[0], "/v1/policies/g", token, pol); err != nil || code != 200 {
		t.Fatalf("PUT the global policy at the parent: %d %v %s", code, err, body)
	}
	for i, p := range ports[1:] {
		composeEventually(t, 30*time.Second, services[i+1]+" mirrors g", func() error {
			var got struct {
				Scope    string `json:"scope"`
				Mirrored bool   `json:"mirrored"`
			}
			if _, err := composeGetJSON(ctx, p, "/v1/policies/g", &got); err != nil {
				return err
			}
			if got.Scope != "global" || !got.Mirrored {
				return fmt.Errorf("policy g %+v", got)
			}
			return nil
		})
	}
	firstHit := time.Now()

	// Both regions hammer one key of it at once, 30 hits each.
	type tally struct{ allowed, refused, unreachable int }
	counts := make([]tally, len(ports))
	var wg sync.WaitGroup
	var mu sync.Mutex
	var bad []string
	for i := 1; i < len(ports); i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 30 {
				code, body, err := composeGet(ctx, ports[i], "/check/g/tenant-42", nil)
				mu.Lock()
				switch {
				case err == nil && code == 200:
					counts[i].allowed++
				case err == nil && code == 429:
					counts[i].refused++
				case err == nil && code == 503 && strings.Contains(string(body), "parent_unreachable"):
					counts[i].unreachable++
				default:
					bad = append(bad, fmt.Sprintf("%s: %d %v %s", services[i], code, err, body))
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if len(bad) > 0 {
		t.Fatalf("answers other than 200, 429 and 503 parent_unreachable: %v", bad)
	}
	if d := time.Since(firstHit); d > 50*time.Second {
		t.Fatalf("the hits took %s: the 1 m window may have lapsed, so the total cannot be checked", d.Round(time.Second))
	}
	eu, us := counts[1], counts[2]
	t.Logf("eu %+v, us %+v", eu, us)
	if eu.allowed+us.allowed > limit {
		t.Fatalf("regions allowed %d + %d hits of a global %d per minute", eu.allowed, us.allowed, limit)
	}
	if eu.allowed == 0 || us.allowed == 0 || eu.refused+us.refused == 0 {
		t.Fatalf("eu %+v, us %+v: want both regions to decide hits from the one budget (some allowed in each, the rest refused)", eu, us)
	}

	// Each region's view names its holder at the parent and the spend.
	for i, p := range ports[1:] {
		code, body, err := composeAuthDo(ctx, http.MethodGet, p, "/v1/cluster/region", token, "")
		var v struct {
			Region string `json:"region"`
			Parent struct {
				Holder string `json:"holder"`
				Up     bool   `json:"up"`
			} `json:"parent"`
			Keys []struct {
				Policy, Client string
				Spent          int64
			} `json:"keys"`
		}
		if err == nil && code == 200 {
			err = json.Unmarshal(body, &v)
		}
		if err != nil || code != 200 || v.Region != services[i+1] || v.Parent.Holder != "region:"+services[i+1] || len(v.Keys) != 1 {
			t.Fatalf("GET /v1/cluster/region on %s: %d %v %s", services[i+1], code, err, body)
		}
		if want := []int{eu.allowed, us.allowed}[i]; v.Keys[0].Spent != int64(want) {
			t.Errorf("%s's view: spent %d, want its %d allowed hits", services[i+1], v.Keys[0].Spent, want)
		}
	}
	t.Logf("total %s", time.Since(start).Round(100*time.Millisecond))
}

// composeAuthDo sends one request with the cluster token to a published
// port.
func composeAuthDo(ctx context.Context, method string, port int, path, token, body string) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, method, fmt.Sprintf("http://127.0.0.1:%d%s", port, path), strings.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := composeHTTP.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}
