// Package bench is the load generator behind `rlnode bench`. It drives one
// or more rlnode nodes over HTTP in either a closed loop (a fixed number of
// workers, each sending its next request as soon as the previous one
// completes) or an open loop (requests scheduled at a fixed rate, with
// latency measured from each request's intended send time so that a slow
// server cannot hide its slowness by slowing the client down).
package bench

import (
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/rlnode/rlnode/cmd/rlnode/internal/cli"
	"github.com/rlnode/rlnode/tlsconf"
)

// Defaults applied by Validate to zero-valued Config fields.
const (
	DefaultConcurrency     = 64
	DefaultOpenConcurrency = 4096 // open loop: only an upper bound, workers are started on demand
	DefaultDuration        = 10 * time.Second
	DefaultKeys            = 1000
	DefaultDist            = "uniform"
	DefaultPath            = "/check/{key}"
	DefaultAddr            = cli.LocalAddr

	// maxKeys keeps every key representable as "c" + 15 digits = 16 bytes.
	maxKeys = 1_000_000_000_000_000
)

// Config describes one benchmark run. Zero values of Concurrency, Duration,
// Keys, Dist and Path mean "use the default"; Validate fills them in.
type Config struct {
	Addrs       []string      // node base URLs, e.g. http://127.0.0.1:8081; requests go round-robin over them
	Concurrency int           // closed loop: workers (default 64); open loop: max requests in flight (default 4096)
	Rate        float64       // > 0: open loop at this many requests/s in total; 0: closed loop
	Duration    time.Duration // measured run length after warmup (default 10s)
	Warmup      time.Duration // run this long first without recording anything (default 0)
	Keys        int           // distinct client ids (default 1000)
	Dist        string        // "uniform" (default) or "zipf" (s=1.1, key 0 hottest)
	Path        string        // default "/check/{key}"; every "{key}" becomes a 16-byte client id; may carry a ?query
	Token       string        // optional bearer token sent as Authorization
	TLS         *tls.Config   // client certificate and CA for https nodes; nil: system roots, no certificate
	Trace       bool          // record each measured second's p99 and max (Result.Trace)
	Progress    io.Writer     // if non-nil, receives a live progress line rewritten with \r every 500ms
}

// Validate fills in defaults for zero-valued fields and reports the first
// problem with the configuration.
func (c *Config) Validate() error {
	if len(c.Addrs) == 0 {
		return errors.New("bench: no node address given (--addr)")
	}
	for _, a := range c.Addrs {
		if err := checkAddr(a); err != nil {
			return err
		}
	}
	if math.IsNaN(c.Rate) || math.IsInf(c.Rate, 0) || c.Rate < 0 {
		return fmt.Errorf("bench: rate must be a finite number >= 0, got %v", c.Rate)
	}
	if c.Concurrency == 0 {
		c.Concurrency = DefaultConcurrency
		if c.Rate > 0 {
			c.Concurrency = DefaultOpenConcurrency
		}
	}
	if c.Concurrency < 1 {
		return fmt.Errorf("bench: concurrency must be >= 1, got %d", c.Concurrency)
	}
	if c.Duration == 0 {
		c.Duration = DefaultDuration
	}
	if c.Duration < 0 {
		return fmt.Errorf("bench: duration must be > 0, got %v", c.Duration)
	}
	if c.Warmup < 0 {
		return fmt.Errorf("bench: warmup must be >= 0, got %v", c.Warmup)
	}
	if c.Keys == 0 {
		c.Keys = DefaultKeys
	}
	if c.Keys < 1 || c.Keys > maxKeys {
		return fmt.Errorf("bench: keys must be between 1 and %d, got %d", maxKeys, c.Keys)
	}
	if c.Dist == "" {
		c.Dist = DefaultDist
	}
	if c.Dist != "uniform" && c.Dist != "zipf" {
		return fmt.Errorf("bench: unknown key distribution %q (want uniform or zipf)", c.Dist)
	}
	if c.Path == "" {
		c.Path = DefaultPath
	}
	if !strings.HasPrefix(c.Path, "/") {
		return fmt.Errorf("bench: path must start with /, got %q", c.Path)
	}
	return nil
}

