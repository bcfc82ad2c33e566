package docmaps

import (
	"regexp"
	"strings"
)

// table is one Markdown table: its header cells and its rows' cells.
type table struct {
	line   int // 1-based line of the header, for messages
	header []string
	rows   [][]string
}

// column returns the index of the header cell named name (case
// insensitive), or -1.
func (tb table) column(name string) int {
	for i, h := range tb.header {
		if strings.EqualFold(strings.TrimSpace(h), name) {
			return i
		}
	}
	return -1
}

// tables finds every table of a Markdown page outside code fences.
func tables(page string) []table {
	var out []table
	var cur *table
	fence := false
	for i, line := range strings.Split(page, "\n") {
		trimmed := strings.TrimSpace(line)
		if strings.HasPrefix(trimmed, "```") {
			fence = !fence
		}
		if fence || !strings.HasPrefix(trimmed, "|") {
			cur = nil
			continue
		}
		cells := splitRow(trimmed)
		switch {
		case cur == nil:
			out = append(out, table{line: i + 1, header: cells})
			cur = &out[len(out)-1]
		case isRule(cells) && len(cur.rows) == 0:
		default:
			cur.rows = append(cur.rows, cells)
		}
	}
	return out
}

// splitRow splits "| a | b |" into its cells; a pipe inside backticks is
// part of its cell.
func splitRow(line string) []string {
	line = strings.TrimPrefix(line, "|")
	line = strings.TrimSuffix(line, "|")
	var cells []string
	var b strings.Builder
	code := false
	for _, r := range line {
		switch {
		case r == '`':
			code = !code
		case r == '|' && !code:
			cells = append(cells, strings.TrimSpace(b.String()))
			b.Reset()
			continue
		}
		b.WriteRune(r)
	}
	return append(cells, strings.TrimSpace(b.String()))
}

func isRule(cells []string) bool {
	for _, c := range cells {
		if strings.Trim(c, "-: ") != "" {
			return false
		}
	}
	return true
}

var codeSpan = regexp.MustCompile("`([^`]+)`")

// spans returns the text of every code span of a cell.
func spans(cell string) []string {
	var out []string
	for _, m := range codeSpan.FindAllStringSubmatch(cell, -1) {
		out = append(out, m[1])
	}
	return out
}
