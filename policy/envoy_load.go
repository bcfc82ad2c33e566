package policy

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/goccy/go-yaml"
)

// EnvoyOptions says how envoyproxy/ratelimit files become policies.
type EnvoyOptions struct {
	// MergeDomains lets several files configure one domain, their
	// descriptors merged (envoyproxy/ratelimit's MERGE_DOMAIN_CONFIG);
	// otherwise a domain configured twice is an error.
	MergeDomains bool
	// Anchored keeps windows anchored at each key's first hit instead of
	// aligned to the epoch as envoyproxy/ratelimit counts them.
	Anchored bool
	// Consistency is every imported policy's: "" or "strict" (every hit
	// through the log, the default) or "leased" (nodes decide hot
	// descriptors from leases; docs/leased-policies.md).
	Consistency string
	// LeasedDomains are domains whose policies are leased whatever
	// Consistency says: the per-domain choice.
	LeasedDomains []string
}

// consistency is the consistency of domain's policies.
func (o EnvoyOptions) consistency(domain string) string {
	if o.Consistency == Leased || slices.Contains(o.LeasedDomains, domain) {
		return Leased
	}
	return ""
}

// EnvoyFile is one configuration file: a name for messages and its bytes.
type EnvoyFile struct {
	Name string
	Data []byte
}

type envoyFile struct {
	Domain      string            `yaml:"domain"`
	Descriptors []envoyDescriptor `yaml:"descriptors"`
}

type envoyDescriptor struct {
	Key            string            `yaml:"key"`
	Value          string            `yaml:"value"`
	RateLimit      *envoyRateLimit   `yaml:"rate_limit"`
	Descriptors    []envoyDescriptor `yaml:"descriptors"`
	ShadowMode     bool              `yaml:"shadow_mode"`
	QuotaMode      bool              `yaml:"quota_mode"`
	DetailedMetric bool              `yaml:"detailed_metric"`
	ValueToMetric  bool              `yaml:"value_to_metric"`
	ShareThreshold bool              `yaml:"share_threshold"`
	Metadata       map[string]any    `yaml:"metadata"`
}

type envoyRateLimit struct {
	Unit            string `yaml:"unit"`
	RequestsPerUnit uint32 `yaml:"requests_per_unit"`
	Unlimited       bool   `yaml:"unlimited"`
	Name            string `yaml:"name"`
	Replaces        []struct {
		Name string `yaml:"name"`
	} `yaml:"replaces"`
}

// envoyDomain is a domain being loaded: the composite keys seen at each
// level (a merged file may not repeat one) and the next descriptor's order.
type envoyDomain struct {
	root  *envoySeen
	order int
	rules []EnvoyRule
}

type envoySeen struct{ kids map[string]*envoySeen }

func newEnvoySeen() *envoySeen { return &envoySeen{kids: map[string]*envoySeen{}} }

// LoadEnvoy reads envoyproxy/ratelimit configuration files and returns the
// domains they configure and one policy per descriptor that has a
// rate_limit or ends a path. It accepts what envoyproxy/ratelimit's loader
// accepts and refuses what it refuses, with messages that name the file,
// the YAML path and the descriptor's full key.
func LoadEnvoy(files []EnvoyFile, opt EnvoyOptions) (domains []string, ps []Policy, err error) {
	if opt.Consistency != "" && opt.Consistency != "strict" && opt.Consistency != Leased {
		return nil, nil, fmt.Errorf("consistency %q: strict or leased", opt.Consistency)
	}
	loaded := map[string]*envoyDomain{}
	from := map[string]string{}
	for _, f := range files {
		domain, err := loadEnvoyFile(f.Data, loaded, opt.MergeDomains)
		if err != nil {
			if other, dup := from[domain]; dup && domain != "" && !opt.MergeDomains {
				err = fmt.Errorf("%w (also in %s)", err, other)
			}
			return nil, nil, fmt.Errorf("%s: %w", f.Name, err)
		}
		if _, seen := from[domain]; !seen {
			from[domain] = f.Name
			domains = append(domains, domain)
		}
	}
	names := map[string]string{}
	for _, domain := range domains {
		for _, r := range loaded[domain].rules {
			p := r.Policy(opt.Anchored)
			p.Consistency = opt.consistency(domain)
			where := envoyFullKey(domain, r.Envoy.Descriptors)
			if err := p.Validate(); err != nil {
				return nil, nil, fmt.Errorf("%s: %s: %w", from[domain], where, err)
			}
			if other, dup := names[p.Name]; dup {
				return nil, nil, fmt.Errorf("%s: %s and %s both become policy %s; rename one", from[domain], where, other, p.Name)
			}
			names[p.Name] = where
			ps = append(ps, p)
		}
		if len(ps) > MaxPolicies {
			return nil, nil, fmt.Errorf("%s: the files make more than %d policies, the most the table holds", from[domain], MaxPolicies)
		}
	}
	return domains, ps, nil
}

// ReadEnvoyFiles reads envoyproxy/ratelimit configuration files into
// policies (LoadEnvoy).
func ReadEnvoyFiles(opt EnvoyOptions, paths ...string) (domains []string, ps []Policy, err error) {
	files := make([]EnvoyFile, len(paths))
	for i, path := range paths {
		b, err := ReadDocument(path)
		if err != nil {
			return nil, nil, err
		}
		files[i] = EnvoyFile{Name: path, Data: b}
	}
	return LoadEnvoy(files, opt)
}

// ParseEnvoy reads one configuration file and returns its domain and its
// rules, windows as configured.
func ParseEnvoy(data []byte) (string, []EnvoyRule, error) {
	loaded := map[string]*envoyDomain{}
	domain, err := loadEnvoyFile(data, loaded, false)
	if err != nil {
		return "", nil, err
	}
	return domain, loaded[domain].rules, nil
}

