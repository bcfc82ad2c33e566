package main

import (
	"context"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/rlnode/rlnode/cluster/transport"
	"github.com/rlnode/rlnode/internal/boundedfile"
	"github.com/rlnode/rlnode/tlsconf"
)

// securityConfig is what `serve` needs to admit peers and clients: the
// cluster token, TLS files and the Raft connection limits.
type securityConfig struct {
	tokenFile      string
	tokenFlagGiven bool
	insecure       bool
	legacyNodeCert bool
	tls            tlsconf.Files
	tlsReload      time.Duration
	raftLimits     transport.RaftLimits
}

// tlsFlags registers --tls-cert/--tls-key/--tls-ca, defaulting to the
// RLNODE_TLS_* variables; serve and the admin commands share them.
func tlsFlags(fs *flag.FlagSet, f *tlsconf.Files) {
	env := tlsconf.FilesFromEnv()
	fs.StringVar(&f.Cert, "tls-cert", env.Cert, "PEM certificate (chain) to present (default $"+tlsconf.EnvCert+")")
	fs.StringVar(&f.Key, "tls-key", env.Key, "PEM private key of --tls-cert (default $"+tlsconf.EnvKey+")")
	fs.StringVar(&f.CA, "tls-ca", env.CA, "PEM CA bundle peers' certificates must chain to; on a node it makes every port require client certificates (default $"+tlsconf.EnvCA+")")
}

func (s *securityConfig) flags(fs *flag.FlagSet) {
	fs.StringVar(&s.tokenFile, "cluster-token-file", os.Getenv("RLNODE_CLUSTER_TOKEN_FILE"), "file holding the cluster token (not visible in ps, unlike --cluster-token) (default $RLNODE_CLUSTER_TOKEN_FILE)")
	fs.BoolVar(&s.insecure, "insecure", false, "allow listening beyond loopback with neither a cluster token nor mutual TLS (anyone who reaches the ports can then change the cluster)")
	tlsFlags(fs, &s.tls)
	fs.BoolVar(&s.legacyNodeCert, "tls-legacy-node-certs", false, "UPGRADE ONLY: also accept node certificates without a node identity (written by an older rlnode tls init), named by their common name; any server certificate of the CA then passes as a node. Re-issue the certificates with rlnode tls init instead")
	fs.DurationVar(&s.tlsReload, "tls-reload-interval", 5*time.Second, "how often to check the TLS files for changes (0: only on SIGHUP)")
	fs.DurationVar(&s.raftLimits.HandshakeTimeout, "raft-handshake-timeout", transport.DefaultRaftHandshakeTimeout, "how long a new Raft connection has to complete the TLS and token handshakes")
	fs.DurationVar(&s.raftLimits.IdleTimeout, "raft-idle-timeout", transport.DefaultRaftIdleTimeout, "close a Raft connection on which nothing arrives for this long")
	fs.IntVar(&s.raftLimits.MaxConnsPerIP, "raft-max-conns-per-ip", transport.DefaultRaftMaxConnsPerIP, "most open Raft connections from one IP address")
	fs.IntVar(&s.raftLimits.MaxPending, "raft-max-pending", transport.DefaultRaftMaxPending, "most Raft connections still in their handshake from addresses that are not members (beyond it the oldest of the address holding the most is dropped)")
	fs.IntVar(&s.raftLimits.MaxConns, "raft-max-conns", transport.DefaultRaftMaxConns, "most admitted Raft connections from all addresses that are not members together (beyond it a new one is closed at once; without a token or TLS every connection is admitted at once)")
}

// validate checks the security flags alone (no I/O).
func (s *securityConfig) validate(token string) []error {
	var errs []error
	if err := s.tls.Validate(true); err != nil {
		errs = append(errs, err)
	}
	if s.tokenFile != "" && token != "" {
		errs = append(errs, errors.New("--cluster-token-file and --cluster-token (or $RLNODE_CLUSTER_TOKEN) exclude each other: give the token one way"))
	}
	if s.tlsReload < 0 {
		errs = append(errs, fmt.Errorf("--tls-reload-interval %s: must not be negative", s.tlsReload))
	}
	l := s.raftLimits
	if l.HandshakeTimeout <= 0 || l.IdleTimeout <= 0 || l.MaxConnsPerIP < 1 || l.MaxPending < 1 || l.MaxConns < 1 {
		errs = append(errs, fmt.Errorf("--raft-handshake-timeout %s, --raft-idle-timeout %s, --raft-max-conns-per-ip %d, --raft-max-pending %d, --raft-max-conns %d: must all be positive", l.HandshakeTimeout, l.IdleTimeout, l.MaxConnsPerIP, l.MaxPending, l.MaxConns))
	}
	return errs
}

