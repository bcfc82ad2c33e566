package checker

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/anishathalye/porcupine"
)

// WriteVisualizations writes porcupine's HTML visualization for every key
// group that is not linearizable (file name: lin-<sanitized key>.html) into
// dir and returns the paths. Groups that are linearizable, or whose check
// timed out, get no file.
func WriteVisualizations(cfg Config, history []Op, dir string) ([]string, error) {
	pols, err := cfg.policies()
	if err != nil {
		return nil, fmt.Errorf("checker config: %w", err)
	}
	gs, _, _ := prepare(pols, history)

	// The verbose check is much more expensive, so it only runs on the
	// groups the fast check found illegal.
	var illegal []*group
	for i, v := range linearizeGroups(cfg, gs) {
		if v == porcupine.Illegal {
			illegal = append(illegal, gs[i])
		}
	}
	if len(illegal) == 0 {
		return nil, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("create visualization dir: %w", err)
	}
	var paths []string
	names := make(map[string]bool)
	for _, g := range illegal {
		model := g.porcupineModel()
		_, info := porcupine.CheckOperationsVerbose(model, groupHistory(g.ops), cfg.timeout())
		path := filepath.Join(dir, fileName(g.name(), names))
		if err := writeVisualization(model, info, path); err != nil {
			return paths, fmt.Errorf("visualize key %q: %w", g.name(), err)
		}
		paths = append(paths, path)
	}
	return paths, nil
}

func writeVisualization(model porcupine.Model, info porcupine.LinearizationInfo, path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := porcupine.Visualize(model, info, f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// fileName returns a file name for key's visualization that is safe on any
// file system and not already in used, and records it there.
func fileName(key string, used map[string]bool) string {
	const maxKeyLen = 100
	var b strings.Builder
	for _, r := range key {
		if b.Len() >= maxKeyLen {
			break
		}
		if r < 128 && (r == '-' || r == '_' || r == '.' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9') {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
	}
	base := "lin-" + b.String()
	name := base + ".html"
	// Sanitizing can map two keys to one name; never overwrite.
	for n := 2; used[name]; n++ {
		name = fmt.Sprintf("%s-%d.html", base, n)
	}
	used[name] = true
	return name
}
