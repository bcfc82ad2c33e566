package docmaps

import (
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"
)

// checkDesignRooms checks the rooms tables of one package's DESIGN.md
// (first column "room" or "file"): every file and folder named exists,
// a table that names Go files names every non-test Go file of the package
// (the build-tagged ones too), and an "imports" column, where there is
// one, is true for the files and folders of its row.
func checkDesignRooms(tr *tree, dir, page string) []string {
	name := path.Join(dir, "DESIGN.md")
	goFiles, err := packageFiles(tr, dir)
	if err != nil {
		return []string{fmt.Sprintf("%s: %v", name, err)}
	}
	var problems []string
	for _, tb := range tables(page) {
		if tb.column("room") != 0 && tb.column("file") != 0 {
			continue
		}
		imports := tb.column("imports")
		named := map[string]bool{}
		for _, row := range tb.rows {
			where := fmt.Sprintf("%s:%d, row %s", name, tb.line, row[0])
			files, folders, bad := rowRooms(tr, dir, where, row[0])
			problems = append(problems, bad...)
			for _, f := range files {
				named[f] = true
			}
			if imports >= 0 && len(row) > imports {
				problems = append(problems, checkRowImports(tr, dir, where, row[imports], files, folders)...)
			}
		}
		if len(named) == 0 {
			continue
		}
		var unnamed []string
		for f := range goFiles {
			if !named[f] {
				unnamed = append(unnamed, f)
			}
		}
		if len(unnamed) > 0 {
			problems = append(problems, fmt.Sprintf("%s:%d: the rooms table does not name %s; say in a row what each owns",
				name, tb.line, strings.Join(dedupe(unnamed), ", ")))
		}
	}
	return problems
}

// packageFiles is every non-test Go file of dir, whatever its build tags.
func packageFiles(tr *tree, dir string) (map[string]bool, error) {
	entries, err := os.ReadDir(filepath.Join(tr.root, filepath.FromSlash(dir)))
	if err != nil {
		return nil, err
	}
	out := map[string]bool{}
	for _, e := range entries {
		if n := e.Name(); strings.HasSuffix(n, ".go") && !strings.HasSuffix(n, "_test.go") {
			out[n] = true
		}
	}
	return out, nil
}

// rowRooms reads a row's first cell: the Go files (x.go) and sub-folders
// (x/) it names, each checked to exist.
func rowRooms(tr *tree, dir, where, cell string) (files, folders, problems []string) {
	for _, span := range spans(cell) {
		switch {
		case strings.HasSuffix(span, ".go"):
			if _, err := os.Stat(filepath.Join(tr.root, filepath.FromSlash(dir), span)); err != nil {
				problems = append(problems, fmt.Sprintf("%s: names %s, which is not a file of %s/", where, span, dir))
				continue
			}
			files = append(files, span)
		case strings.HasSuffix(span, "/"):
			sub := path.Join(dir, strings.TrimSuffix(span, "/"))
			if fi, err := os.Stat(filepath.Join(tr.root, filepath.FromSlash(sub))); err != nil || !fi.IsDir() {
				problems = append(problems, fmt.Sprintf("%s: names %s, which is not a folder of %s/", where, span, dir))
				continue
			}
			folders = append(folders, sub)
		}
	}
	return files, folders, problems
}

// checkRowImports checks a row's imports cell against the imports of its
// files (outside their package) and of each of its folders' packages
// (outside the folder).
func checkRowImports(tr *tree, dir, where, cell string, files, folders []string) []string {
	var problems []string
	if len(files) > 0 {
		got := arrows{local: map[string][]string{}}
		in := func(d string) bool { return d == dir }
		for _, f := range files {
			imps, err := fileImports(filepath.Join(tr.root, filepath.FromSlash(dir), f))
			if err != nil {
				problems = append(problems, fmt.Sprintf("%s: %v", where, err))
			}
			for _, imp := range imps {
				got.add(imp, path.Join(dir, f), in)
			}
		}
		problems = append(problems, checkImportsCell(tr, where, cell, dir, in, got)...)
	}
	for _, sub := range folders {
		got := arrows{local: map[string][]string{}}
		in := func(d string) bool { return under(d, sub) }
		for pdir, p := range tr.pkgs {
			if under(pdir, sub) {
				for imp := range p.imports {
					got.add(imp, pdir, in)
				}
			}
		}
		problems = append(problems, checkImportsCell(tr, where, cell, dir, in, got)...)
	}
	return problems
}