// checkAddr accepts only plain node base URLs: the path comes from
// Config.Path, so an address carrying its own path is almost surely a typo.
func checkAddr(a string) error {
	u, err := url.Parse(a)
	if err != nil {
		return fmt.Errorf("bench: bad node address %q: %w", a, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return fmt.Errorf("bench: bad node address %q: scheme must be http or https", a)
	}
	if u.Host == "" {
		return fmt.Errorf("bench: bad node address %q: missing host", a)
	}
	if (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" {
		return fmt.Errorf("bench: bad node address %q: want a base URL without path or query", a)
	}
	return nil
}

// ParseArgs parses the arguments of `rlnode bench` (without the subcommand
// name). It returns flag.ErrHelp for -h/--help after printing usage to
// help (stdout), and a *cli.UsageError for a mistake in a flag. The returned Config is validated and has defaults filled in;
// Progress is left nil for the caller to set.
func ParseArgs(args []string, help io.Writer) (cfg Config, jsonOut bool, err error) {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(help)
	addrs := fs.String("addr", cli.DefaultAddr(), "comma-separated node base URLs; requests are spread round-robin over them; the flag wins over $"+cli.EnvAddr)
	conc := fs.Int("concurrency", 0, "closed loop: number of workers (default 64); with --rate: max requests in flight (default 4096)")
	rate := fs.Float64("rate", 0, "open loop at this many requests/s in total (latency counted from the intended send time); 0 = closed loop")
	dur := fs.Duration("duration", DefaultDuration, "how long to measure")
	warm := fs.Duration("warmup", 0, "run this long before measuring; excluded from the results")
	keys := fs.Int("keys", DefaultKeys, "number of distinct client ids")
	dist := fs.String("dist", DefaultDist, "key distribution: uniform or zipf (s=1.1)")
	path := fs.String("path", DefaultPath, "request path; {key} is replaced by a 16-byte client id (e.g. /livez has none)")
	asJSON := fs.Bool("json", false, "print the result as JSON")
	trace := fs.Bool("trace", false, "also report each second's requests, errors, p99 and max latency (finds stalls a whole-run p99 hides)")
	// The default comes from the environment after parsing, so that usage
	// output never prints the secret.
	token := fs.String("cluster-token", "", "bearer token for the nodes (default $RLNODE_CLUSTER_TOKEN)")
	env := tlsconf.FilesFromEnv()
	var tf tlsconf.Files
	fs.StringVar(&tf.Cert, "tls-cert", env.Cert, "PEM client certificate for nodes with mutual TLS (default $"+tlsconf.EnvCert+")")
	fs.StringVar(&tf.Key, "tls-key", env.Key, "PEM key of --tls-cert (default $"+tlsconf.EnvKey+")")
	fs.StringVar(&tf.CA, "tls-ca", env.CA, "PEM CA the nodes' certificates chain to (default $"+tlsconf.EnvCA+")")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: rlnode bench [flags]   (no positional arguments)")
		fs.PrintDefaults()
	}
	if err := cli.Parse(fs, args); err != nil {
		return Config{}, false, err
	}
	if fs.NArg() > 0 {
		return Config{}, false, fmt.Errorf("bench: unexpected argument %q", fs.Arg(0))
	}
	// Validate treats zero as "default"; on the command line an explicit zero
	// is a mistake worth reporting rather than silently replacing.
	if *dur <= 0 {
		return Config{}, false, fmt.Errorf("bench: --duration must be > 0, got %v", *dur)
	}
	if *keys < 1 {
		return Config{}, false, fmt.Errorf("bench: --keys must be >= 1, got %d", *keys)
	}
	if *conc < 0 {
		return Config{}, false, fmt.Errorf("bench: --concurrency must be >= 1, got %d", *conc)
	}
	if *token == "" {
		*token = os.Getenv("RLNODE_CLUSTER_TOKEN")
	}
	var tlsCfg *tls.Config
	if tf.Enabled() {
		src, err := tlsconf.Load(tf)
		if err != nil {
			return Config{}, false, fmt.Errorf("bench: %w", err)
		}
		tlsCfg = src.ClientConfig("") // the transport fills in each node's host name
	}
	cfg = Config{
		Addrs:       splitAddrs(*addrs, tlsCfg != nil),
		Concurrency: *conc,
		Rate:        *rate,
		Duration:    *dur,
		Warmup:      *warm,
		Keys:        *keys,
		Dist:        *dist,
		Path:        *path,
		Token:       *token,
		TLS:         tlsCfg,
		Trace:       *trace,
	}
	if err := cfg.Validate(); err != nil {
		return Config{}, false, err
	}
	return cfg, *asJSON, nil
}

// splitAddrs turns "a:1, http://b:2/" into ["http://a:1", "http://b:2"]:
// a missing scheme defaults to http (https with TLS), as for the other admin
// commands.
func splitAddrs(s string, https bool) []string {
	var out []string
	for _, a := range strings.Split(s, ",") {
		a = strings.TrimSpace(a)
		if a == "" {
			continue
		}
		if !strings.Contains(a, "://") {
			a = "http://" + a
		}
		if https {
			a = strings.Replace(a, "http://", "https://", 1)
		}
		out = append(out, strings.TrimRight(a, "/"))
	}
	return out
}
