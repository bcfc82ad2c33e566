package kubetest

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
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
	corev1 "k8s.io/api/core/v1"
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
// the container's exact command with $(VAR) expanded from its env (built
// in order, as the kubelet does), the pod name as host name and
// HEADLESS-qualified network alias, the pod's user and fsGroup, a named
// volume per pod at the claim's mount, the Secret's value in the env and,
// with TLS, the TLS Secret's files at its mount.
type pods struct {
	t        *testing.T
	project  string
	image    string
	sts      appsv1.StatefulSet
	c        Container
	headless string
	token    string
	ports    map[string]string // pod -> 127.0.0.1:port of its HTTP port
	// tlsDir, when set, holds the TLS Secret's files (as the kubelet
	// mounts them); client is then a client with tls init's client.pem.
	tlsDir string
	client *http.Client
	scheme string
}

func (p *pods) run(i int) {
	t := p.t
	name := fmt.Sprintf("%s-%d", p.sts.Name, i)
	env, vars, err := PodEnv(p.c, name, func(corev1.SecretKeySelector) string { return p.token })
	if err != nil {
		t.Fatal(err)
	}
	spec := p.sts.Spec.Template.Spec
	sc := spec.SecurityContext
	args := []string{"run", "-d", "--name", p.project + "-" + name, "--hostname", name,
		"--network", p.project, "--network-alias", name + "." + p.headless,
		"--read-only", "-p", "127.0.0.1::8080",
		"--user", fmt.Sprintf("%d:%d", *sc.RunAsUser, *sc.RunAsGroup), "--group-add", fmt.Sprint(*sc.FSGroup),
		"--entrypoint", p.c.Command[0]}
	for _, m := range p.c.VolumeMounts {
		switch {
		case m.Name == p.sts.Spec.VolumeClaimTemplates[0].Name:
			args = append(args, "-v", p.project+"-data-"+name+":"+m.MountPath)
		case p.secretVolume(m.Name) && p.tlsDir != "":
			args = append(args, "-v", p.tlsDir+":"+m.MountPath+":ro")
		default:
			t.Fatalf("volume mount %s: a volume this test cannot stand in for", m.Name)
		}
	}
	for _, e := range env {
		args = append(args, "-e", e.Name+"="+e.Value)
	}
	args = append(args, p.image)
	for _, a := range p.c.Command[1:] {
		args = append(args, Expand(a, vars))
	}
	docker(t, args...)
	p.ports[name] = docker(t, "port", p.project+"-"+name, "8080/tcp")
}

// secretVolume reports whether the pod's volume name is a Secret's.
func (p *pods) secretVolume(name string) bool {
	for _, v := range p.sts.Spec.Template.Spec.Volumes {
		if v.Name == name && v.Secret != nil {
			return true
		}
	}
	return false
}

// probe runs a pod's exec probe as the kubelet does, in the container.
func (p *pods) probe(name string, pr *corev1.Probe) {
	if pr.Exec == nil {
		return
	}
	out := docker(p.t, append([]string{"exec", p.project + "-" + name}, pr.Exec.Command...)...)
	p.t.Logf("probe %v on %s: %s", pr.Exec.Command[1:], name, out)
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
	req, _ := http.NewRequest(http.MethodGet, p.scheme+"://"+p.ports[name]+path, nil)
	req.Header.Set("Authorization", "Bearer "+p.token)
	resp, err := p.client.Do(req)
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
			if running := docker(p.t, "inspect", "-f", "{{.State.Running}}", p.project+"-"+name); running != "true" {
				logs, _ := exec.Command("docker", "logs", "--tail", "5", p.project+"-"+name).CombinedOutput()
				p.t.Fatalf("pod %s exited (a kubelet would restart it into the same end):\n%s", name, logs)
			}
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
// with its state. It does so for the base and for the TLS overlay, whose
// pods form their cluster over mutual TLS with the certificates its recipe
// makes (issue 25 item 6: every pod of the overlay crash-looped).
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
	// The image as scripts/build-image.sh makes it: FROM scratch around a
	// static binary, tagged with the project name.
	project := "rlnodek8s" + randHex(4)
	root, _ := filepath.Abs("../..")
	build := exec.Command("bash", filepath.Join(root, "scripts", "build-image.sh"))
	build.Dir, build.Env = root, append(os.Environ(), "IMAGE="+project)
	out, err := build.Output()
	if err != nil {
		t.Fatalf("scripts/build-image.sh: %v", err)
	}
	tags := strings.Fields(string(out))
	image := project + ":latest"
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		exec.CommandContext(ctx, "docker", "image", "rm", "-f", image, tags[len(tags)-1]).Run()
	})
	t.Run("base", func(t *testing.T) {
		p := newPods(t, project+"base", image, base)
		p.client, p.scheme = &http.Client{Timeout: 5 * time.Second}, "http"
		p.exercise()
	})
	t.Run("tls", func(t *testing.T) {
		p := newPods(t, project+"tls", image, tlsOverlay)
		p.makeTLSSecret()
		p.exercise()
	})
}

