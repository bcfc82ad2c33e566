package main

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/rlnode/rlnode/internal/boundedfile"
	"github.com/rlnode/rlnode/policy"
)

// policySyncEnvoy keeps the cluster's envoy policies equal to the
// envoyproxy/ratelimit files of a directory, as envoyproxy/ratelimit
// serves its RUNTIME_ROOT: every *.yaml / *.yml file (a Kubernetes
// ConfigMap's symlinks included, its ..data swap seen as one change), the
// union applied together, domains whose files are gone removed. A bad file
// changes nothing: without --watch it is the exit status, with --watch a
// log line and rlnode_envoy_sync_errors_total, the last good configuration
// staying in force.
func policySyncEnvoy(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs, a := newAdminFlags("policy sync-envoy", "", stderr)
	var s envoySync
	fs.StringVar(&s.dir, "dir", "", "directory of envoyproxy/ratelimit YAML files (required)")
	fs.BoolVar(&s.watch, "watch", false, "keep running and sync again whenever the files change")
	fs.DurationVar(&s.interval, "interval", 2*time.Second, "with --watch, how often to look at the directory (and retry a sync that failed)")
	fs.StringVar(&s.metricsAddr, "metrics-addr", "", "with --watch, serve Prometheus metrics of the syncs on this address (/metrics)")
	envoyFlags(fs, &s.opt)
	pos, err := parseAdmin(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 || s.dir == "" || s.interval <= 0 {
		return usageErr("rlnode policy sync-envoy --dir DIR [--watch] [--interval D] [--metrics-addr ADDR] [--merge-domains] [--anchored] [--consistency strict|leased] [--leased-domain D]...")
	}
	s.a, s.stdout = a, stdout
	a.stderr = stderr
	if !s.watch {
		if err := s.once(ctx); errors.Is(err, errConfig) {
			return usageErr("%v", err)
		} else if err != nil {
			return err
		}
		return nil
	}
	s.log = hclog.New(&hclog.LoggerOptions{Name: "sync-envoy", Output: stderr})
	s.metrics = newSyncMetrics()
	if s.metricsAddr != "" {
		stop, err := s.metrics.serve(s.metricsAddr, s.log)
		if err != nil {
			return err
		}
		defer stop()
	}
	return s.run(ctx)
}

type envoySync struct {
	dir, metricsAddr string
	watch            bool
	interval         time.Duration
	opt              policy.EnvoyOptions
	a                *adminFlags
	stdout           io.Writer
	log              hclog.Logger
	metrics          *syncMetrics
}

// maxSyncDirBytes bounds what one sync reads from its directory in all
// (each file is bounded by policy.MaxDocumentBytes too), and
// maxSyncDirEntries, how many names it looks at.
const (
	maxSyncDirBytes   = 16 * policy.MaxDocumentBytes
	maxSyncDirEntries = 10_000
)

// envoyFiles reads the directory's YAML files, sorted by name. Names
// starting with '.' are skipped: a ConfigMap's ..data and timestamped
// directories are reached through the top-level symlinks. Each file is
// read bounded (policy.ReadDocument): a link to /dev/zero, a FIFO or a
// huge file is refused with its name, never read whole or waited on.
func envoyFiles(dir string) ([]policy.EnvoyFile, error) {
	ents, err := boundedfile.ReadDir(dir, maxSyncDirEntries)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errConfig, err)
	}
	var files []policy.EnvoyFile
	total := 0
	for _, e := range ents {
		name := e.Name()
		if strings.HasPrefix(name, ".") || !(strings.HasSuffix(name, ".yaml") || strings.HasSuffix(name, ".yml")) {
			continue
		}
		path := filepath.Join(dir, name)
		if st, err := os.Stat(path); err != nil || st.IsDir() {
			continue // a dangling symlink mid-swap, or a directory
		}
		b, err := policy.ReadDocument(path)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", errConfig, err)
		}
		if total += len(b); total > maxSyncDirBytes {
			return nil, fmt.Errorf("%w: %s: its YAML files hold more than %d bytes in all, the most one sync reads", errConfig, dir, maxSyncDirBytes)
		}
		files = append(files, policy.EnvoyFile{Name: name, Data: b})
	}
	if len(files) == 0 {
		// An unmounted or empty volume must not wipe every limit.
		return nil, fmt.Errorf("%w: %s holds no .yaml or .yml file; refusing to remove every envoy domain", errConfig, dir)
	}
	return files, nil
}

