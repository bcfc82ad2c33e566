package main

import (
	"context"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
)

// version is set at build time with -ldflags '-X main.version=v1.2.3';
// otherwise it comes from the module version or VCS stamp Go records.
var version = ""

func versionString() string {
	v, rev, dirty := version, "", false
	if bi, ok := debug.ReadBuildInfo(); ok {
		if v == "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			v = bi.Main.Version
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				dirty = s.Value == "true"
			}
		}
	}
	if v == "" {
		v = "devel"
	}
	if rev != "" {
		if len(rev) > 12 {
			rev = rev[:12]
		}
		if dirty {
			rev += "-dirty"
		}
		v += " (" + rev + ")"
	}
	return fmt.Sprintf("rlnode %s %s %s/%s", v, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}

func runVersion(_ context.Context, args []string, stdout, _ io.Writer) error {
	if len(args) == 1 && (args[0] == "-h" || args[0] == "--help") {
		fmt.Fprintln(stdout, "usage: rlnode version   (no arguments; also rlnode --version)")
		return nil
	}
	if len(args) > 0 {
		return usageErr("version takes no arguments")
	}
	fmt.Fprintln(stdout, versionString())
	return nil
}