// newPods renders dir and prepares a Docker network for its pods, removed
// with them (and their volumes) when t ends.
func newPods(t *testing.T, project, image, dir string) *pods {
	objs := render(t, dir)
	sts := objs.StatefulSets[0]
	c, err := RlnodeContainer(sts.Spec.Template.Spec)
	if err != nil {
		t.Fatal(err)
	}
	p := &pods{t: t, project: project, image: image, sts: sts, c: c, headless: sts.Spec.ServiceName, token: randHex(16), ports: map[string]string{}}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		for i := 0; i < int(*sts.Spec.Replicas); i++ {
			name := fmt.Sprintf("%s-%s-%d", p.project, sts.Name, i)
			if t.Failed() {
				logs, _ := exec.CommandContext(ctx, "docker", "logs", "--tail", "30", name).CombinedOutput()
				t.Logf("last lines of %s:\n%s", name, logs)
			}
			exec.CommandContext(ctx, "docker", "rm", "-f", name).Run()
			exec.CommandContext(ctx, "docker", "volume", "rm", "-f", fmt.Sprintf("%s-data-%s-%d", p.project, sts.Name, i)).Run()
		}
		exec.CommandContext(ctx, "docker", "network", "rm", p.project).Run()
	})
	docker(t, "network", "create", p.project)
	return p
}

// makeTLSSecret runs the TLS component's recipe as an operator would:
// its `rlnode tls init` line with the image's binary, then the files its
// `kubectl create secret` line names, under their keys, with the mode and
// group the kubelet gives a Secret volume's files (defaultMode, fsGroup).
// The test's own client presents tls init's client.pem.
func (p *pods) makeTLSSecret() {
	t := p.t
	recipe, err := ReadTLSRecipe(tlsComponent)
	if err != nil {
		t.Fatal(err)
	}
	work := t.TempDir()
	docker(t, append([]string{"run", "--rm", "--user", "0:0", "-v", work + ":/work", "-w", "/work", p.image}, recipe.Init...)...)
	p.tlsDir = t.TempDir()
	spec := p.sts.Spec.Template.Spec
	mode := os.FileMode(0o644)
	for _, v := range spec.Volumes {
		if v.Secret != nil && v.Secret.DefaultMode != nil {
			mode = os.FileMode(*v.Secret.DefaultMode)
		}
	}
	for key, file := range recipe.Files {
		b, err := os.ReadFile(filepath.Join(work, file))
		if err != nil {
			t.Fatalf("kubectl create secret --from-file=%s=%s: %v", key, file, err)
		}
		path := filepath.Join(p.tlsDir, key)
		if err := os.WriteFile(path, b, mode); err != nil {
			t.Fatal(err)
		}
		os.Chmod(path, mode)
		if err := os.Chown(path, 0, int(*spec.SecurityContext.FSGroup)); err != nil {
			t.Skipf("cannot give the Secret's files the pods' group as the kubelet does: %v", err)
		}
	}
	out := Flag(recipe.Init, "out")
	cert, err := tls.LoadX509KeyPair(filepath.Join(work, out, "client.pem"), filepath.Join(work, out, "client-key.pem"))
	if err != nil {
		t.Fatal(err)
	}
	ca, err := os.ReadFile(filepath.Join(work, out, "ca.pem"))
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	p.client = &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}}}
	p.scheme = "https"
}

// exercise starts the pods, checks they form one cluster with one budget
// (and pass their exec probes), deletes the leader's pod and checks the
// others carry on, then re-creates it on its kept volume and checks it
// rejoins with the counts intact.
func (p *pods) exercise() {
	t, sts := p.t, p.sts
	for i := 0; i < int(*sts.Spec.Replicas); i++ {
		p.run(i)
	}
	leader := p.formed(3)
	t.Logf("formed; leader %s", leader)
	for name := range p.ports {
		p.probe(name, p.c.ReadinessProbe)
		p.probe(name, p.c.LivenessProbe)
	}

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
