package main

import (
	"strings"
	"testing"

	"github.com/rlnode/rlnode/policy"
)

// TestRegionFlagsRefuseWhatCannotWork: --parent without --region, a bad
// region name, and a seed file that defines a global policy on a region
// or a mirrored one anywhere are refused before anything starts.
func TestRegionFlagsRefuseWhatCannotWork(t *testing.T) {
	for _, tc := range []struct {
		r    regionFlags
		want string
	}{
		{regionFlags{parent: "p:1", sliceWait: 1e9}, "--parent needs --region"},
		{regionFlags{name: "eu west", parent: "p:1", lease: 5e9, sliceWait: 1e9}, "may only contain"},
		{regionFlags{name: "eu", lease: 5e9, sliceWait: 1e9}, "--parent"},
		{regionFlags{name: "eu", parent: "p:1", lease: 5e9, sliceWait: 0}, "--region-slice-wait"},
	} {
		errs := tc.r.validate()
		if len(errs) == 0 || !strings.Contains(errs[0].Error(), tc.want) {
			t.Errorf("%+v: %v, want an error naming %q", tc.r, errs, tc.want)
		}
	}
	if errs := (&regionFlags{sliceWait: 1e9}).validate(); len(errs) != 0 {
		t.Fatalf("no region: %v", errs)
	}
	global := policy.Policy{Name: "g", Scope: policy.Global}
	if err := (&regionFlags{name: "eu", parent: "p:1"}).seedable("f.yaml", []policy.Policy{global}); err == nil || !strings.Contains(err.Error(), "from the parent") {
		t.Errorf("a region seeding a global policy: %v", err)
	}
	if err := (&regionFlags{}).seedable("f.yaml", []policy.Policy{global}); err != nil {
		t.Errorf("a parent seeding a global policy: %v", err)
	}
	if err := (&regionFlags{}).seedable("f.yaml", []policy.Policy{{Name: "m", Scope: policy.Global, Mirrored: true}}); err == nil {
		t.Error("a mirrored policy was seeded")
	}
}
