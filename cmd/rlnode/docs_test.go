package main

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode"

	"github.com/rlnode/rlnode/cmd/rlnode/internal/proctest"
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

// Every `rlnode ...` command shown in the README and docs/ still parses:
// its command exists and so do its flags (each is run with -h appended,
// which prints the help once the flags before it parsed). A renamed flag
// breaks here, not in a new user's terminal. So does a command that
// talks to a node (its help has --addr) with no address to reach: it
// needs --addr, or the page must set RLNODE_ADDR or start a node on the
// default address before it. And a certificate or key file a page names
// must be one `rlnode tls init` writes.
func TestDocCommandsParse(t *testing.T) {
	tlsFiles := tlsInitFiles(t)
	root := filepath.Join("..", "..")
	pages, _ := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	pages = append(pages, filepath.Join(root, "README.md"))
	// Lines that show a mistake on purpose, with its answer.
	mistakes := []string{"--windw", "--window 5"}
	checked := 0
	for _, page := range pages {
		b, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range certFileNames(string(b)) {
			if !slices.ContainsFunc(tlsFiles, func(re *regexp.Regexp) bool { return re.MatchString(filepath.Base(name)) }) {
				t.Errorf("%s: names %s, which `rlnode tls init` does not write (it writes %v)", page, name, tlsFiles)
			}
		}
		for _, dc := range docCommands(string(b)) {
			cmd := dc.line
			if slices.ContainsFunc(mistakes, func(m string) bool { return strings.Contains(cmd, m) }) {
				continue
			}
			args, ok := shellWords(strings.TrimPrefix(cmd, "rlnode"))
			if !ok {
				continue // placeholders such as ... or [more.yaml ...]
			}
			stdout, stderr, code := proctest.Run(t, rlnodeBin, []string{envAddr + "="}, append(args, "-h")...)
			if code != 0 {
				t.Errorf("%s: %q does not parse: exit %d\n%s", page, cmd, code, stderr)
			}
			if takesAddr.MatchString(stdout+stderr) && !slices.Contains(args, "--addr") && !dc.addrSet {
				t.Errorf("%s: %q names no node: add --addr, or `export %s=...` earlier on the page", page, cmd, envAddr)
			}
			checked++
		}
	}
	if checked < 30 {
		t.Fatalf("checked only %d commands; is the extraction broken?", checked)
	}
}

// takesAddr matches the help of a command that talks to a running node.
var takesAddr = regexp.MustCompile(`(?m)^\s+--addr\b`)

// reachesDefaultAddr reports whether a line of a page's code makes a
// command without --addr reach a node: it sets RLNODE_ADDR, or starts a
// node serving on the default address (no --http-addr, or that one).
func reachesDefaultAddr(line string) bool {
	if strings.Contains(line, envAddr+"=") {
		return true
	}
	f := strings.Fields(line)
	if len(f) == 1 && f[0] == "rlnode" {
		return true // serve is the default command
	}
	if len(f) < 2 || f[0] != "rlnode" || (f[1] != "serve" && !strings.HasPrefix(f[1], "-")) {
		return false
	}
	for i, w := range f {
		addr, ok := strings.CutPrefix(w, "--http-addr=")
		if w == "--http-addr" && i+1 < len(f) {
			addr, ok = f[i+1], true
		}
		if ok {
			return addr == "127.0.0.1:8080" || addr == "localhost:8080"
		}
	}
	return true
}

// certFile matches a certificate or key file name; a name followed by =
// is a key (kubectl's --from-file=ca.crt=...), not a file.
var certFile = regexp.MustCompile(`[\w./${}()-]+\.(?:pem|crt|key)\b[^=]`)

// certFileNames are the certificate and key files a page names.
func certFileNames(page string) []string {
	var out []string
	for _, m := range certFile.FindAllString(page+" ", -1) {
		out = append(out, m[:len(m)-1])
	}
	return out
}

// tlsInitFiles runs `rlnode tls init` for one node and returns the names
// it wrote, as patterns where the node's name stands for any.
func tlsInitFiles(t *testing.T) []*regexp.Regexp {
	t.Helper()
	dir := t.TempDir()
	const node = "docnode"
	proctest.TLSInit(t, rlnodeBin, dir, node)
	entries, err := os.ReadDir(dir)
	if err != nil || len(entries) == 0 {
		t.Fatalf("tls init wrote nothing in %s: %v", dir, err)
	}
	var out []*regexp.Regexp
	for _, e := range entries {
		out = append(out, regexp.MustCompile("^"+strings.ReplaceAll(regexp.QuoteMeta(e.Name()), node, `[\w${}().-]+`)+"$"))
	}
	return out
}

// docCommand is an rlnode command line on a page; addrSet says the page
// made the default --addr reachable before it.
type docCommand struct {
	line    string
	addrSet bool
}

// docCommands are the rlnode command lines in a page's code blocks, with
// continuation lines joined, prompts and trailing comments removed.
func docCommands(page string) []docCommand {
	var out []docCommand
	fence, cont, addrSet := false, "", false
	for _, line := range strings.Split(page, "\n") {
		if strings.HasPrefix(line, "```") {
			fence, cont = !fence, ""
			continue
		}
		if !fence {
			continue
		}
		line = cont + strings.TrimPrefix(line, "$ ")
		cont = ""
		if strings.HasSuffix(line, "\\") {
			cont = strings.TrimSuffix(line, "\\")
			continue
		}
		if i := strings.Index(line, " #"); i >= 0 {
			line = line[:i]
		}
		line = strings.TrimSpace(line)
		if reachesDefaultAddr(line) {
			addrSet = true
		}
		fields := strings.Fields(line)
		if len(fields) == 0 || fields[0] != "rlnode" || (len(fields) > 1 && strings.HasSuffix(fields[1], ":")) {
			continue // not a command, or a line of output ("rlnode serve: ...")
		}
		out = append(out, docCommand{line: line, addrSet: addrSet})
	}
	return out
}

// shellWords splits a command line as the shell would for the simple
// lines docs show: words, "double" or 'single' quotes. It reports false
// for placeholders (..., [optional]) that only a person fills in.
func shellWords(s string) ([]string, bool) {
	if strings.Contains(s, "...") || strings.Contains(s, "[") {
		return nil, false
	}
	var words []string
	var cur strings.Builder
	in, quote := false, rune(0)
	for _, r := range s {
		switch {
		case quote != 0 && r == quote:
			quote = 0
		case quote != 0:
			cur.WriteRune(r)
		case r == '"' || r == '\'':
			quote, in = r, true
		case r == ' ' || r == '\t':
			if in {
				words = append(words, cur.String())
				cur.Reset()
				in = false
			}
		default:
			cur.WriteRune(r)
			in = true
		}
	}
	if in {
		words = append(words, cur.String())
	}
	return words, quote == 0
}
