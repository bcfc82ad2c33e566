package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"
)

// nodeStatus is the subset of GET /v1/status the runner reads.
type nodeStatus struct {
	ID                string `json:"id"`
	State             string `json:"state"`
	Term              uint64 `json:"term"`
	LeaderID          string `json:"leaderId"`
	LeaderHTTPAddr    string `json:"leaderHttpAddr"`
	LastLogIndex      uint64 `json:"lastLogIndex"`
	CommitIndex       uint64 `json:"commitIndex"`
	AppliedIndex      uint64 `json:"appliedIndex"`
	LastSnapshotIndex uint64 `json:"lastSnapshotIndex"`
	LiveWindows       int    `json:"liveWindows"`
	Digest            string `json:"digest"`
	DigestIndex       uint64 `json:"digestIndex"`
	AppliedNow        int64  `json:"appliedNow"`
	ClockOffsetMs     int64  `json:"clockOffsetMs"`
	Halted            string `json:"halted"`
}

// digestAt is the applied index the digest describes. Nodes that report
// digestIndex compute both together; otherwise appliedIndex is the best
// guess (the two are read at slightly different moments then).
func (s nodeStatus) digestAt() uint64 {
	if s.DigestIndex != 0 {
		return s.DigestIndex
	}
	return s.AppliedIndex
}

// peerInfo is one entry of GET /v1/cluster/peers.
type peerInfo struct {
	ID       string `json:"id"`
	RaftAddr string `json:"raftAddr"`
	HTTPAddr string `json:"httpAddr"`
	Leader   bool   `json:"leader"`
	Voter    bool   `json:"voter"`
}

// apiError is a non-2xx answer from a node, with its problem code.
type apiError struct {
	Status int
	Code   string
	Detail string
}

func (e *apiError) Error() string {
	return fmt.Sprintf("HTTP %d %s: %s", e.Status, e.Code, e.Detail)
}

// admin talks to the nodes' admin and status endpoints. It has its own
// transport so the nemesis and the convergence check never queue behind
// the workload's connections.
type admin struct {
	hc    *http.Client
	token string
}

func newAdmin(sec *security) *admin {
	tr := &http.Transport{
		DialContext:         (&net.Dialer{Timeout: time.Second}).DialContext,
		MaxIdleConnsPerHost: 4,
		IdleConnTimeout:     30 * time.Second,
		TLSClientConfig:     sec.client,
	}
	return &admin{hc: &http.Client{Transport: tr}, token: sec.token}
}

func (a *admin) close() { a.hc.CloseIdleConnections() }

// do sends one request with its own deadline and decodes a 2xx JSON body
// into out (if non-nil).
func (a *admin) do(ctx context.Context, timeout time.Duration, method, url string, in, out any) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return fmt.Errorf("encode request: %w", err)
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, body)
	if err != nil {
		return fmt.Errorf("build request %s %s: %w", method, url, err)
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if a.token != "" {
		req.Header.Set("Authorization", "Bearer "+a.token)
	}
	resp, err := a.hc.Do(req)
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, url, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return fmt.Errorf("%s %s: read body: %w", method, url, err)
	}
	if resp.StatusCode/100 != 2 {
		var p struct {
			Code   string `json:"code"`
			Detail string `json:"detail"`
		}
		_ = json.Unmarshal(raw, &p) // a non-problem body still yields the status
		return fmt.Errorf("%s %s: %w", method, url, &apiError{Status: resp.StatusCode, Code: p.Code, Detail: p.Detail})
	}
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			return fmt.Errorf("%s %s: decode body: %w", method, url, err)
		}
	}
	return nil
}

func (a *admin) status(ctx context.Context, base string) (nodeStatus, error) {
	var s nodeStatus
	err := a.do(ctx, time.Second, http.MethodGet, base+"/v1/status", nil, &s)
	return s, err
}

func (a *admin) ready(ctx context.Context, base string) error {
	return a.do(ctx, time.Second, http.MethodGet, base+"/readyz", nil, nil)
}

func (a *admin) live(ctx context.Context, base string) error {
	return a.do(ctx, time.Second, http.MethodGet, base+"/livez", nil, nil)
}

func (a *admin) peers(ctx context.Context, base string) ([]peerInfo, error) {
	var ps []peerInfo
	err := a.do(ctx, 2*time.Second, http.MethodGet, base+"/v1/cluster/peers", nil, &ps)
	return ps, err
}

func (a *admin) remove(ctx context.Context, base, id string) error {
	return a.do(ctx, 15*time.Second, http.MethodPost, base+"/v1/cluster/remove", map[string]string{"id": id}, nil)
}

func (a *admin) transferLeadership(ctx context.Context, base, id string) error {
	return a.do(ctx, 10*time.Second, http.MethodPost, base+"/v1/cluster/transfer-leadership", map[string]string{"id": id}, nil)
}

func (a *admin) setClockOffset(ctx context.Context, base string, offset time.Duration) error {
	return a.do(ctx, 2*time.Second, http.MethodPost, base+"/debug/clock-offset",
		map[string]int64{"offsetMs": offset.Milliseconds()}, nil)
}

// isAPIError reports whether err is a node's answer with one of codes.
func isAPIError(err error, codes ...string) bool {
	var ae *apiError
	if !errors.As(err, &ae) {
		return false
	}
	for _, c := range codes {
		if ae.Code == c {
			return true
		}
	}
	return len(codes) == 0
}