// maxTokenFileBytes is the largest token file read: a token is a line.
const maxTokenFileBytes = 64 << 10

// readTokenFile returns the token a file holds, without surrounding space.
// The file is read bounded (internal/boundedfile): a FIFO or a device is
// refused with its name.
func readTokenFile(path string) (string, error) {
	b, err := boundedfile.Read(path, maxTokenFileBytes)
	if err != nil {
		return "", fmt.Errorf("read --cluster-token-file: %w", err)
	}
	tok := strings.TrimSpace(string(b))
	if tok == "" {
		return "", fmt.Errorf("--cluster-token-file %s is empty", path)
	}
	return tok, nil
}

// loadSecurity reads the token file and the TLS files and refuses an
// exposed node with neither; it returns the TLS source (nil without TLS).
func (c *serveConfig) loadSecurity() (*tlsconf.Source, error) {
	if c.sec.tokenFile != "" {
		tok, err := readTokenFile(c.sec.tokenFile)
		if err != nil {
			return nil, err
		}
		c.token = tok
	}
	var src *tlsconf.Source
	if c.sec.tls.Enabled() {
		if err := c.checkOwnCertExists(); err != nil {
			return nil, err
		}
		var err error
		if src, err = tlsconf.Load(c.sec.tls); err != nil {
			return nil, err
		}
	}
	if err := checkExposure(c, src != nil && src.Mutual()); err != nil {
		return nil, err
	}
	if src != nil && src.Mutual() {
		if err := c.checkNodeCert(src); err != nil {
			return nil, err
		}
	}
	return src, nil
}

// checkOwnCertExists names a missing --tls-cert or --tls-key with what to
// do about it. On Kubernetes each pod picks its own NAME.pem out of one
// Secret by its pod name, so a pod added by scaling up has none until the
// certificates are issued for it: it says so instead of "no such file".
func (c *serveConfig) checkOwnCertExists() error {
	f := c.sec.tls
	for _, x := range []struct{ flag, path string }{{"--tls-cert", f.Cert}, {"--tls-key", f.Key}} {
		if x.path == "" {
			continue
		}
		if _, err := os.Stat(x.path); errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("refusing to start: %s %s does not exist: there is no certificate for this node (--id %q).\n"+
				"  Every node presents its own node certificate, named for its id. Issue it under the same CA with\n"+
				"  `rlnode tls init --out DIR --nodes ...,%s` (it keeps ca.pem) and give this node %s and %s\n"+
				"  (on Kubernetes: add them to the rlnode-tls Secret, see docs/kubernetes.md)",
				x.flag, x.path, c.id, c.id, tlsconf.CertFile(c.id), tlsconf.KeyFile(c.id))
		}
	}
	return nil
}

// checkNodeCert makes sure, under mutual TLS, that this node's own
// certificate is a node certificate for --id (its peers would refuse it
// otherwise), and that reloads keep it so.
func (c *serveConfig) checkNodeCert(src *tlsconf.Source) error {
	if c.sec.legacyNodeCert {
		src.AcceptLegacyNodeCerts()
	}
	check := func(name string, err error) error {
		if err != nil {
			return fmt.Errorf("refusing to start: %w.\n"+
				"  Node-to-node ports accept only node certificates, which carry a URI SAN spiffe://rlnode/node/<id> (client.pem has none).\n"+
				"  Fix: re-issue the node certificates under the same CA with `rlnode tls init --out DIR --nodes %s,...` (it keeps ca.pem;\n"+
				"  running nodes accept the new certificates), or, during a rolling upgrade only, pass --tls-legacy-node-certs", err, c.id)
		}
		if name != c.id {
			return fmt.Errorf("refusing to start: --tls-cert %s is node %q's certificate but --id is %q; peers check the name against the members' ids",
				src.Files().Cert, name, c.id)
		}
		return nil
	}
	if err := check(src.OwnNode()); err != nil {
		return err
	}
	src.SetCertCheck(func(leaf *x509.Certificate) error {
		if name := tlsconf.NodeName(leaf); name != c.id && !c.sec.legacyNodeCert {
			return fmt.Errorf("not a node certificate for %q (node identity %q)", c.id, name)
		}
		return nil
	})
	return nil
}

