package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"

	"github.com/rlnode/rlnode/cluster"
)

// leaderURL asks the node at --addr who leads; backup and restore talk to
// the leader directly (the stream never takes a detour through a follower).
func (a *adminFlags) leaderURL(ctx context.Context) (string, error) {
	var st cluster.Status
	if err := a.call(ctx, http.MethodGet, "/v1/status", nil, &st); err != nil {
		return "", err
	}
	if st.LeaderHTTPAddr == "" {
		return "", fmt.Errorf("%s knows no leader right now: %w", a.addr, cluster.ErrNoLeader)
	}
	url := cluster.BaseURL(st.LeaderHTTPAddr)
	if a.tls.Enabled() {
		url = strings.Replace(url, "http://", "https://", 1)
	}
	return url, nil
}

// stream sends one request to url with the token and returns the answer,
// or an error carrying the problem detail of a non-2xx answer.
func (a *adminFlags) stream(ctx context.Context, method, url string, body io.Reader, size int64) (*http.Response, error) {
	if err := a.prepare(); err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, method, url, body)
	if err != nil {
		return nil, err
	}
	req.ContentLength = size
	if body != nil {
		req.Header.Set("Content-Type", "application/octet-stream")
	}
	if a.token != "" {
		req.Header.Set("Authorization", "Bearer "+a.token)
	}
	resp, err := a.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", method, url, err)
	}
	if resp.StatusCode/100 != 2 {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		resp.Body.Close()
		return nil, fmt.Errorf("%s: HTTP %d: %s", url, resp.StatusCode, problemDetail(b))
	}
	return resp, nil
}

func runBackup(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs, a := newAdminFlags("backup", "--out FILE", stdout)
	out := fs.String("out", "", "file to write the backup to (required)")
	if pos, err := parseAdmin(fs, args); err != nil {
		return err
	} else if len(pos) > 0 || *out == "" {
		return usageErr("backup needs --out FILE: rlnode backup --out FILE [--addr URL]")
	}
	ctx, cancel := context.WithTimeout(ctx, a.timeout)
	defer cancel()
	leader, err := a.leaderURL(ctx)
	if err != nil {
		return err
	}
	resp, err := a.stream(ctx, http.MethodGet, leader+cluster.BackupPath, nil, 0)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	tmp, err := os.CreateTemp(filepath.Dir(*out), filepath.Base(*out)+".*.tmp")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	n, err := io.Copy(tmp, resp.Body)
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("backup from %s: %w", leader, err)
	}
	windows, err := cluster.VerifyBackup(tmp.Name())
	if err != nil {
		return fmt.Errorf("backup from %s arrived damaged: %w", leader, err)
	}
	if err := os.Rename(tmp.Name(), *out); err != nil {
		return err
	}
	if a.json {
		return printJSON(stdout, map[string]any{"file": *out, "bytes": n, "windows": windows, "leader": leader})
	}
	fmt.Fprintf(stdout, "backup of %d windows (%d bytes) from %s written to %s\n", windows, n, leader, *out)
	return nil
}

func runRestore(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs, a := newAdminFlags("restore", "FILE", stdout)
	force := fs.Bool("force", false, "restore even though the cluster holds windows (they are replaced)")
	pos, err := parseAdmin(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usageErr("restore takes one argument, the backup FILE: rlnode restore [--addr URL] [--force] FILE")
	}
	file := pos[0]
	windows, err := cluster.VerifyBackup(file)
	if err != nil {
		return err
	}
	f, err := os.Open(file)
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, a.timeout)
	defer cancel()
	leader, err := a.leaderURL(ctx)
	if err != nil {
		return err
	}
	url := leader + cluster.RestorePath
	if *force {
		url += "?force=true"
	}
	resp, err := a.stream(ctx, http.MethodPost, url, f, st.Size())
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if a.json {
		_, err := stdout.Write(body)
		return err
	}
	fmt.Fprintf(stdout, "restored %d windows from %s into the cluster led by %s\n", windows, file, leader)
	return nil
}

// problemDetail returns the detail of a problem+json body, or the body.
func problemDetail(b []byte) string {
	var p struct {
		Detail string `json:"detail"`
	}
	if json.Unmarshal(b, &p) == nil && p.Detail != "" {
		return p.Detail
	}
	return strings.TrimSpace(string(b))
}
