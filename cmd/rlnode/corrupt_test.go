package main

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/rlnode/rlnode/cluster/storage"
	"github.com/rlnode/rlnode/cmd/rlnode/internal/proctest"
)

// corruption damages one file of a copied data dir.
type corruption struct {
	name string
	// kind is the --raft-log the data dir was made with.
	kind string
	// glob picks the file inside the data dir (the newest match).
	glob string
	// damage changes the file; it gets the file's path.
	damage func(t *testing.T, path string)
	// mayBeHarmless: the bytes can land where no check can see them
	// (Bolt's free pages, or inside a log entry's payload, which Bolt does
	// not checksum); then the node must start and serve.
	mayBeHarmless bool
}

// Every store file of a data dir, damaged several ways, for both log
// kinds (bolt: raft.db holds everything; wal: wal/ holds the log and
// raft.db the term and vote).
func corruptions() []corruption {
	var out []corruption
	for _, c := range walCorruptions() {
		c.kind = "wal"
		out = append(out, c)
	}
	for _, g := range []struct{ glob string }{{"raft.db"}} {
		out = append(out,
			corruption{name: g.glob + "/zeroed first page", glob: g.glob, damage: zeroAt(0, 4096)},
			corruption{name: g.glob + "/zeroed second meta page", glob: g.glob, damage: zeroAt(4096, 4096)},
			corruption{name: g.glob + "/truncated to 100 bytes", glob: g.glob, damage: truncateTo(func(int64) int64 { return 100 })},
			corruption{name: g.glob + "/truncated into used pages", glob: g.glob, damage: truncateBolt},
			corruption{name: g.glob + "/random bytes page 2", glob: g.glob, damage: randomBoltPage(func(hwm int64) int64 { return 2 }), mayBeHarmless: true},
			corruption{name: g.glob + "/random bytes mid used", glob: g.glob, damage: randomBoltPage(func(hwm int64) int64 { return hwm / 2 }), mayBeHarmless: true},
			corruption{name: g.glob + "/random bytes last used", glob: g.glob, damage: randomBoltPage(func(hwm int64) int64 { return hwm - 1 }), mayBeHarmless: true},
		)
	}
	for _, snap := range []string{"snapshots/*/state.bin", "snapshots/*/meta.json"} {
		out = append(out,
			corruption{name: snap + "/random bytes mid-file", glob: snap, damage: randomMid},
			corruption{name: snap + "/zeroed head", glob: snap, damage: zeroAt(0, 64)},
			corruption{name: snap + "/truncated", glob: snap, damage: truncateTo(func(n int64) int64 { return n / 2 })},
		)
	}
	for i := range out {
		if out[i].kind == "" {
			out[i].kind = "bolt"
		}
	}
	out = append(out,
		corruption{name: "node.json/garbage", glob: "node.json", damage: randomMid},
		corruption{name: "node.json/empty", glob: "node.json", damage: truncateTo(func(int64) int64 { return 0 })},
		corruption{name: "node.json/truncated", glob: "node.json", damage: truncateTo(func(n int64) int64 { return n / 2 })},
	)
	for i := range out[len(out)-3:] {
		out[len(out)-3+i].kind = "bolt"
	}
	return out
}

// walCorruptions damages raft-wal's segment files and its meta database.
// raft-wal checksums every entry, but it recovers the open (tail) segment
// up to the last valid entry, as after a torn write: damage there drops
// the entries after it without an error, so those rows only require no
// panic and a serving node.
func walCorruptions() []corruption {
	seg := "wal/*.wal"
	return []corruption{
		{name: "wal segment/random bytes in the first entries", glob: seg, damage: func(t *testing.T, p string) { writeAt(t, p, 64, randomBytes(512)) }, mayBeHarmless: true},
		{name: "wal segment/truncated to 100 bytes", glob: seg, damage: truncateTo(func(int64) int64 { return 100 }), mayBeHarmless: true},
		{name: "wal meta/zeroed first page", glob: "wal/wal-meta.db", damage: zeroAt(0, 4096)},
		{name: "wal raft.db (term, vote)/zeroed first page", glob: "raft.db", damage: zeroAt(0, 4096)},
	}
}

