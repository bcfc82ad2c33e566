package main

import (
	"flag"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// settingsFor parses args into a fresh serve flag set, then applies env and
// the config file the way parseServe does.
func settingsFor(t *testing.T, args []string, env map[string]string) (*serveConfig, error) {
	t.Helper()
	fs, c := serveFlags(io.Discard)
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	explicit := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { explicit[f.Name] = true })
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	return c, applySettings(fs, explicit, lookup)
}

func writeConfig(t *testing.T, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "rlnode.yaml")
	if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestSettingsPrecedence(t *testing.T) {
	file := writeConfig(t, `
http-addr: 127.0.0.1:9001
limit: 3
window: 1m
join: [http://a:8080, http://b:8080]
log-json: true
max-clock-offset: 250ms
`)
	c, err := settingsFor(t, []string{"--config", file, "--window", "2m"}, map[string]string{"RLNODE_LIMIT": "4"})
	if err != nil {
		t.Fatal(err)
	}
	if c.httpAddr != "127.0.0.1:9001" || !c.logJSON || c.maxClockOffset != 250*time.Millisecond {
		t.Errorf("file settings not applied: http-addr %q log-json %v max-clock-offset %v", c.httpAddr, c.logJSON, c.maxClockOffset)
	}
	if c.join != "http://a:8080,http://b:8080" {
		t.Errorf("join from a YAML list: %q", c.join)
	}
	if c.limit != 4 {
		t.Errorf("limit %d: the environment (4) must win over the file (3)", c.limit)
	}
	if c.window != 2*time.Minute {
		t.Errorf("window %v: the command line (2m) must win over the file (1m)", c.window)
	}
	if c.raftAddr != "127.0.0.1:8300" {
		t.Errorf("raft-addr %q: unset everywhere, want the default", c.raftAddr)
	}

	// $RLNODE_CONFIG names the file when --config does not.
	c, err = settingsFor(t, nil, map[string]string{"RLNODE_CONFIG": file})
	if err != nil || c.limit != 3 {
		t.Errorf("$RLNODE_CONFIG: limit %d, err %v; want the file's 3", c.limit, err)
	}
}

func TestSettingsErrorsNameTheSource(t *testing.T) {
	cases := []struct {
		name, file string
		env        map[string]string
		want       string
	}{
		{"unknown setting", "limit: 3\nlimt: 4\n", nil, `unknown setting "limt"`},
		{"config in config", "config: other.yaml\n", nil, `"config" cannot be set in the config file`},
		{"bad value", "window: 5x\n", nil, `window: invalid value "5x"`},
		{"mapping value", "window: {a: 1}\n", nil, "window: want a plain value, got a mapping"},
		{"null value", "limit:\n", nil, "limit: no value"},
		{"nested list", "join: [[a]]\n", nil, "join: item 1: want a plain value, got a list"},
		{"comma in a list item", "join: ['a,b']\n", nil, "join: item 1: holds a comma"},
		{"not a mapping", "- limit\n", nil, "want a mapping of setting: value, got a list"},
		{"duplicate", "limit: 3\nlimit: 4\n", nil, "limit"},
		{"broken yaml", "limit: [3\n", nil, "config "},
		{"bad env", "", map[string]string{"RLNODE_LIMIT": "many"}, `$RLNODE_LIMIT="many": invalid value for --limit`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var args []string
			if tc.file != "" {
				args = []string{"--config", writeConfig(t, tc.file)}
			}
			_, err := settingsFor(t, args, tc.env)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v; want an error containing %q", err, tc.want)
			}
		})
	}
	if _, err := settingsFor(t, []string{"--config", filepath.Join(t.TempDir(), "missing.yaml")}, nil); err == nil || !strings.Contains(err.Error(), "no such file") {
		t.Fatalf("missing file: %v", err)
	}
	if _, err := settingsFor(t, []string{"--config", writeConfig(t, "")}, nil); err != nil {
		t.Fatalf("an empty file sets nothing: %v", err)
	}
}
