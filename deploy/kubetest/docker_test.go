package kubetest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
)

// docker runs one docker command and returns its trimmed stdout.
func docker(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command("docker", args...).Output()
	if err != nil {
		msg := ""
		if ee, ok := err.(*exec.ExitError); ok {
			msg = string(ee.Stderr)
		}
		t.Fatalf("docker %s: %v\n%s", strings.Join(args, " "), err, msg)
	}
	return strings.TrimSpace(string(out))
}

func randHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// pods runs a StatefulSet's pods in Docker as the kubelet would run them:
// the container's exact command with $(VAR) expanded from its env, the
// pod name as host name and HEADLESS-qualified network alias, a named
// volume per pod at the claim's mount, the Secret's value in the env.
type pods struct {
	t        *testing.T
	project  string
	image    string
	sts      appsv1.StatefulSet
	c        Container
	headless string
	token    string
	ports    map[string]string // pod -> 127.0.0.1:port of its HTTP port
}

func (p *pods) run(i int) {
	t := p.t
	name := fmt.Sprintf("%s-%d", p.sts.Name, i)
	vars := map[string]string{}
	var envArgs []string
	for _, e := range p.c.Env {
		v := e.Value
		switch {
		case e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.name":
			v = name
		case e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil:
			v = p.token
		case e.ValueFrom != nil:
			t.Fatalf("env %s: a source this test cannot stand in for", e.Name)
		}
		vars[e.Name] = v
		envArgs = append(envArgs, "-e", e.Name+"="+v)
	}
	args := []string{"run", "-d", "--name", p.project + "-" + name, "--hostname", name,
		"--network", p.project, "--network-alias", name + "." + p.headless,
		"--read-only", "-p", "127.0.0.1::8080",
		"-v", p.project + "-data-" + name + ":" + p.c.VolumeMounts[0].MountPath,
		"--entrypoint", p.c.Command[0]}
	args = append(args, envArgs...)
	args = append(args, p.image)
	for _, a := range p.c.Command[1:] {
		args = append(args, Expand(a, vars))
	}
	docker(t, args...)
	p.ports[name] = docker(t, "port", p.project+"-"+name, "8080/tcp")
}

// remove deletes a pod as Kubernetes does: preStop, then SIGTERM with the
// grace period, then the container is gone (its volume stays).
func (p *pods) remove(name string) {
	pre := p.c.Lifecycle.PreStop.Exec.Command
	out := docker(p.t, append([]string{"exec", p.project + "-" + name}, pre...)...)
	p.t.Logf("preStop of %s: %s", name, out)
	docker(p.t, "stop", "-t", fmt.Sprint(*p.sts.Spec.Template.Spec.TerminationGracePeriodSeconds), p.project+"-"+name)
	docker(p.t, "rm", p.project+"-"+name)
	delete(p.ports, name)
}

func (p *pods) get(name, path string, out any) (int, error) {
	req, _ := http.NewRequest(http.MethodGet, "http://"+p.ports[name]+path, nil)
	req.Header.Set("Authorization", "Bearer "+p.token)
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if out != nil {
		json.NewDecoder(resp.Body).Decode(out)
	}
	return resp.StatusCode, nil
}

