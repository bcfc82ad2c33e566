// Command skipped prints one line naming the tests the last `go test` run
// skipped for want of a program (recorded by internal/testprog), then
// forgets them. .ci/run runs it after the tests:
//
//	rm -rf "$(go run ./internal/testprog/skipped -dir)"; go test ./...; go run ./internal/testprog/skipped
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/rlnode/rlnode/internal/testprog"
)

func main() {
	dir := flag.Bool("dir", false, "print the directory the skips are recorded in, and nothing else")
	flag.Parse()
	if *dir {
		fmt.Println(testprog.Dir())
		return
	}
	skips, err := testprog.ReadAll()
	if err != nil {
		fmt.Fprintln(os.Stderr, "skipped:", err)
		os.Exit(1)
	}
	if line := testprog.Summary(skips); line != "" {
		fmt.Println(line)
	} else {
		fmt.Println("no test was skipped for a missing program")
	}
	os.RemoveAll(testprog.Dir())
}
