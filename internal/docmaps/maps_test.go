package docmaps

import (
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"
	"testing"
)

// developmentPage is the page whose rooms table maps the whole house.
const developmentPage = "docs/development.md"

// checkDevelopmentRooms checks the rooms table (room | owns | imports) of
// docs/development.md against the tree: every package lies in a room,
// every room's imports cell is true, and a room with a DESIGN.md links it.
func checkDevelopmentRooms(tr *tree, page string) []string {
	var tb *table
	for _, t := range tables(page) {
		if t.column("room") == 0 && t.column("imports") >= 0 {
			tb = &t
			break
		}
	}
	if tb == nil {
		return []string{developmentPage + ": no rooms table (room | owns | imports)"}
	}
	imports := tb.column("imports")
	var problems []string
	rooms := map[string][]string{} // room folder -> its row
	for _, row := range tb.rows {
		names := spans(row[0])
		if len(names) == 0 || len(row) <= imports {
			problems = append(problems, fmt.Sprintf("%s: row %q names no room folder", developmentPage, row[0]))
			continue
		}
		rooms[strings.TrimSuffix(names[0], "/")] = row
	}
	roomOf := func(dir string) string {
		best := "-"
		for room := range rooms {
			if under(dir, room) && (best == "-" || len(room) > len(best)) {
				best = room
			}
		}
		return best
	}
	got := map[string]*arrows{}
	for room := range rooms {
		got[room] = &arrows{local: map[string][]string{}}
	}
	for _, dir := range sortedKeys(tr.pkgs) {
		room := roomOf(dir)
		if room == "-" {
			problems = append(problems, fmt.Sprintf("%s: package %s is in no row of the rooms table", developmentPage, dir))
			continue
		}
		in := func(d string) bool { return roomOf(d) == room }
		for imp := range tr.pkgs[dir].imports {
			got[room].add(imp, dir, in)
		}
	}
	for _, room := range sortedKeys(rooms) {
		row := rooms[room]
		where := fmt.Sprintf("%s, rooms table, row `%s/`", developmentPage, room)
		in := func(d string) bool { return roomOf(d) == room }
		problems = append(problems, checkImportsCell(tr, where, row[imports], room, in, *got[room])...)
		design := path.Join(room, "DESIGN.md")
		if _, err := os.Stat(filepath.Join(tr.root, design)); err == nil && !strings.Contains(row[0], "(../"+design+")") {
			problems = append(problems, fmt.Sprintf("%s: %s exists; link it in the room's cell as ([DESIGN](../%s))", where, design, design))
		}
	}
	return problems
}

func sortedKeys[V any](m map[string]V) []string {
	set := map[string]bool{}
	for k := range m {
		set[k] = true
	}
	return sorted(set)
}

// designPages returns every package folder with a DESIGN.md and its text.
func designPages(t *testing.T, tr *tree) map[string]string {
	t.Helper()
	out := map[string]string{}
	for dir := range tr.pkgs {
		b, err := os.ReadFile(filepath.Join(tr.root, filepath.FromSlash(dir), "DESIGN.md"))
		if err == nil {
			out[dir] = string(b)
		}
	}
	return out
}

func readPage(t *testing.T, tr *tree, rel string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(tr.root, filepath.FromSlash(rel)))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func report(t *testing.T, problems []string) {
	t.Helper()
	for _, p := range problems {
		t.Error(p)
	}
}

// The rooms table of docs/development.md says who imports whom; a new
// arrow, a dropped one or a new folder must show up there.
func TestDevelopmentRoomsTableMatchesImports(t *testing.T) {
	tr := loadTree(t)
	report(t, checkDevelopmentRooms(tr, readPage(t, tr, developmentPage)))
}

// Every package's DESIGN.md rooms table names every file of its package,
// names no file that is gone, and its imports column, where it has one,
// is true.
func TestDesignRoomsTablesMatchTheCode(t *testing.T) {
	tr := loadTree(t)
	pages := designPages(t, tr)
	if len(pages) == 0 {
		t.Fatal("found no DESIGN.md beside a package")
	}
	for _, dir := range sortedKeys(pages) {
		report(t, checkDesignRooms(tr, dir, pages[dir]))
	}
}
