package docmaps

import (
	"fmt"
	"sort"
	"strings"
)

// arrows is what one room of a table really imports: each package of the
// module outside the room, with who imports it ("cluster/grant.go",
// "httpapi"), and whether anything outside the standard library is
// imported at all.
type arrows struct {
	local      map[string][]string
	thirdParty []string
}

func (a *arrows) add(imp, by string, in func(dir string) bool) {
	if dir, ok := local(imp); ok {
		if !in(dir) {
			a.local[dir] = append(a.local[dir], by)
		}
		return
	}
	if !stdlib(imp) {
		a.thirdParty = append(a.thirdParty, imp)
	}
}

// checkImportsCell compares an imports cell with what the room imports.
//
// The cell's grammar, which every rooms table follows:
//   - each code span names a package or folder of the module, relative to
//     the room's folder first, else to the root (`storage` in cluster/ is
//     cluster/storage; `window` is window/); a folder stands for every
//     package under it. Spans naming the room's own packages describe its
//     inside and are not arrows. Words outside code spans are commentary.
//   - the spans must cover every module package the room imports, and each
//     span must be imported: a span nothing imports is drift too.
//   - a cell that is exactly "stdlib" also says the room imports nothing
//     outside the standard library; "everything" is not checked.
//
// Third-party imports other than under "stdlib" are commentary: the arrows
// the maps exist for are the ones between rooms.
func checkImportsCell(tr *tree, where, cell, roomDir string, in func(string) bool, got arrows) []string {
	text := strings.TrimSpace(cell)
	if strings.Contains(strings.ToLower(text), "everything") {
		return nil
	}
	var problems []string
	bad := func(format string, args ...any) {
		problems = append(problems, where+": "+fmt.Sprintf(format, args...))
	}
	if text == "stdlib" && len(got.thirdParty) > 0 {
		bad("says stdlib, but the code imports %s", strings.Join(dedupe(got.thirdParty), ", "))
	}
	var named []string
	for _, span := range spans(cell) {
		dir, ok := resolve(tr, roomDir, strings.TrimSuffix(span, "/"))
		if !ok {
			bad("names `%s`, which is no package or folder of the module", span)
			continue
		}
		if !in(dir) {
			named = append(named, dir)
		}
	}
	covered := map[string]bool{}
	var missing []string
	for dir, by := range got.local {
		hit := false
		for _, n := range named {
			if under(dir, n) {
				hit, covered[n] = true, true
			}
		}
		if !hit {
			missing = append(missing, fmt.Sprintf("`%s` (imported by %s)", dir, strings.Join(dedupe(by), ", ")))
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		bad("the cell %q does not name %s", text, strings.Join(missing, ", "))
	}
	for _, n := range dedupe(named) {
		if !covered[n] {
			bad("the cell %q names `%s`, which the room does not import", text, n)
		}
	}
	return problems
}

// resolve finds the module folder a span names, relative to roomDir first.
func resolve(tr *tree, roomDir, span string) (string, bool) {
	if span == "" || strings.Contains(span, " ") {
		return "", false
	}
	if roomDir != "" && tr.exists(roomDir+"/"+span) {
		return roomDir + "/" + span, true
	}
	if tr.exists(span) {
		return span, true
	}
	return "", false
}

func dedupe(list []string) []string {
	set := map[string]bool{}
	for _, s := range list {
		set[s] = true
	}
	return sorted(set)
}