func zeroAt(off, n int64) func(*testing.T, string) {
	return func(t *testing.T, path string) { writeAt(t, path, off, make([]byte, n)) }
}

func truncateTo(size func(int64) int64) func(*testing.T, string) {
	return func(t *testing.T, path string) {
		st, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.Truncate(path, size(st.Size())); err != nil {
			t.Fatal(err)
		}
	}
}

func randomMid(t *testing.T, path string) {
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	n := min(st.Size()/2, 256)
	writeAt(t, path, st.Size()/2-n/2, randomBytes(max(n, 8)))
}

// boltHWM reads the number of pages in use from the first meta page.
func boltHWM(t *testing.T, path string) (pageSize, hwm int64) {
	b, err := os.ReadFile(path)
	if err != nil || len(b) < 4096 {
		t.Fatalf("read %s: %v", path, err)
	}
	m := b[16:]
	return int64(binary.LittleEndian.Uint32(m[8:])), int64(binary.LittleEndian.Uint64(m[40:]))
}

func truncateBolt(t *testing.T, path string) {
	ps, hwm := boltHWM(t, path)
	if err := os.Truncate(path, (hwm-1)*ps); err != nil {
		t.Fatal(err)
	}
}

func randomBoltPage(page func(hwm int64) int64) func(*testing.T, string) {
	return func(t *testing.T, path string) {
		ps, hwm := boltHWM(t, path)
		p := max(page(hwm), 2)
		writeAt(t, path, p*ps+ps/4, randomBytes(ps/2))
	}
}

func randomBytes(n int64) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(rand.IntN(256))
	}
	return b
}

func writeAt(t *testing.T, path string, off int64, b []byte) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
}

func copyDir(t *testing.T, src, dst string) {
	t.Helper()
	err := filepath.Walk(src, func(p string, info os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		target := filepath.Join(dst, rel)
		if info.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(target, b, info.Mode())
	})
	if err != nil {
		t.Fatal(err)
	}
}

// A data dir with each of its files damaged: the node never panics; it
// exits 1 naming the file and the recovery path, or (when the damage hit
// bytes no check can see) starts and serves.
func TestCorruptDataDirNeverPanics(t *testing.T) {
	proctest.Long(t)
	t.Setenv("RLNODE_RAFT_LOG", "")
	sources := map[string]string{}
	digests := map[string]any{}
	for _, kind := range []string{"bolt", "wal"} {
		sources[kind], digests[kind] = corruptSource(t, kind)
	}
	for _, c := range corruptions() {
		t.Run(c.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "c1")
			copyDir(t, sources[c.kind], dir)
			digest := digests[c.kind]
			matches, _ := filepath.Glob(filepath.Join(dir, c.glob))
			if len(matches) == 0 {
				t.Fatalf("no file %s in the data dir", c.glob)
			}
			target := matches[len(matches)-1]
			c.damage(t, target)
			httpAddr := proctest.FreeAddr(t)
			p := proctest.Start(t, rlnodeBin, "c1", "serve", "--id", "c1", "--data-dir", dir, "--raft-log", c.kind,
				"--http-addr", httpAddr, "--raft-addr", proctest.FreeAddr(t), "--limit", "100")
			url := "http://" + httpAddr
			var code int
			deadline := time.Now().Add(20 * time.Second)
			for code = -1; code == -1 && time.Now().Before(deadline); code = p.Wait(100 * time.Millisecond) {
				if !c.mayBeHarmless {
					continue
				}
				if r, err := proctest.Get(url + "/readyz"); err == nil && r.Status == 200 {
					break
				}
			}
			out := p.Output()
			if strings.Contains(out, "panic:") || strings.Contains(out, "fatal error:") || code == 2 {
				t.Fatalf("damaged %s: the node panicked (exit %d):\n%s", c.glob, code, out)
			}
			if code == -1 && c.mayBeHarmless {
				// Random bytes can land in free pages or unused segment
				// space, which nothing reads; inside an entry they fail its
				// checksum (TestFlippedPayloadBitIsRefused).
				r := proctest.MustGet(t, url+"/v1/status")
				if r.Status != 200 {
					t.Fatalf("damaged %s: node neither exited nor serves: %d %s", c.glob, r.Status, r.Raw)
				}
				t.Logf("damage passed the checks (digest %v, before %v): it hit free space, an entry's payload or the WAL's tail", r.JSON["digest"], digest)
				return
			}
			base := filepath.Base(target)
			if code != 1 || !strings.Contains(out, base) || !strings.Contains(out, "--rejoin-empty") {
				t.Fatalf("damaged %s: exit %d; want exit 1 naming %s and --rejoin-empty:\n%s", c.glob, code, base, out)
			}
		})
	}
}

