package main

import (
	"context"
	"fmt"
	"io"
	"regexp"
	"runtime"
	"runtime/debug"

	"github.com/rlnode/rlnode/fsm"
)

// version is set at build time with -ldflags '-X main.version=v1.2.3'
// (scripts/release.sh); otherwise it comes from the module version, or is
// "dev" plus the VCS commit Go records.
var version = ""

// pseudoVersion matches the version Go stamps on a build of an untagged
// commit (v0.0.0-20261126221859-48ca3b43f13f, maybe +dirty): that is a
// dev build, shown as dev+<commit>.
var pseudoVersion = regexp.MustCompile(`-(\d+\.)?\d{14}-[0-9a-f]{12}(\+dirty)?$`)

// releaseVersion is this build's release as members report it to each
// other (GET /v1/cluster/members, the version gate's refusals):
// "v1.2.3", or "dev+<commit>[-dirty]" for a build from a checkout.
func releaseVersion() string {
	if version != "" {
		return version
	}
	v, rev, dirty := "", "", false
	if bi, ok := debug.ReadBuildInfo(); ok {
		if mv := bi.Main.Version; mv != "" && mv != "(devel)" && !pseudoVersion.MatchString(mv) {
			v = mv // a tagged module version (go install ...@v1.2.3)
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
	if v != "" {
		return v
	}
	v = "dev"
	if rev != "" {
		v += "+" + rev[:min(len(rev), 12)]
		if dirty {
			v += "-dirty"
		}
	}
	return v
}

// versionString is `rlnode version`'s line: the release, the log format
// this build writes and the oldest it reads, Go and the platform.
func versionString() string {
	return fmt.Sprintf("rlnode %s (log format %d, reads %d-%d) %s %s/%s", releaseVersion(),
		fsm.CurrentFormat, fsm.OldestFormat, fsm.CurrentFormat, runtime.Version(), runtime.GOOS, runtime.GOARCH)
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

// memberVersion is a member's release and log format as peers and top
// show them; a member of a release before formats were reported shows
// as format 3, which is how the version gate counts it.
func memberVersion(version string, format fsm.Format) string {
	if version == "" && format == 0 {
		return fmt.Sprintf("older (format %d)", fsm.FormatR3)
	}
	return fmt.Sprintf("%s (format %d)", orDash(version), format)
}
