package policy

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/goccy/go-yaml"

	"github.com/rlnode/rlnode/internal/boundedfile"
)

// ReadFile reads a file of policies; see Parse.
func ReadFile(path string) ([]Policy, error) {
	b, err := ReadDocument(path)
	if err != nil {
		return nil, err
	}
	ps, err := Parse(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return ps, nil
}

// ReadDocument reads a policy or Envoy configuration file: a regular file
// (or a link to one) of at most MaxDocumentBytes, checked before it is
// read, the read itself capped; a device, FIFO, socket or directory is
// refused with its name, never read or waited on (internal/boundedfile).
func ReadDocument(path string) ([]byte, error) {
	b, err := boundedfile.Read(path, MaxDocumentBytes)
	if errors.Is(err, boundedfile.ErrTooLarge) {
		return nil, fmt.Errorf("%s: larger than %d bytes, the most a policy file may be", path, MaxDocumentBytes)
	}
	return b, err
}

// Parse reads a list of policies written as YAML or JSON (JSON is YAML):
// either a top-level list or a mapping with a "policies" list. Unknown
// fields are errors naming their path, every policy is validated, and a
// name may appear once.
func Parse(data []byte) ([]Policy, error) {
	if err := checkYAML(data, MaxDocumentBytes); err != nil {
		return nil, err
	}
	var doc any
	dec := yaml.NewDecoder(bytes.NewReader(data), yaml.UseOrderedMap())
	if err := dec.Decode(&doc); err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("not YAML or JSON: %w", err)
	}
	var more any
	if err := dec.Decode(&more); !errors.Is(err, io.EOF) {
		// Only the first document would have been read.
		return nil, errors.New("more than one YAML document (---): put every policy in one list")
	}
	var list []any
	path := ""
	switch v := doc.(type) {
	case []any:
		list = v
	case yaml.MapSlice:
		path = "policies"
		for _, it := range v {
			if key, _ := it.Key.(string); key != "policies" {
				return nil, fmt.Errorf("unknown field %q at the top level: want policies", keyName(it.Key))
			}
			l, ok := it.Value.([]any)
			if !ok && it.Value != nil {
				return nil, errors.New("policies: want a list of policies")
			}
			list = l
		}
	case nil:
		return nil, nil
	default:
		return nil, errors.New("want a list of policies or a mapping with a policies list")
	}
	if len(list) > MaxPolicies {
		return nil, fmt.Errorf("%d policies; the table holds at most %d", len(list), MaxPolicies)
	}
	var out []Policy
	seen := map[string]int{}
	for i, item := range list {
		at := fmt.Sprintf("%s[%d]", path, i)
		p, err := fromNode(at, item, "")
		if err != nil {
			return nil, err
		}
		if err := p.Validate(); err != nil {
			return nil, fmt.Errorf("%s: %w", at, err)
		}
		if j, dup := seen[p.Name]; dup {
			return nil, fmt.Errorf("%s: policy %q is also %s[%d]", at, p.Name, path, j)
		}
		seen[p.Name] = i
		out = append(out, p)
	}
	return out, nil
}

// ParseOne reads one policy's body as PUT /v1/policies/:name sends it: a
// JSON object (read by encoding/json, depth-bounded, a key given twice is
// an error), else YAML within the bounds of checkYAML. The name comes from
// the URL; a name in the body must match it. The result is validated.
func ParseOne(name string, data []byte) (Policy, error) {
	var doc any
	if t := bytes.TrimLeft(data, " \t\r\n"); len(t) > 0 && t[0] == '{' {
		v, err := decodeJSON(data)
		if err != nil {
			return Policy{}, fmt.Errorf("body is not a JSON policy: %w", err)
		}
		doc = v
	} else {
		if err := checkYAML(data, MaxYAMLBodyBytes); err != nil {
			return Policy{}, fmt.Errorf("body: %w", err)
		}
		if err := yaml.UnmarshalWithOptions(data, &doc, yaml.UseOrderedMap()); err != nil {
			// One line, without the source excerpt and caret the YAML
			// library draws: this ends up in a problem document's detail.
			return Policy{}, fmt.Errorf("body is neither a JSON object nor YAML: %s", yaml.FormatError(err, false, false))
		}
	}
	p, err := fromNode("", doc, name)
	if err != nil {
		return Policy{}, err
	}
	return p, p.Validate()
}

