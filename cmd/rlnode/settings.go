package main

import (
	"errors"
	"flag"
	"fmt"
	"strconv"
	"strings"

	"github.com/goccy/go-yaml"

	"github.com/rlnode/rlnode/cmd/rlnode/internal/cli"
	"github.com/rlnode/rlnode/internal/boundedfile"
	"github.com/rlnode/rlnode/policy"
)

// Every serve flag can also come from the environment and from a YAML
// file, for service managers and containers that would rather not carry a
// forty-flag command line. The command line wins over the environment,
// which wins over the file, which wins over the built-in default.

// envPrefix names a flag's variable: --raft-log is RLNODE_RAFT_LOG.
const envPrefix = "RLNODE_"

// configFlag names the file itself; it cannot be set inside the file.
const configFlag = "config"

func envName(flagName string) string {
	return envPrefix + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// applySettings fills the flags the command line left unset from the
// environment and then from the --config file (or $RLNODE_CONFIG).
// explicit is the set of flags given on the command line.
func applySettings(fs *flag.FlagSet, explicit map[string]bool, lookupEnv func(string) (string, bool)) error {
	defer cli.WithUnits(fs)()
	fromEnv := map[string]bool{}
	var errs []error
	fs.VisitAll(func(f *flag.Flag) {
		if explicit[f.Name] {
			return
		}
		v, ok := lookupEnv(envName(f.Name))
		if !ok {
			return
		}
		fromEnv[f.Name] = true
		if err := fs.Set(f.Name, v); err != nil {
			errs = append(errs, fmt.Errorf("$%s=%q: invalid value for --%s: %w", envName(f.Name), v, f.Name, err))
		}
	})
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	path := fs.Lookup(configFlag).Value.String()
	if path == "" {
		return nil
	}
	settings, err := readSettings(path)
	if err != nil {
		return err
	}
	for _, s := range settings {
		f := fs.Lookup(s.name)
		switch {
		case f == nil:
			errs = append(errs, fmt.Errorf("config %s: unknown setting %q (settings are serve's flag names without dashes in front, e.g. http-addr; see rlnode serve -h)", path, s.name))
		case s.name == configFlag:
			errs = append(errs, fmt.Errorf("config %s: %q cannot be set in the config file itself", path, s.name))
		case explicit[s.name] || fromEnv[s.name]:
			// The command line or the environment set it.
		default:
			if err := fs.Set(s.name, s.value); err != nil {
				errs = append(errs, fmt.Errorf("config %s: %s: invalid value %q: %w", path, s.name, s.value, err))
			}
		}
	}
	return errors.Join(errs...)
}

type setting struct{ name, value string }

// readSettings reads a YAML mapping of flag names to values: scalars, or
// lists of scalars for the comma-separated flags (join, trusted-proxies).
func readSettings(path string) ([]setting, error) {
	b, err := boundedfile.Read(path, policy.MaxDocumentBytes)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	var doc any
	if err := yaml.UnmarshalWithOptions(b, &doc, yaml.UseOrderedMap()); err != nil {
		return nil, fmt.Errorf("config %s: %w", path, err)
	}
	if doc == nil {
		return nil, nil // an empty file sets nothing
	}
	m, ok := doc.(yaml.MapSlice)
	if !ok {
		return nil, fmt.Errorf("config %s: want a mapping of setting: value, got %s", path, yamlKind(doc))
	}
	seen := map[string]bool{}
	var out []setting
	for _, item := range m {
		name, ok := item.Key.(string)
		if !ok {
			return nil, fmt.Errorf("config %s: setting name %v is not a string", path, item.Key)
		}
		if seen[name] {
			return nil, fmt.Errorf("config %s: %s is set twice", path, name)
		}
		seen[name] = true
		v, err := settingValue(item.Value)
		if err != nil {
			return nil, fmt.Errorf("config %s: %s: %w", path, name, err)
		}
		out = append(out, setting{name, v})
	}
	return out, nil
}

func settingValue(v any) (string, error) {
	switch x := v.(type) {
	case []any:
		parts := make([]string, len(x))
		for i, e := range x {
			s, err := scalarValue(e)
			if err == nil && strings.Contains(s, ",") {
				err = errors.New("holds a comma")
			}
			if err != nil {
				return "", fmt.Errorf("item %d: %w", i+1, err)
			}
			parts[i] = s
		}
		return strings.Join(parts, ","), nil
	case nil:
		return "", errors.New("no value (remove the line to keep the default)")
	default:
		return scalarValue(v)
	}
}

func scalarValue(v any) (string, error) {
	switch x := v.(type) {
	case string:
		return x, nil
	case bool:
		return strconv.FormatBool(x), nil
	case int64, uint64, int, uint:
		return fmt.Sprint(x), nil
	case float64:
		return strconv.FormatFloat(x, 'f', -1, 64), nil
	default:
		return "", fmt.Errorf("want a plain value, got %s", yamlKind(v))
	}
}

func yamlKind(v any) string {
	switch v.(type) {
	case yaml.MapSlice, map[string]any:
		return "a mapping"
	case []any:
		return "a list"
	default:
		return fmt.Sprintf("%T", v)
	}
}
