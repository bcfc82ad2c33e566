package kubetest

import (
	"fmt"
	"regexp"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// Container is the rlnode container of a rendered StatefulSet with the
// flags of its command line.
type Container struct {
	corev1.Container
	// Flags maps each --flag=value of the command (after "serve").
	Flags map[string]string
}

// RlnodeContainer finds the container named rlnode and parses its flags.
func RlnodeContainer(spec corev1.PodSpec) (Container, error) {
	for _, c := range spec.Containers {
		if c.Name != "rlnode" {
			continue
		}
		out := Container{Container: c, Flags: map[string]string{}}
		if len(c.Command) < 2 || c.Command[1] != "serve" {
			return out, fmt.Errorf("command %v: want /rlnode serve ...", c.Command)
		}
		for _, a := range c.Command[2:] {
			name, val, ok := strings.Cut(strings.TrimPrefix(a, "--"), "=")
			if !ok && !strings.HasPrefix(a, "--") {
				return out, fmt.Errorf("argument %q: want --flag=value", a)
			}
			out.Flags[name] = val
		}
		return out, nil
	}
	return Container{}, fmt.Errorf("no container named rlnode")
}

var envRef = regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)

// Expand replaces $(VAR) with vars[VAR] as the kubelet does for command
// arguments (an unknown variable stays as written).
func Expand(s string, vars map[string]string) string {
	return envRef.ReplaceAllStringFunc(s, func(m string) string {
		if v, ok := vars[m[2:len(m)-1]]; ok {
			return v
		}
		return m
	})
}

// PortNumber resolves a named or numbered container port.
func (c Container) PortNumber(name string) (int32, bool) {
	for _, p := range c.Ports {
		if p.Name == name || fmt.Sprint(p.ContainerPort) == name {
			return p.ContainerPort, true
		}
	}
	return 0, false
}
