package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"
)

var mdLink = regexp.MustCompile(`\]\(([^)\s]+)\)`)

// Every relative link in the README and docs/ reaches a file, and its
// #anchor a heading there: pages moved or headings renamed break here,
// not for a reader.
func TestDocLinksResolve(t *testing.T) {
	root := filepath.Join("..", "..")
	pages, _ := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	proxies, _ := filepath.Glob(filepath.Join(root, "docs", "proxies", "*.md"))
	pages = append(append(pages, proxies...), filepath.Join(root, "README.md"))
	for _, page := range pages {
		b, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range mdLink.FindAllStringSubmatch(string(b), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			file, anchor, _ := strings.Cut(target, "#")
			path := page
			if file != "" {
				path = filepath.Join(filepath.Dir(page), file)
			}
			if _, err := os.Stat(path); err != nil {
				t.Errorf("%s: link %s: %v", page, target, err)
				continue
			}
			if anchor != "" && !hasAnchor(t, path, anchor) {
				t.Errorf("%s: link %s: no heading with that anchor in %s", page, target, path)
			}
		}
	}
}

// hasAnchor reports whether the Markdown file has a heading whose GitHub
// anchor is anchor.
func hasAnchor(t *testing.T, path, anchor string) bool {
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	fence := false
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "```") {
			fence = !fence
		}
		if fence || !strings.HasPrefix(line, "#") {
			continue
		}
		if headingAnchor(strings.TrimLeft(line, "#")) == anchor {
			return true
		}
	}
	return false
}

// headingAnchor is GitHub's anchor of a heading: lower case, punctuation
// dropped except - and _, spaces as -.
func headingAnchor(h string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(h)) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}