func (c *serveConfig) warnSecurity(log hclog.Logger, src *tlsconf.Source) {
	if c.sec.insecure && c.token == "" && (src == nil || !src.Mutual()) {
		log.Warn("--insecure: no cluster token and no mutual TLS; the admin API, forwarding and Raft are open to anyone who can reach " + c.httpAddr + " and " + c.raftAddr)
	}
	if c.sec.legacyNodeCert {
		log.Warn("--tls-legacy-node-certs: node certificates without a node identity are accepted on the Raft port and /internal/ (any server certificate of the CA passes as a node); re-issue them with `rlnode tls init --out DIR --nodes ...` and drop the flag")
	}
	if c.sec.tokenFlagGiven {
		log.Warn("the token given with --cluster-token is visible to every local user in ps; prefer --cluster-token-file or $RLNODE_CLUSTER_TOKEN")
	}
}

// checkExposure refuses to run a node that listens beyond loopback while
// nothing proves who its peers are, unless --insecure says so.
func checkExposure(c *serveConfig, mutualTLS bool) error {
	if c.sec.insecure {
		return nil
	}
	if c.pprofAddr != "" && !isLoopback(c.pprofAddr) {
		// pprof has no authentication at all, token or TLS.
		return fmt.Errorf("refusing to start: --pprof-addr %s listens beyond loopback, and profiling endpoints have no authentication; "+
			"use 127.0.0.1 (and an SSH tunnel), or pass --insecure", c.pprofAddr)
	}
	if c.token != "" || mutualTLS {
		return nil
	}
	var open []string
	for _, a := range []struct{ flag, v string }{{"--http-addr", c.httpAddr}, {"--raft-addr", c.raftAddr}, {"--grpc-addr", c.grpcAddr}, {"--rlqs-addr", c.rlqsAddr}, {"--gubernator-addr", c.gub.addr}} {
		if a.v != "" && !isLoopback(a.v) {
			open = append(open, a.flag+" "+a.v)
		}
	}
	if len(open) == 0 {
		return nil
	}
	verb := "listens"
	if len(open) > 1 {
		verb = "listen"
	}
	return fmt.Errorf("refusing to start: %s %s beyond loopback with neither a cluster token nor mutual TLS, "+
		"so anyone who can reach it could send Raft RPCs that replace every window or move leadership, and call the admin API.\n"+
		"  Fix: give every node the same token with --cluster-token-file FILE (or $RLNODE_CLUSTER_TOKEN_FILE, $RLNODE_CLUSTER_TOKEN),\n"+
		"  and/or certificates with --tls-cert, --tls-key and --tls-ca (`rlnode tls init --out DIR --nodes n1,n2,n3` writes them);\n"+
		"  or listen on 127.0.0.1; or pass --insecure on a network you trust completely",
		strings.Join(open, " and "), verb)
}

// reloadTLS reloads the certificates on SIGHUP and, every interval, when
// the files changed, until ctx ends. Without TLS, SIGHUP is logged and
// ignored (instead of ending the process, its default).
func reloadTLS(ctx context.Context, src *tlsconf.Source, interval time.Duration, log hclog.Logger) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	var tick <-chan time.Time
	if src != nil && interval > 0 {
		t := time.NewTicker(interval)
		defer t.Stop()
		tick = t.C
	}
	lastErr := ""
	for {
		var why string
		select {
		case <-ctx.Done():
			return
		case <-hup:
			why = "SIGHUP"
			lastErr = ""
		case <-tick:
			why = "file change"
		}
		if src == nil {
			log.Info("SIGHUP: no TLS configured, nothing to reload")
			continue
		}
		changed, err := src.Reload()
		switch {
		case err != nil && err.Error() != lastErr:
			lastErr = err.Error()
			log.Error("TLS reload failed; keeping the previous certificates", "trigger", why, "error", err)
		case changed:
			lastErr = ""
			log.Info("TLS certificates reloaded", "trigger", why, "cert", src.Files().Cert, "ca", src.Files().CA)
		case err == nil && why == "SIGHUP":
			log.Info("SIGHUP: TLS files unchanged")
		}
	}
}