// corruptSource makes a stopped node's data dir of the given log kind with
// a snapshot and log entries after it, and returns it with its digest.
func corruptSource(t *testing.T, kind string) (string, any) {
	n := proctest.StartNode(t, rlnodeBin, "c1", "--limit", "100", "--raft-log", kind)
	proctest.WaitReady(t, n, 15*time.Second)
	hit := func(k int) {
		for i := range k {
			if r := proctest.MustGet(t, fmt.Sprintf("%s/check/client-%d", n.URL(), i)); r.Status != 200 {
				t.Fatalf("hit: %d %s", r.Status, r.Raw)
			}
		}
	}
	hit(150)
	if _, stderr, code := proctest.Run(t, rlnodeBin, nil, "snapshot", "--addr", n.URL()); code != 0 {
		t.Fatalf("snapshot: %s", stderr)
	}
	hit(60)
	st, err := proctest.Status(n)
	if err != nil {
		t.Fatal(err)
	}
	if code := n.Signal(syscall.SIGTERM, 20*time.Second); code != 0 {
		t.Fatalf("stop: exit %d", code)
	}
	return n.DataDir, st["digest"]
}

// A flipped bit inside a log entry's payload decodes cleanly (neither log
// store checks a stored value), so every entry carries a checksum: a node
// whose log holds such an entry refuses to start and names it, on both
// log stores, instead of applying hits nobody sent.
func TestFlippedPayloadBitIsRefused(t *testing.T) {
	proctest.Long(t)
	t.Setenv("RLNODE_RAFT_LOG", "")
	for _, kind := range []string{"bolt", "wal"} {
		t.Run(kind, func(t *testing.T) {
			src, _ := corruptSource(t, kind)
			dir := filepath.Join(t.TempDir(), "c1")
			copyDir(t, src, dir)
			index := flipLastPayloadBit(t, dir)
			_, stderr, code := proctest.Run(t, rlnodeBin, nil, "serve", "--id", "c1", "--data-dir", dir,
				"--http-addr", proctest.FreeAddr(t), "--raft-addr", proctest.FreeAddr(t))
			want := fmt.Sprintf("entry %d fails its checksum", index)
			if code != 1 || !strings.Contains(stderr, want) || !strings.Contains(stderr, "--rejoin-empty") {
				t.Fatalf("exit %d, stderr:\n%s\nwant exit 1, %q and the way back (--rejoin-empty)", code, stderr, want)
			}
		})
	}
}

// flipLastPayloadBit rewrites the newest command entry of a stopped node's
// log with one bit of its payload flipped (checksum kept), the way a disk
// would damage it, and returns its index.
func flipLastPayloadBit(t *testing.T, dir string) uint64 {
	t.Helper()
	stores, err := storage.OpenStores(dir, "", hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	defer stores.Close()
	last, err := stores.Log.LastIndex()
	if err != nil {
		t.Fatal(err)
	}
	var tail []*raft.Log
	for i := last; i > 0; i-- {
		l := new(raft.Log)
		if err := stores.Log.GetLog(i, l); err != nil {
			t.Fatal(err)
		}
		tail = append([]*raft.Log{l}, tail...)
		if l.Type != raft.LogCommand || len(l.Extensions) == 0 {
			continue
		}
		l.Data[len(l.Data)/2] ^= 0x04
		// raft-wal appends only: cut the tail and write it back.
		if err := stores.Log.DeleteRange(i, last); err != nil {
			t.Fatal(err)
		}
		if err := stores.Log.StoreLogs(tail); err != nil {
			t.Fatal(err)
		}
		return i
	}
	t.Fatal("no command entry with a checksum in the log")
	return 0
}