// fromNode converts a decoded policy, naming the path of anything it
// cannot use. fixedName, when set, is the name the policy must have.
func fromNode(at string, node any, fixedName string) (Policy, error) {
	var p Policy
	fields, ok := node.(yaml.MapSlice)
	if !ok {
		return p, fmt.Errorf("%s: want a policy {name, algorithm, limits}", orBody(at))
	}
	p.Name = fixedName
	for _, f := range fields {
		key := keyName(f.Key)
		field := join(at, key)
		switch key {
		case "name":
			s, ok := f.Value.(string)
			if !ok {
				return p, fmt.Errorf("%s: want a string", field)
			}
			if fixedName != "" && s != fixedName {
				return p, fmt.Errorf("%s %q differs from the name %q in the URL", field, s, fixedName)
			}
			p.Name = s
		case "algorithm":
			s, ok := f.Value.(string)
			if !ok {
				return p, fmt.Errorf("%s: want a string", field)
			}
			p.Algorithm = s
		case "limits":
			list, ok := f.Value.([]any)
			if !ok {
				return p, fmt.Errorf("%s: want a list of {limit, window[, burst]}", field)
			}
			for i, l := range list {
				lim, err := limitFromNode(fmt.Sprintf("%s[%d]", field, i), l)
				if err != nil {
					return p, err
				}
				p.Limits = append(p.Limits, lim)
			}
		case "envoy":
			e, err := envoyFromNode(field, f.Value)
			if err != nil {
				return p, err
			}
			p.Envoy = e
		case "mirrored":
			b, ok := f.Value.(bool)
			if !ok {
				return p, fmt.Errorf("%s: want true or false", field)
			}
			p.Mirrored = b
		case "consistency", "align", "timezone", "mode", "scope":
			s, ok := f.Value.(string)
			if !ok {
				return p, fmt.Errorf("%s: want a string", field)
			}
			switch key {
			case "consistency":
				p.Consistency = s
			case "align":
				p.Align = s
			case "timezone":
				p.Timezone = s
			case "scope":
				p.Scope = s
			default:
				p.Mode = s
			}
		default:
			return p, fmt.Errorf("%s: unknown field (want name, algorithm, limits, consistency, align, timezone, mode, scope)", field)
		}
	}
	return p.Canonical(), nil
}

func limitFromNode(at string, node any) (Limit, error) {
	var l Limit
	fields, ok := node.(yaml.MapSlice)
	if !ok {
		return l, fmt.Errorf("%s: want {limit, window[, burst]}", at)
	}
	for _, f := range fields {
		key := keyName(f.Key)
		field := join(at, key)
		var err error
		switch key {
		case "limit":
			l.Limit, err = integer(field, f.Value)
		case "burst":
			l.Burst, err = integer(field, f.Value)
			if err == nil && l.Burst == 0 {
				err = fmt.Errorf("%s 0 must be at least 1 (leave it out for the limit)", field)
			}
		case "window":
			s, ok := f.Value.(string)
			if !ok {
				return l, fmt.Errorf("%s: want a Go duration string such as \"1s\" or \"24h\"", field)
			}
			d, perr := ParseWindow(s)
			if perr != nil {
				return l, fmt.Errorf("%s %q is not a Go duration such as 1s, 1m30s or 24h, nor 1d, 1w, 1mo or 1y", field, s)
			}
			l.Window = d
		default:
			return l, fmt.Errorf("%s: unknown field (want limit, window, burst)", field)
		}
		if err != nil {
			return l, err
		}
	}
	return l, nil
}

func integer(field string, v any) (int64, error) {
	switch n := v.(type) {
	case int64:
		return n, nil
	case int:
		return int64(n), nil
	case uint64:
		if n > math.MaxInt64 {
			return 0, fmt.Errorf("%s %d is too large", field, n)
		}
		return int64(n), nil
	case float64:
		if n == math.Trunc(n) && math.Abs(n) < 1<<62 {
			return int64(n), nil
		}
	}
	return 0, fmt.Errorf("%s: want a whole number, got %s", field, describe(v))
}

// keyName is a mapping key as errors name it. Keys and values are never
// formatted whole: YAML aliases let a few hundred bytes stand for a value
// of gigabytes, which %v would expand.
func keyName(k any) string {
	if s, ok := k.(string); ok {
		return truncate(s)
	}
	return "(" + describe(k) + ")"
}

// describe names a value's kind, and shows it only when it is short.
func describe(v any) string {
	switch x := v.(type) {
	case string:
		return "string " + strconv.Quote(truncate(x))
	case bool, int, int64, uint64, float64:
		return fmt.Sprintf("%T %v", x, x)
	case nil:
		return "nothing"
	case yaml.MapSlice, map[string]any:
		return "a mapping"
	case []any:
		return "a list"
	default:
		return fmt.Sprintf("a %T", v)
	}
}

func truncate(s string) string {
	const max = 64
	if len(s) <= max {
		return s
	}
	return s[:max] + "..."
}

func join(at, key string) string {
	if at == "" {
		return key
	}
	return at + "." + key
}

func orBody(at string) string {
	if at == "" {
		return "body"
	}
	return at
}

// Diff compares a wanted table with the current one: what `apply` adds,
// changes and removes, each sorted by name.
func Diff(current, want []Policy) (added, changed []Policy, removed []string) {
	have := map[string]Policy{}
	for _, p := range current {
		have[p.Name] = p
	}
	for _, p := range want {
		old, ok := have[p.Name]
		switch {
		case !ok:
			added = append(added, p)
		case !old.Equal(p):
			changed = append(changed, p)
		}
		delete(have, p.Name)
	}
	for name := range have {
		removed = append(removed, name)
	}
	byName := func(a, b Policy) int { return strings.Compare(a.Name, b.Name) }
	slices.SortFunc(added, byName)
	slices.SortFunc(changed, byName)
	slices.Sort(removed)
	return added, changed, removed
}
