package docmaps

import (
	"fmt"
	"go/build"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// module is this repository's module path; imports under it are arrows
// between rooms, everything else is the standard library or third party.
const module = "github.com/rlnode/rlnode"

// tree is the main module's source as the default build context sees it.
type tree struct {
	root string
	// pkgs maps a package's directory, relative to root with slashes
	// ("cluster/storage"), to its non-test Go files and their imports.
	pkgs map[string]*pkg
}

type pkg struct {
	dir     string
	files   []string            // non-test Go files of the default build
	imports map[string][]string // import path -> files importing it
}

// moduleRoot is the repository root, two levels up from this package.
func moduleRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("module root: %v", err)
	}
	return root
}

// loadTree reads every package of the main module: nested modules
// (deploy/), testdata, and hidden or underscore folders are not part of it,
// as for `go list ./...`.
func loadTree(t *testing.T) *tree {
	t.Helper()
	tr := &tree{root: moduleRoot(t), pkgs: map[string]*pkg{}}
	err := filepath.WalkDir(tr.root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			return nil
		}
		name := d.Name()
		if path != tr.root {
			if name == "testdata" || name == "vendor" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") {
				return filepath.SkipDir
			}
			if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil {
				return filepath.SkipDir
			}
		}
		bp, err := build.Default.ImportDir(path, 0)
		if err != nil {
			if _, none := err.(*build.NoGoError); none {
				return nil
			}
			return err
		}
		rel := relSlash(tr.root, path)
		p := &pkg{dir: rel, files: bp.GoFiles, imports: map[string][]string{}}
		for _, f := range bp.GoFiles {
			imps, err := fileImports(filepath.Join(path, f))
			if err != nil {
				return err
			}
			for _, imp := range imps {
				p.imports[imp] = append(p.imports[imp], f)
			}
		}
		tr.pkgs[rel] = p
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

func relSlash(root, path string) string {
	rel, err := filepath.Rel(root, path)
	if err != nil || rel == "." {
		return ""
	}
	return filepath.ToSlash(rel)
}

// fileImports is the import paths of one Go file.
func fileImports(path string) ([]string, error) {
	f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, is := range f.Imports {
		p, err := strconv.Unquote(is.Path.Value)
		if err != nil {
			return nil, fmt.Errorf("%s: import %s: %w", path, is.Path.Value, err)
		}
		out = append(out, p)
	}
	return out, nil
}

// local reports whether an import path is a package of this module and
// returns its directory relative to the root.
func local(imp string) (string, bool) {
	if imp == module {
		return "", true
	}
	rest, ok := strings.CutPrefix(imp, module+"/")
	return rest, ok
}

// stdlib reports whether an import path is the standard library's: its
// first element has no dot (as `go list`'s Standard field decides it for
// paths outside the module).
func stdlib(imp string) bool {
	if _, ok := local(imp); ok {
		return false
	}
	first, _, _ := strings.Cut(imp, "/")
	return !strings.Contains(first, ".")
}

// under reports whether dir is prefix or inside it.
func under(dir, prefix string) bool {
	return prefix == "" || dir == prefix || strings.HasPrefix(dir, prefix+"/")
}

// exists reports whether rel (a package or a folder holding packages)
// exists in the tree.
func (tr *tree) exists(rel string) bool {
	for dir := range tr.pkgs {
		if under(dir, rel) {
			return true
		}
	}
	return false
}

func sorted(set map[string]bool) []string {
	out := make([]string, 0, len(set))
	for k := range set {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
