// Package cli parses rlnode's command lines the way a person at a terminal
// expects: help that was asked for goes to stdout (so `rlnode join --help |
// less` shows it), and a mistake is a short message naming what is wrong, a
// "did you mean" when a known name is close, and where the full help is,
// instead of the whole flag list on stderr.
package cli

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"
)

// UsageError is a command-line mistake: exit status 2. Error is the
// mistake itself; Hint, when set, is the usage line and where to find the
// full help, printed on the lines after it.
type UsageError struct {
	Err  error
	Hint string
}

func (e *UsageError) Error() string { return e.Err.Error() }
func (e *UsageError) Unwrap() error { return e.Err }

// Errorf makes a UsageError without a hint.
func Errorf(format string, args ...any) error {
	return &UsageError{Err: fmt.Errorf(format, args...)}
}

// Parse parses args into fs. Asked for help (-h, --help), it prints fs's
// usage to fs.Output() and returns flag.ErrHelp. Any other problem comes
// back as a *UsageError of one line, with the first line of fs's usage and
// "see `rlnode NAME -h`" as its hint; nothing is printed.
func Parse(fs *flag.FlagSet, args []string) error {
	out, usage := fs.Output(), fs.Usage
	restore, refused := withUnits(fs)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	err := fs.Parse(args)
	fs.SetOutput(out)
	fs.Usage = usage
	restore()
	switch {
	case err == nil:
		return nil
	case errors.Is(err, flag.ErrHelp):
		printUsage(fs, out)
		return err
	}
	if *refused != nil {
		err = *refused
	}
	if name, ok := undefinedFlag(err); ok {
		msg := fmt.Sprintf("unknown flag --%s", name)
		if s := Suggest(name, append(flagNames(fs), "help")); s != "" {
			msg += fmt.Sprintf(" (did you mean --%s?)", s)
		}
		err = errors.New(msg)
	}
	return &UsageError{Err: err, Hint: Hint(fs)}
}

// Hint is the usage line of fs and where its full help is.
func Hint(fs *flag.FlagSet) string {
	var b bytes.Buffer
	printUsage(fs, &b)
	line, _, _ := strings.Cut(b.String(), "\n")
	return fmt.Sprintf("%s\nsee `rlnode %s -h` for every flag", strings.TrimSpace(line), fs.Name())
}

func printUsage(fs *flag.FlagSet, w io.Writer) {
	out := fs.Output()
	fs.SetOutput(w)
	defer fs.SetOutput(out)
	if fs.Usage == nil {
		fmt.Fprintf(w, "usage: rlnode %s [flags]\n", fs.Name())
		fs.PrintDefaults()
		return
	}
	fs.Usage()
}

// undefinedFlag reads the one error the flag package gives only as text:
// "flag provided but not defined: -name". It returns the name without
// dashes.
func undefinedFlag(err error) (string, bool) {
	const prefix = "flag provided but not defined: -"
	return strings.CutPrefix(err.Error(), prefix)
}

func flagNames(fs *flag.FlagSet) []string {
	var names []string
	fs.VisitAll(func(f *flag.Flag) { names = append(names, f.Name) })
	return names
}

// WithUnits makes fs's duration flags explain a missing unit ("--window 5")
// instead of the flag package's bare "parse error", until restore is
// called. Help printed in between would name the flags' type wrongly, so
// restore before printing it.
func WithUnits(fs *flag.FlagSet) (restore func()) {
	restore, _ = withUnits(fs)
	return restore
}

// withUnits is WithUnits that also reports the first duration refused, in
// words of its own ("--window 5: ...").
func withUnits(fs *flag.FlagSet) (restore func(), refused *error) {
	refused = new(error)
	var undo []func()
	fs.VisitAll(func(f *flag.Flag) {
		g, ok := f.Value.(flag.Getter)
		if !ok {
			return
		}
		if _, ok := g.Get().(time.Duration); !ok {
			return
		}
		orig := f.Value
		f.Value = durationValue{Value: orig, name: f.Name, refused: refused}
		undo = append(undo, func() { f.Value = orig })
	})
	return func() {
		for _, u := range undo {
			u()
		}
	}, refused
}

// durationValue is a duration flag whose errors say what a duration looks
// like.
type durationValue struct {
	flag.Value
	name    string
	refused *error
}

func (d durationValue) String() string {
	if d.Value == nil {
		return ""
	}
	return d.Value.String()
}

func (d durationValue) Set(s string) error {
	if _, err := time.ParseDuration(s); err != nil {
		err = DurationError(s)
		if *d.refused == nil {
			*d.refused = fmt.Errorf("--%s %s: %w", d.name, s, err)
		}
		return err
	}
	return d.Value.Set(s)
}

// DurationError explains why s is not a Go duration.
func DurationError(s string) error {
	t := strings.TrimSpace(s)
	if t != "" && strings.Trim(t, "0123456789.") == "" {
		return fmt.Errorf("a duration needs a unit: write %ss (seconds), %sms or %sm", t, t, t)
	}
	return fmt.Errorf("%q is not a duration: write a number and a unit, such as 500ms, 60s, 5m or 1h30m", s)
}

// Suggest returns the candidate closest to word when it is close enough to
// be a typo (at most 1 edit, plus 1 for every 4 letters), or "".
func Suggest(word string, candidates []string) string {
	best, bestD := "", 1+len(word)/4+1
	for _, c := range candidates {
		if d := distance(word, c); d > 0 && d < bestD {
			best, bestD = c, d
		}
	}
	return best
}

// distance is the Levenshtein distance of a and b, counting a swap of two
// neighbours as one edit.
func distance(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	prev2 := make([]int, len(rb)+1)
	prev := make([]int, len(rb)+1)
	cur := make([]int, len(rb)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(ra); i++ {
		cur[0] = i
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && ra[i-1] == rb[j-2] && ra[i-2] == rb[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(rb)]
}