// fingerprint identifies the files' names and contents.
func fingerprint(files []policy.EnvoyFile) [32]byte {
	h := sha256.New()
	for _, f := range files {
		fmt.Fprintf(h, "%d:%s%d:", len(f.Name), f.Name, len(f.Data))
		h.Write(f.Data)
	}
	var sum [32]byte
	h.Sum(sum[:0])
	return sum
}

// errConfig marks a configuration the loader refused (as opposed to a
// cluster that could not be reached).
var errConfig = errors.New("configuration refused")

// once reads the directory and applies it.
func (s *envoySync) once(ctx context.Context) error {
	files, err := envoyFiles(s.dir)
	if err != nil {
		return err
	}
	return s.apply(ctx, files)
}

// apply loads the files and makes the cluster's envoy policies theirs.
func (s *envoySync) apply(ctx context.Context, files []policy.EnvoyFile) error {
	domains, want, err := policy.LoadEnvoy(files, s.opt)
	if err != nil {
		return fmt.Errorf("%w: %s: %w", errConfig, s.dir, err)
	}
	// Every envoy domain in the cluster belongs to the directory: one
	// whose file is gone loses its policies.
	owned := func(all []policy.Policy) []string {
		owned := slices.Clone(domains)
		for _, p := range all {
			if p.Envoy != nil && p.Envoy.Domain != "" && !slices.Contains(owned, p.Envoy.Domain) {
				owned = append(owned, p.Envoy.Domain)
			}
		}
		return owned
	}
	ch, err := applyEnvoy(ctx, s.a, owned, want, false, s.stdout)
	if err == nil && ch.none() && !s.watch {
		fmt.Fprintln(s.stdout, "no changes")
	}
	return err
}

// run syncs now and whenever the files change, until ctx ends. A refused
// configuration is reported once and not tried again until the files
// change; a sync the cluster did not take is tried again every interval.
func (s *envoySync) run(ctx context.Context) error {
	var last [32]byte // the files of the last attempt that settled
	settled := false
	t := time.NewTicker(s.interval)
	defer t.Stop()
	for {
		files, err := envoyFiles(s.dir)
		fp := fingerprint(files)
		if !settled || fp != last {
			if err == nil {
				err = s.apply(ctx, files)
			}
			switch {
			case err == nil:
				last, settled = fp, true
				s.metrics.success()
				s.log.Info("synced", "dir", s.dir, "files", len(files))
			case errors.Is(err, errConfig):
				last, settled = fp, true
				s.metrics.failure("config")
				s.log.Error("configuration refused; the cluster keeps the last one applied", "error", err)
			default:
				settled = false
				s.metrics.failure("apply")
				s.log.Warn("sync failed; retrying", "error", err, "in", s.interval)
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// syncMetrics are sync-envoy's own metrics.
type syncMetrics struct {
	reg    *prometheus.Registry
	errors *prometheus.CounterVec
	good   prometheus.Gauge
	last   prometheus.Gauge
}

func newSyncMetrics() *syncMetrics {
	m := &syncMetrics{reg: prometheus.NewRegistry(),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "rlnode_envoy_sync_errors_total",
			Help: "Syncs that failed, by stage: config (a file was refused; nothing changed) or apply (the cluster could not be reached or refused a change; retried)."}, []string{"stage"}),
		good: prometheus.NewGauge(prometheus.GaugeOpts{Name: "rlnode_envoy_sync_config_ok",
			Help: "1 when the directory's files loaded and were applied at the last attempt, 0 otherwise."}),
		last: prometheus.NewGauge(prometheus.GaugeOpts{Name: "rlnode_envoy_sync_last_success_timestamp_seconds",
			Help: "When the directory was last applied, Unix seconds."}),
	}
	m.errors.WithLabelValues("config")
	m.errors.WithLabelValues("apply")
	m.reg.MustRegister(m.errors, m.good, m.last)
	return m
}

func (m *syncMetrics) success() {
	m.good.Set(1)
	m.last.SetToCurrentTime()
}

func (m *syncMetrics) failure(stage string) {
	m.good.Set(0)
	m.errors.WithLabelValues(stage).Inc()
}

// serve exposes the metrics on addr until the returned stop.
func (m *syncMetrics) serve(addr string, log hclog.Logger) (stop func(), err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen for metrics on %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics server stopped", "error", err)
		}
	}()
	log.Info("serving sync metrics", "addr", ln.Addr().String())
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
		<-done
	}, nil
}
