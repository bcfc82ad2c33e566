package cli

import (
	"bytes"
	"errors"
	"flag"
	"strings"
	"testing"
	"time"
)

func testSet(out *bytes.Buffer) (*flag.FlagSet, *time.Duration) {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(out)
	fs.Usage = func() {
		fs.Output().Write([]byte("usage: rlnode serve [flags]\n\nflags:\n"))
		fs.PrintDefaults()
	}
	w := fs.Duration("window", time.Minute, "window length")
	fs.Bool("wait-for-join", false, "wait")
	return fs, w
}

// The flag package names an undefined flag only in its message; this is
// the one place that reads it, so a change in its wording fails here.
func TestUndefinedFlagReadsTheFlagPackage(t *testing.T) {
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	fs.SetOutput(&bytes.Buffer{})
	err := fs.Parse([]string{"--windw", "5s"})
	name, ok := undefinedFlag(err)
	if !ok || name != "windw" {
		t.Fatalf("undefinedFlag(%q) = %q, %v", err, name, ok)
	}
	if _, ok := undefinedFlag(errors.New("something else")); ok {
		t.Fatal("an unrelated error read as an undefined flag")
	}
}

func TestParseMistakes(t *testing.T) {
	for _, c := range []struct {
		args []string
		want []string
	}{
		{[]string{"--windw", "5s"}, []string{"unknown flag --windw (did you mean --window?)", "usage: rlnode serve [flags]", "see `rlnode serve -h`"}},
		{[]string{"-hlep"}, []string{"did you mean --help?"}},
		{[]string{"--window", "5"}, []string{"--window 5: a duration needs a unit: write 5s (seconds)"}},
		{[]string{"--window", "soon"}, []string{"not a duration", "500ms"}},
		{[]string{"--zzzzzzzz"}, []string{"unknown flag --zzzzzzzz\n"}},
	} {
		var out bytes.Buffer
		fs, _ := testSet(&out)
		err := Parse(fs, c.args)
		var ue *UsageError
		if !errors.As(err, &ue) {
			t.Fatalf("%v: %v, want a UsageError", c.args, err)
		}
		got := ue.Error() + "\n" + ue.Hint
		for _, w := range c.want {
			if !strings.Contains(got, w) {
				t.Errorf("%v: %q lacks %q", c.args, got, w)
			}
		}
		if strings.Contains(got, "did you mean") && strings.Contains(c.args[0], "zzz") {
			t.Errorf("%v: a far-off word got a suggestion: %q", c.args, got)
		}
		if out.Len() != 0 {
			t.Errorf("%v: printed %q; a mistake prints nothing itself", c.args, out.String())
		}
	}
}

func TestParseHelpAndValues(t *testing.T) {
	var out bytes.Buffer
	fs, _ := testSet(&out)
	if err := Parse(fs, []string{"-h"}); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("-h: %v", err)
	}
	// Help names a duration flag's type as the flag package does: the
	// wrapping that explains units is gone by then.
	if s := out.String(); !strings.Contains(s, "-window duration") || !strings.HasPrefix(s, "usage: rlnode serve") {
		t.Fatalf("help: %q", s)
	}
	fs, w := testSet(&bytes.Buffer{})
	if err := Parse(fs, []string{"--window", "90s"}); err != nil || *w != 90*time.Second {
		t.Fatalf("--window 90s: %v, %v", err, *w)
	}
}

func TestSuggest(t *testing.T) {
	cmds := []string{"serve", "peers", "status", "join", "remove", "policy", "restore", "recover"}
	for word, want := range map[string]string{
		"servee": "serve", "sevre": "serve", "statsu": "status", "polcy": "policy", "restroe": "restore",
		"frobnicate": "", "x": "", "serve": "",
	} {
		if got := Suggest(word, cmds); got != want {
			t.Errorf("Suggest(%q) = %q, want %q", word, got, want)
		}
	}
}
