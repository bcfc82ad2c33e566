package policy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"

	"github.com/goccy/go-yaml"
	"github.com/goccy/go-yaml/ast"
	"github.com/goccy/go-yaml/lexer"
	"github.com/goccy/go-yaml/parser"
	"github.com/goccy/go-yaml/token"
)

// Bounds on policy documents (docs/security.md, Input limits). They are
// checked before anything is built from a document: go-yaml's parser takes
// memory quadratic in nesting depth (100 KB of nested brackets took
// gigabytes) and aliases let a few kilobytes stand for millions of values.
const (
	// MaxDocumentBytes is the largest policy file read (go-yaml's lexer
	// alone takes about 270 bytes per token, so a YAML document's memory
	// is bounded by its size first).
	MaxDocumentBytes = 512 << 10
	// MaxYAMLBodyBytes is the largest YAML body of one policy (PUT
	// /v1/policies/:name); a JSON body is read by encoding/json and may
	// be as large as any request body.
	MaxYAMLBodyBytes = 64 << 10
	// MaxDepth is how deeply lists and mappings may nest. A policy needs
	// five levels, an envoyproxy/ratelimit file one or two per descriptor
	// level.
	MaxDepth = 64
	// MaxValues is how many values (scalars, lists, mappings) a YAML
	// document may hold once its aliases are expanded: a file of
	// MaxPolicies policies needs about 15 per policy.
	MaxValues = 200_000
	// MaxPolicies is the size of the replicated policy table, and so of
	// any file applied or imported into it.
	MaxPolicies = 4096
)

// ErrTooManyPolicies refuses a policy that would take the table past
// MaxPolicies.
var ErrTooManyPolicies = fmt.Errorf("the policy table is full: at most %d policies", MaxPolicies)

// decodeJSON reads a JSON document into the shapes the YAML decoder gives
// (yaml.MapSlice, []any, string, int64/uint64/float64, bool, nil) through
// encoding/json, refusing nesting past MaxDepth and a key given twice in
// one object (which the YAML decoder would let the last one win).
func decodeJSON(data []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	v, err := jsonValue(dec, "", 0)
	if err != nil {
		return nil, err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("trailing data after the JSON value")
	}
	return v, nil
}

func jsonValue(dec *json.Decoder, at string, depth int) (any, error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	d, ok := tok.(json.Delim)
	if !ok {
		if n, isNum := tok.(json.Number); isNum {
			return jsonNumber(n), nil
		}
		return tok, nil
	}
	if depth == MaxDepth {
		return nil, fmt.Errorf("%s: nested deeper than %d levels", orBody(at), MaxDepth)
	}
	if d == '[' {
		list := []any{}
		for i := 0; dec.More(); i++ {
			v, err := jsonValue(dec, fmt.Sprintf("%s[%d]", at, i), depth+1)
			if err != nil {
				return nil, err
			}
			list = append(list, v)
		}
		_, err := dec.Token()
		return list, err
	}
	m := yaml.MapSlice{}
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, err
		}
		key, _ := tok.(string)
		field := join(at, truncate(key))
		if seen[key] {
			return nil, fmt.Errorf("%s: given twice", field)
		}
		seen[key] = true
		v, err := jsonValue(dec, field, depth+1)
		if err != nil {
			return nil, err
		}
		m = append(m, yaml.MapItem{Key: key, Value: v})
	}
	_, err = dec.Token()
	return m, err
}

// jsonNumber converts as the YAML decoder does: integers stay exact.
func jsonNumber(n json.Number) any {
	if i, err := strconv.ParseInt(string(n), 10, 64); err == nil {
		return i
	}
	if u, err := strconv.ParseUint(string(n), 10, 64); err == nil {
		return u
	}
	f, _ := n.Float64()
	return f
}

// checkYAML refuses a YAML document past the bounds before the YAML
// decoder builds anything from it: its size, then its nesting (from the
// lexer's tokens, which cost linear time and memory), then the values its
// aliases expand to.
func checkYAML(data []byte, maxBytes int) error {
	if len(data) > maxBytes {
		return fmt.Errorf("YAML document is %d bytes; at most %d are read", len(data), maxBytes)
	}
	if err := checkYAMLDepth(lexer.Tokenize(string(data))); err != nil {
		return err
	}
	f, err := parser.ParseBytes(data, 0)
	if err != nil {
		return nil // not YAML: the caller's decoder says so in its own words
	}
	anchors := map[string]int{}
	total := 0
	for _, doc := range f.Docs {
		total = addCapped(total, expandedValues(doc, anchors))
	}
	if total > MaxValues {
		return fmt.Errorf("the document holds more than %d values once its YAML aliases are expanded (the cap on a policy document)", MaxValues)
	}
	return nil
}

// checkYAMLDepth bounds nesting from tokens: each open flow bracket is a
// level, and so is each block indentation (of a "- " entry or of a "key:")
// deeper than the one around it. It may count a level twice (a list at its
// key's indentation), never miss one.
func checkYAMLDepth(tokens token.Tokens) error {
	flow := 0
	var block []int // columns of the open block levels, increasing
	for i, tk := range tokens {
		col := -1
		switch tk.Type {
		case token.SequenceStartType, token.MappingStartType:
			flow++
		case token.SequenceEndType, token.MappingEndType:
			flow = max(0, flow-1)
		case token.SequenceEntryType, token.MappingKeyType:
			col = tk.Position.Column
		case token.MappingValueType:
			if i > 0 {
				col = tokens[i-1].Position.Column
			}
		}
		if col >= 0 && flow == 0 {
			for len(block) > 0 && block[len(block)-1] > col {
				block = block[:len(block)-1]
			}
			if len(block) == 0 || block[len(block)-1] < col {
				block = append(block, col)
			}
		}
		if flow+len(block) > MaxDepth {
			return fmt.Errorf("line %d: nested deeper than %d levels", tk.Position.Line, MaxDepth)
		}
	}
	return nil
}

// expandedValues counts the values n stands for with every alias replaced
// by its anchor's value, recording anchors as they are defined.
func expandedValues(n ast.Node, anchors map[string]int) int {
	switch v := n.(type) {
	case nil:
		return 0
	case *ast.DocumentNode:
		return expandedValues(v.Body, anchors)
	case *ast.AnchorNode:
		c := expandedValues(v.Value, anchors)
		anchors[v.Name.GetToken().Value] = c
		return c
	case *ast.AliasNode:
		return max(1, anchors[v.Value.GetToken().Value])
	case *ast.TagNode:
		return expandedValues(v.Value, anchors)
	case *ast.MappingKeyNode:
		return expandedValues(v.Value, anchors)
	case *ast.MappingValueNode:
		return addCapped(expandedValues(v.Key, anchors), expandedValues(v.Value, anchors))
	case *ast.MappingNode:
		c := 1
		for _, kv := range v.Values {
			c = addCapped(c, expandedValues(kv, anchors))
		}
		return c
	case *ast.SequenceNode:
		c := 1
		for _, e := range v.Values {
			c = addCapped(c, expandedValues(e, anchors))
		}
		return c
	}
	return 1
}

// addCapped adds counts without overflowing: anything past MaxValues is
// too many either way.
func addCapped(a, b int) int { return min(a+b, MaxValues+1) }
