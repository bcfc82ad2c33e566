package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"

	"github.com/rlnode/rlnode/cluster"
	"github.com/rlnode/rlnode/httpapi"
)

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
	// Any node will do: a follower streams the leader's backup through.
	resp, _, err := a.send(ctx, http.MethodGet, httpapi.BackupPath, "", nil, 0)
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
		return fmt.Errorf("backup via %s: %w", a.via, err)
	}
	windows, err := cluster.VerifyBackup(tmp.Name())
	if err != nil {
		return fmt.Errorf("backup via %s arrived damaged: %w", a.via, err)
	}
	if err := os.Rename(tmp.Name(), *out); err != nil {
		return err
	}
	if a.json {
		return printJSON(stdout, map[string]any{"file": *out, "bytes": n, "windows": windows, "via": a.via})
	}
	fmt.Fprintf(stdout, "backup of %d windows (%d bytes) via %s written to %s\n", windows, n, a.via, *out)
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
	f, size, err := cluster.OpenBackup(file)
	if err != nil {
		return err
	}
	defer f.Close()
	ctx, cancel := context.WithTimeout(ctx, a.timeout)
	defer cancel()
	// Any node will do: a follower streams the backup on to the leader.
	path := httpapi.RestorePath
	if *force {
		path += "?force=true"
	}
	// A section reader is bounded like the file's checked size and can be
	// read again from its start if the first node of --addr is down.
	resp, _, err := a.send(ctx, http.MethodPost, path, "application/octet-stream", io.NewSectionReader(f, 0, size), size)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if a.json {
		_, err := stdout.Write(body)
		return err
	}
	var res struct {
		ServedBy string `json:"servedBy"`
	}
	json.Unmarshal(body, &res)
	fmt.Fprintf(stdout, "restored %d windows from %s into the cluster led by %s\n", windows, file, res.ServedBy)
	return nil
}