// loadEnvoyFile checks one file's YAML and adds its descriptors to its
// domain in loaded. It returns the file's domain (once known) with any error.
func loadEnvoyFile(data []byte, loaded map[string]*envoyDomain, merge bool) (string, error) {
	if err := checkYAML(data, MaxDocumentBytes); err != nil {
		return "", err
	}
	if err := checkEnvoyYAML(data); err != nil {
		return "", err
	}
	var f envoyFile
	if err := yaml.Unmarshal(data, &f); err != nil {
		return "", fmt.Errorf("not an envoyproxy/ratelimit configuration: %w", err)
	}
	if f.Domain == "" {
		return "", errors.New("domain: config file cannot have empty domain")
	}
	d := loaded[f.Domain]
	switch {
	case d == nil:
		d = &envoyDomain{root: newEnvoySeen()}
	case !merge:
		return f.Domain, fmt.Errorf("domain: duplicate domain '%s' (merge files of one domain with --merge-domains)", f.Domain)
	}
	if err := d.load("descriptors", nil, d.root, f.Domain, f.Descriptors); err != nil {
		return f.Domain, err
	}
	loaded[f.Domain] = d
	return f.Domain, nil
}

// load adds one level of descriptors under parent (path) to the domain.
// at is the YAML path of the list, for messages.
func (d *envoyDomain) load(at string, parent []EnvoyEntry, seen *envoySeen, domain string, ds []envoyDescriptor) error {
	for i, desc := range ds {
		yamlPath := fmt.Sprintf("%s[%d]", at, i)
		finalKey := desc.Key
		if desc.Value != "" {
			finalKey += "_" + desc.Value
		}
		e := EnvoyEntry{Key: desc.Key, Value: desc.Value, ShareThreshold: desc.ShareThreshold, ValueToMetric: desc.ValueToMetric, Order: d.order}
		d.order++
		path := append(append([]EnvoyEntry(nil), parent...), e)
		full := envoyFullKey(domain, path)
		fail := func(format string, args ...any) error {
			return fmt.Errorf("%s (%s): %s", yamlPath, full, fmt.Sprintf(format, args...))
		}
		switch {
		case desc.Key == "":
			return fmt.Errorf("%s.key: descriptor has empty key", yamlPath)
		case seen.kids[finalKey] != nil:
			return fail("duplicate descriptor composite key '%s'", full)
		case desc.ShareThreshold && !strings.Contains(finalKey, "*"):
			return fail("share_threshold can only be used with wildcard values (containing '*'), but found key '%s'", finalKey)
		case len(desc.Descriptors) > 0 && len(path) >= MaxEnvoyDepth:
			return fail("descriptors nest deeper than %d levels", MaxEnvoyDepth)
		}
		kid := newEnvoySeen()
		seen.kids[finalKey] = kid
		switch {
		case desc.RateLimit != nil:
			r, err := envoyRule(domain, path, desc)
			if err != nil {
				return fmt.Errorf("%s.rate_limit (%s): %w", yamlPath, full, err)
			}
			d.rules = append(d.rules, r)
		case len(desc.Descriptors) == 0:
			// A leaf without a limit still matches: it whitelists its value.
			d.rules = append(d.rules, EnvoyRule{Name: EnvoyPolicyName(domain, path), Window: time.Second, Limit: MaxLimit,
				Envoy: Envoy{Domain: domain, Descriptors: path, NoLimit: true}})
		}
		if err := d.load(yamlPath+".descriptors", path, kid, domain, desc.Descriptors); err != nil {
			return err
		}
	}
	return nil
}

func envoyRule(domain string, path []EnvoyEntry, d envoyDescriptor) (EnvoyRule, error) {
	rl := d.RateLimit
	unit := strings.ToUpper(rl.Unit)
	w, validUnit := EnvoyUnits[unit]
	r := EnvoyRule{Name: EnvoyPolicyName(domain, path), Window: w, Limit: int64(rl.RequestsPerUnit),
		Envoy: Envoy{Domain: domain, Descriptors: path, Unit: unit, RequestsPerUnit: rl.RequestsPerUnit, Name: rl.Name,
			Unlimited: rl.Unlimited, ShadowMode: d.ShadowMode, QuotaMode: d.QuotaMode, DetailedMetric: d.DetailedMetric,
			Metadata: d.Metadata}}
	for i, rep := range rl.Replaces {
		switch rep.Name {
		case "":
			return EnvoyRule{}, fmt.Errorf("replaces[%d]: should not have an empty replaces entry", i)
		case rl.Name:
			return EnvoyRule{}, fmt.Errorf("replaces[%d]: replaces should not contain name of same descriptor (%q)", i, rl.Name)
		}
		r.Envoy.Replaces = append(r.Envoy.Replaces, rep.Name)
	}
	switch {
	case rl.Unlimited && validUnit:
		return EnvoyRule{}, errors.New("unit: should not specify rate limit unit when unlimited")
	case rl.Unlimited:
		// Never counted; the policy only marks the match. Its limit is
		// the largest there is, should anyone check it by name.
		r.Window, r.Limit, r.Envoy.Unit, r.Envoy.RequestsPerUnit = time.Second, MaxLimit, "", 0
	case !validUnit:
		return EnvoyRule{}, fmt.Errorf("unit: invalid rate limit unit '%s' (want second, minute, hour, day, week, month or year)", rl.Unit)
	case rl.RequestsPerUnit == 0:
		return EnvoyRule{}, errors.New("requests_per_unit: 0 would refuse every request; rlnode needs at least 1 (use a value entry without rate_limit to whitelist, or unlimited: true)")
	}
	return r, nil
}
