// Command permitapp is the permit holder the process tests kill: it takes
// -n permits of -policy/-key through the Go client, prints one line per
// permit ("permit ID EXPIRES_MS") and "holding", then holds them until it
// is killed. It never releases: what a crashed holder leaves behind.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/rlnode/rlnode/client"
)

func main() {
	addrs := flag.String("addrs", "", "comma-separated node addresses")
	pol := flag.String("policy", "jobs", "concurrency policy")
	key := flag.String("key", "u", "key")
	n := flag.Int("n", 1, "permits to take")
	ttl := flag.Duration("ttl", 3*time.Second, "permit TTL")
	flag.Parse()
	c, err := client.New(client.Config{Addrs: strings.Split(*addrs, ","), Token: os.Getenv("PERMITAPP_TOKEN")})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	for range *n {
		p, err := c.Acquire(context.Background(), *pol, *key, *ttl)
		if err != nil || !p.Acquired {
			fmt.Fprintf(os.Stderr, "acquire: %+v %v\n", p, err)
			os.Exit(1)
		}
		fmt.Printf("permit %s %d\n", p.ID, p.ExpiresAt.UnixMilli())
	}
	fmt.Println("holding")
	select {}
}
