// Command leaseapp is an application instance for lease process tests: it
// hits one key through client.Local from several goroutines, each with its
// own Local (its own holder), and writes one line per allowed hit:
//
//	allow <unix ns before the call> <window reset, unix ms> <served by>
//
// and one line per refused hit and per error (no decision), to stderr:
//
//	deny <unix ns before the call> <served by>
//	error <unix ns before the call> <the error>
//
// A test runs several of these against a cluster, pauses or kills them,
// and checks from their lines that no window admitted more than its limit
// and that no hit was admitted after its window ended.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/rlnode/rlnode/client"
)

func main() {
	addrs := flag.String("addrs", "", "the cluster's HTTP addresses, comma-separated")
	policy := flag.String("policy", "default", "policy")
	key := flag.String("key", "shared", "key every hit goes to")
	holders := flag.Int("holders", 2, "goroutines, each with its own Local")
	every := flag.Duration("every", time.Millisecond, "pause between one goroutine's hits")
	lease := flag.Duration("lease", time.Second, "lease asked for each grant")
	// Longer than a test's pauses, so the units a paused instance holds
	// are still in hand when it resumes: only the deadline stops them.
	cool := flag.Duration("cool", 10*time.Second, "idle time before a key's units go back")
	flag.Parse()

	c, err := client.New(client.Config{Addrs: strings.Split(*addrs, ","), Timeout: 3 * time.Second})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	var out sync.Mutex
	var wg sync.WaitGroup
	for i := 0; i < *holders; i++ {
		l, err := client.NewLocal(c, client.LocalConfig{HotAfter: 2, MaxWant: 20, Lease: *lease, CoolAfter: *cool})
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer l.Close(context.Background())
			for ctx.Err() == nil {
				before := time.Now().UnixNano()
				r, err := l.Allow(ctx, *policy, *key)
				if err == nil && r.Allowed {
					// One write per hit, straight to the file: a kill -9
					// loses no line of a hit that was admitted before it.
					out.Lock()
					fmt.Fprintf(os.Stdout, "allow %d %d %s\n", before, r.ResetAt.UnixMilli(), r.ServedBy)
					out.Unlock()
				} else if err != nil {
					fmt.Fprintf(os.Stderr, "error %d %v\n", before, err)
				} else {
					fmt.Fprintf(os.Stderr, "deny %d %s\n", before, r.ServedBy)
				}
				select {
				case <-ctx.Done():
				case <-time.After(*every):
				}
			}
		}()
	}
	wg.Wait()
	fmt.Fprintln(os.Stderr, "done")
}
