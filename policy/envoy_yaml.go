package policy

import (
	"fmt"
	"slices"
	"strings"

	"github.com/goccy/go-yaml/ast"
	"github.com/goccy/go-yaml/parser"
)

// envoyKeys are the keys envoyproxy/ratelimit's loader knows. Like it, any
// of them is accepted at any level (a misplaced one is ignored), and any
// other is an error, so a misspelt key never silently drops a limit.
var envoyKeys = []string{"domain", "key", "value", "descriptors", "rate_limit", "unit", "requests_per_unit",
	"unlimited", "shadow_mode", "quota_mode", "name", "replaces", "detailed_metric", "value_to_metric",
	"share_threshold", "metadata"}

// checkEnvoyYAML checks a file's shape before it is decoded, as
// envoyproxy/ratelimit's validateYamlKeys does: valid YAML, keys that are
// strings and known, lists of maps, leaves that are strings, integers,
// booleans or null. metadata holds anything. Errors name the YAML path.
func checkEnvoyYAML(data []byte) error {
	f, err := parser.ParseBytes(data, 0)
	if err != nil {
		return fmt.Errorf("error loading config file: %w", err)
	}
	for _, doc := range f.Docs {
		if doc.Body == nil {
			continue
		}
		body := unwrapYAML(doc.Body)
		if _, ok := body.(*ast.MappingNode); !ok {
			if _, ok := body.(*ast.MappingValueNode); !ok {
				return fmt.Errorf("the file is a %s, not a map with domain and descriptors", body.Type())
			}
		}
		if err := checkEnvoyNode("", body); err != nil {
			return err
		}
	}
	return nil
}

func unwrapYAML(n ast.Node) ast.Node {
	for {
		switch v := n.(type) {
		case *ast.TagNode:
			n = v.Value
		case *ast.AnchorNode:
			n = v.Value
		default:
			return n
		}
	}
}

func checkEnvoyNode(at string, n ast.Node) error {
	n = unwrapYAML(n)
	switch v := n.(type) {
	case *ast.MappingNode:
		for _, kv := range v.Values {
			if err := checkEnvoyPair(at, kv); err != nil {
				return err
			}
		}
	case *ast.MappingValueNode:
		return checkEnvoyPair(at, v)
	case *ast.SequenceNode:
		for i, e := range v.Values {
			e = unwrapYAML(e)
			_, isMap := e.(*ast.MappingNode)
			_, isPair := e.(*ast.MappingValueNode)
			if !isMap && !isPair {
				return fmt.Errorf("%s[%d]: config error, yaml file contains list of type other than map: %s", at, i, strings.TrimSpace(e.String()))
			}
			if err := checkEnvoyNode(fmt.Sprintf("%s[%d]", at, i), e); err != nil {
				return err
			}
		}
	case *ast.StringNode, *ast.LiteralNode, *ast.IntegerNode, *ast.BoolNode, *ast.NullNode, *ast.AliasNode, nil:
	default:
		return fmt.Errorf("%s: config error, a %s is not a string, integer or boolean", at, n.Type())
	}
	return nil
}

func checkEnvoyPair(at string, kv *ast.MappingValueNode) error {
	var key ast.Node = kv.Key
	if mk, ok := key.(*ast.MappingKeyNode); ok {
		key = mk.Value
	}
	key = unwrapYAML(key)
	s, ok := key.(*ast.StringNode)
	if !ok {
		where := at
		if where == "" {
			where = "top level"
		}
		return fmt.Errorf("%s: config error, key is not of type string: %s", where, strings.TrimSpace(key.String()))
	}
	path := s.Value
	if at != "" {
		path = at + "." + s.Value
	}
	if !slices.Contains(envoyKeys, s.Value) {
		return fmt.Errorf("%s: config error, unknown key '%s'", path, s.Value)
	}
	if s.Value == "metadata" {
		return nil // anything goes; it must only convert to a protobuf Struct
	}
	return checkEnvoyNode(path, kv.Value)
}
