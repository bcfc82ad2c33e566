// Package kubetest checks rlnode's Kubernetes manifests without a cluster:
// it renders the kustomizations as kubectl apply -k would, decodes every
// object strictly into the Kubernetes API types, and runs the StatefulSet's
// container in Docker.
package kubetest

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"

	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

// Objects is one rendered kustomization, by kind.
type Objects struct {
	StatefulSets []appsv1.StatefulSet
	Services     []corev1.Service
	PDBs         []policyv1.PodDisruptionBudget
}

// Render runs kustomize on dir (as kubectl apply -k does) and decodes
// every object strictly: an unknown field or kind is an error.
func Render(dir string) (Objects, error) {
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	res, err := k.Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		return Objects{}, fmt.Errorf("kustomize %s: %w", dir, err)
	}
	out, err := res.AsYaml()
	if err != nil {
		return Objects{}, err
	}
	return Decode(out)
}

// Decode reads a stream of YAML documents into typed objects.
func Decode(stream []byte) (Objects, error) {
	var objs Objects
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(stream)))
	for {
		doc, err := r.Read()
		if err == io.EOF {
			return objs, nil
		}
		if err != nil {
			return objs, err
		}
		if len(bytes.TrimSpace(doc)) == 0 {
			continue
		}
		var head struct {
			APIVersion string `json:"apiVersion"`
			Kind       string `json:"kind"`
		}
		if err := yaml.Unmarshal(doc, &head); err != nil {
			return objs, err
		}
		var target any
		switch head.APIVersion + " " + head.Kind {
		case "apps/v1 StatefulSet":
			objs.StatefulSets = append(objs.StatefulSets, appsv1.StatefulSet{})
			target = &objs.StatefulSets[len(objs.StatefulSets)-1]
		case "v1 Service":
			objs.Services = append(objs.Services, corev1.Service{})
			target = &objs.Services[len(objs.Services)-1]
		case "policy/v1 PodDisruptionBudget":
			objs.PDBs = append(objs.PDBs, policyv1.PodDisruptionBudget{})
			target = &objs.PDBs[len(objs.PDBs)-1]
		default:
			return objs, fmt.Errorf("unexpected object %s %s", head.APIVersion, head.Kind)
		}
		if err := yaml.UnmarshalStrict(doc, target); err != nil {
			return objs, fmt.Errorf("%s: %w\n%s", head.Kind, err, firstLines(doc, 5))
		}
	}
}

// Service returns the Service named name, or nil.
func (o Objects) Service(name string) *corev1.Service {
	for i := range o.Services {
		if o.Services[i].Name == name {
			return &o.Services[i]
		}
	}
	return nil
}

func firstLines(b []byte, n int) string {
	lines := strings.SplitN(string(b), "\n", n+1)
	return strings.Join(lines[:min(n, len(lines))], "\n")
}
