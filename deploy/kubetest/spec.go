package kubetest

import (
	"fmt"
	"os"
	"path/filepath"
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

// PodEnv is the container's environment in pod podName as the kubelet
// builds it: in order, each $(VAR) in a value expanded from the variables
// defined before it, metadata.name from the pod name and a Secret's value
// from secret. It fails for a source it cannot stand in for.
func PodEnv(c Container, podName string, secret func(corev1.SecretKeySelector) string) ([]corev1.EnvVar, map[string]string, error) {
	vars := map[string]string{}
	var out []corev1.EnvVar
	for _, e := range c.Env {
		v := Expand(e.Value, vars)
		switch {
		case e.ValueFrom == nil:
		case e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.name":
			v = podName
		case e.ValueFrom.SecretKeyRef != nil:
			v = secret(*e.ValueFrom.SecretKeyRef)
		default:
			return nil, nil, fmt.Errorf("env %s: a source this test cannot stand in for", e.Name)
		}
		vars[e.Name] = v
		out = append(out, corev1.EnvVar{Name: e.Name, Value: v})
	}
	return out, vars, nil
}

// TLSRecipe is the making of the TLS component's Secret, as its
// kustomization's comment gives it to the operator: the arguments of
// `rlnode tls init` and of `kubectl create secret generic NAME`.
type TLSRecipe struct {
	Init   []string // after "rlnode"
	Secret string
	// Files maps each key of the Secret to the file it is made from
	// (--from-file=[KEY=]PATH; the key defaults to the file's base name).
	Files map[string]string
	// Lines are the two commands as written.
	Lines []string
}

// ReadTLSRecipe reads the recipe from the comment lines of the TLS
// component's kustomization.yaml ("#   rlnode tls init ..." and
// "#   kubectl create secret generic ...").
func ReadTLSRecipe(path string) (TLSRecipe, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return TLSRecipe{}, err
	}
	r := TLSRecipe{Files: map[string]string{}}
	for _, line := range strings.Split(string(b), "\n") {
		cmd := strings.TrimSpace(strings.TrimPrefix(line, "#"))
		args := strings.Fields(cmd)
		switch {
		case strings.HasPrefix(cmd, "rlnode tls init "):
			r.Init = args[1:]
			r.Lines = append(r.Lines, cmd)
		case strings.HasPrefix(cmd, "kubectl create secret generic "):
			r.Lines = append(r.Lines, cmd)
			r.Secret = args[4]
			for _, a := range args[5:] {
				spec, ok := strings.CutPrefix(a, "--from-file=")
				if !ok {
					return r, fmt.Errorf("%s: kubectl argument %q: want only --from-file=", path, a)
				}
				key, file, named := strings.Cut(spec, "=")
				if !named {
					key, file = filepath.Base(spec), spec
				}
				r.Files[key] = file
			}
		}
	}
	if r.Init == nil || r.Secret == "" {
		return r, fmt.Errorf("%s: no `rlnode tls init` and `kubectl create secret generic` lines in its comment", path)
	}
	return r, nil
}

// Flag returns the value of --name (as --name=v or --name v) in args.
func Flag(args []string, name string) string {
	for i, a := range args {
		if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
			return v
		}
		if a == "--"+name && i+1 < len(args) {
			return args[i+1]
		}
	}
	return ""
}