func poll(t *testing.T, timeout time.Duration, what string, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: after %s: %v", what, timeout, err)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

type peer struct {
	ID     string `json:"id"`
	Leader bool   `json:"leader"`
	Voter  bool   `json:"voter"`
}

// formed waits until every running pod is ready and sees want voters and
// a leader; it returns the leader's id.
func (p *pods) formed(want int) string {
	var leader string
	poll(p.t, 3*time.Minute, fmt.Sprintf("cluster of %d", want), func() error {
		for name := range p.ports {
			if code, err := p.get(name, "/readyz", nil); err != nil || code != 200 {
				return fmt.Errorf("%s not ready: %d %v", name, code, err)
			}
			var ps []peer
			if _, err := p.get(name, "/v1/cluster/peers", &ps); err != nil {
				return err
			}
			voters := 0
			for _, x := range ps {
				if x.Voter {
					voters++
				}
				if x.Leader {
					leader = x.ID
				}
			}
			if voters != want || leader == "" {
				return fmt.Errorf("%s sees %+v", name, ps)
			}
		}
		return nil
	})
	return leader
}

// remaining spends one hit of client on pod and returns what is left.
func (p *pods) hit(name, client string) int64 {
	var r struct {
		Remaining int64 `json:"remaining"`
	}
	poll(p.t, 30*time.Second, "hit on "+name, func() error {
		code, err := p.get(name, "/check/"+client, &r)
		if err != nil || code != 200 {
			return fmt.Errorf("%d %v", code, err)
		}
		return nil
	})
	return r.Remaining
}

// TestStatefulSetInDocker runs the StatefulSet's exact container command and
// environment for three pods in Docker: they form a cluster over the
// headless names, the leader's pod is deleted (preStop, SIGTERM) and the
// other two carry on, and the pod re-created on its kept volume rejoins
// with its state.
func TestStatefulSetInDocker(t *testing.T) {
	if os.Getenv("RLNODE_SKIP_DOCKER") == "1" || testing.Short() {
		t.Skip("RLNODE_SKIP_DOCKER=1 or -short: skipping the Docker run of the StatefulSet")
	}
	if _, err := exec.LookPath("docker"); err != nil {
		t.Skip("no docker on PATH")
	}
	if err := exec.Command("docker", "info").Run(); err != nil {
		t.Skipf("no Docker daemon: %v", err)
	}
	objs := render(t, base)
	sts := objs.StatefulSets[0]
	c, err := RlnodeContainer(sts.Spec.Template.Spec)
	if err != nil {
		t.Fatal(err)
	}
	p := &pods{t: t, project: "rlnodek8s" + randHex(4), sts: sts, c: c, headless: sts.Spec.ServiceName, token: randHex(16), ports: map[string]string{}}

	// The image as scripts/build-image.sh makes it: FROM scratch around a
	// static binary, tagged with the project name.
	root, _ := filepath.Abs("../..")
	build := exec.Command("bash", filepath.Join(root, "scripts", "build-image.sh"))
	build.Dir, build.Env = root, append(os.Environ(), "IMAGE="+p.project)
	out, err := build.Output()
	if err != nil {
		t.Fatalf("scripts/build-image.sh: %v", err)
	}
	tags := strings.Fields(string(out))
	p.image = p.project + ":latest"
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		for i := 0; i < int(*sts.Spec.Replicas); i++ {
			exec.CommandContext(ctx, "docker", "rm", "-f", fmt.Sprintf("%s-%s-%d", p.project, sts.Name, i)).Run()
			exec.CommandContext(ctx, "docker", "volume", "rm", "-f", fmt.Sprintf("%s-data-%s-%d", p.project, sts.Name, i)).Run()
		}
		exec.CommandContext(ctx, "docker", "network", "rm", p.project).Run()
		exec.CommandContext(ctx, "docker", "image", "rm", "-f", p.image, tags[len(tags)-1]).Run()
	})
	docker(t, "network", "create", p.project)
	for i := 0; i < int(*sts.Spec.Replicas); i++ {
		p.run(i)
	}
	leader := p.formed(3)
	t.Logf("formed; leader %s", leader)

	// One budget across the pods (the seeded default: 10 per minute).
	first := p.hit(leader, "alice")
	var other string
	for name := range p.ports {
		if name != leader {
			other = name
		}
	}
	if got := p.hit(other, "alice"); got != first-1 {
		t.Fatalf("alice on %s: %d remaining after %d on %s; want one budget", other, got, first, leader)
	}

	// Delete the leader's pod: the others elect a leader and carry on.
	p.remove(leader)
	newLeader := p.formed(3)
	if newLeader == leader {
		t.Fatalf("%s still leads after its pod was deleted", leader)
	}
	if got := p.hit(other, "alice"); got != first-2 {
		t.Fatalf("alice after the leader's pod went: %d remaining, want %d", got, first-2)
	}

	// Re-created on its kept volume, the pod comes back as the same member.
	var idx int
	fmt.Sscanf(strings.TrimPrefix(leader, sts.Name+"-"), "%d", &idx)
	p.run(idx)
	p.formed(3)
	if got := p.hit(leader, "alice"); got != first-3 {
		t.Fatalf("alice on the re-created %s: %d remaining, want %d", leader, got, first-3)
	}
}
