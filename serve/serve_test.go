package serve

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ferryml/ferry/internal/testutil/arrowcheck"
	"github.com/ferryml/ferry/internal/testutil/synth"
	"github.com/ferryml/ferry/shard"
)

// writeDataset writes a synthetic dataprep output of n examples with the
// shard package's writer (the same content as shard/internal/mkshards) and
// has pyarrow check it (arrowcheck.CheckDir).
func writeDataset(t testing.TB, ranks, n, seqLen int, mode shard.Mode, batchRows int) string {
	t.Helper()
	lay := shard.Layout{SeqLen: seqLen, Mode: mode, Labels: shard.LabelsMaskPad, PadID: 0}
	src, err := shard.NewExampleSource(lay, synth.Examples(n, seqLen, mode))
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "ds")
	pad := int32(0)
	eos := "<eos>"
	_, err = shard.WriteDir(context.Background(), dir, shard.DirConfig{
		Layout: shard.Layout{SeqLen: seqLen, Mode: mode, Labels: shard.LabelsMaskPad}, Ranks: ranks, Seed: 1, BatchRows: batchRows,
		Workers: 2, Template: "synthetic", Tokenizer: shard.TokenizerInfo{SHA256: "synthetic", EOSID: &pad, EOS: &eos, Pad: &eos},
	}, src)
	if err != nil {
		t.Fatal(err)
	}
	arrowcheck.CheckDir(t, dir)
	return dir
}

type testServer struct {
	srv  *Server
	sock string
	stop context.CancelFunc
	done chan error
}

func startServer(t testing.TB, cfg Config) *testServer {
	t.Helper()
	srv, err := NewServer(context.Background(), cfg)
	if errors.Is(err, ErrUnsupported) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(t.TempDir(), "serve.sock")
	ln, err := Listen(sock)
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	ts := &testServer{srv: srv, sock: sock, stop: stop, done: make(chan error, 1)}
	go func() { ts.done <- srv.Serve(ctx, ln) }()
	t.Cleanup(func() {
		stop()
		if err := <-ts.done; err != nil {
			t.Error(err)
		}
		srv.Close()
	})
	return ts
}

// dial connects with the given HELLO flags (none: the default columns).
func dial(t testing.TB, sock string, slots, maxRows uint32, flags ...uint32) *Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	h := Hello{Slots: slots, MaxRows: maxRows, Rank: 0, Worker: -1}
	for _, f := range flags {
		h.Flags |= f
	}
	c, err := Dial(ctx, sock, h)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// readers opens every shard of dir with the shard package's Arrow reader:
// an implementation independent of the daemon's manifest-offset path.
func readers(t testing.TB, dir string, ranks int) []*shard.Reader {
	t.Helper()
	rs := make([]*shard.Reader, ranks)
	for r := range rs {
		rd, err := shard.Open(filepath.Join(dir, shard.FileName(r, ranks)))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { rd.Close() })
		rs[r] = rd
	}
	return rs
}

func i32(b []byte, i int) int32 { return int32(le.Uint32(b[4*i:])) }

type rowRef struct{ file, row int }

func expand(runs []Run) []rowRef {
	var refs []rowRef
	for _, r := range runs {
		for i := range r.Rows {
			refs = append(refs, rowRef{int(r.File), int(r.Row + i)})
		}
	}
	return refs
}

// checkSlot compares a filled slot with the rows it was asked for.
func checkSlot(t testing.TB, c *Client, slotIdx uint32, seq uint64, runs []Run, rs []*shard.Reader) {
	t.Helper()
	refs := expand(runs)
	slot := c.Slot(slotIdx)
	h := ReadSlotHeader(slot)
	if h != (SlotHeader{Seq: seq, Rows: uint32(len(refs)), State: SlotFilled}) || slotIdx != uint32(seq%uint64(c.Layout().Slots)) {
		t.Fatalf("slot %d header %+v, want seq %d rows %d filled", slotIdx, h, seq, len(refs))
	}
	L := int(c.Layout().SeqLen)
	n := len(refs)
	in, lab := c.Column(slot, ColInputIDs, n), c.Column(slot, ColLabels, n)
	am, pos := c.Column(slot, ColAttentionMask, n), c.Column(slot, ColPositionIDs, n)
	ln, sm := c.Column(slot, ColLength, n), c.Column(slot, ColSample, n)
	src := c.Column(slot, ColSourceIDs, n)
	var row shard.Row
	for i, r := range refs {
		if err := rs[r.file].Row(r.row, &row); err != nil {
			t.Fatal(err)
		}
		for j := range L {
			if i32(in, i*L+j) != row.InputIDs[j] || i32(lab, i*L+j) != row.Labels[j] {
				t.Fatalf("seq %d row %d (shard %d row %d) token %d: got id %d label %d, want %d %d", seq, i, r.file, r.row, j,
					i32(in, i*L+j), i32(lab, i*L+j), row.InputIDs[j], row.Labels[j])
			}
			if pos != nil && i32(pos, i*L+j) != row.PositionIDs[j] {
				t.Fatalf("seq %d row %d position %d: got %d want %d", seq, i, j, i32(pos, i*L+j), row.PositionIDs[j])
			}
			if am != nil {
				want := int32(0)
				if int32(j) < row.Length {
					want = 1
				}
				if i32(am, i*L+j) != want {
					t.Fatalf("seq %d row %d attention_mask[%d] = %d, length %d", seq, i, j, i32(am, i*L+j), row.Length)
				}
			}
		}
		if src != nil {
			want := make([]int32, 0, L) // each segment's source over its tokens, then -1
			for _, s := range row.Segments {
				for range s.Length {
					want = append(want, s.Source)
				}
			}
			for len(want) < L {
				want = append(want, -1)
			}
			for j := range L {
				if i32(src, i*L+j) != want[j] {
					t.Fatalf("seq %d row %d source_ids[%d] = %d, want %d", seq, i, j, i32(src, i*L+j), want[j])
				}
			}
		}
		if i32(ln, i) != row.Length || int64(le.Uint64(sm[8*i:])) != row.Segments[0].Sample {
			t.Fatalf("seq %d row %d: length %d sample %d, want %d %d", seq, i, i32(ln, i), le.Uint64(sm[8*i:]), row.Length, row.Segments[0].Sample)
		}
	}
	if pos != nil && am != nil {
		t.Fatal("both attention_mask and position_ids present")
	}
}

// drain streams every row of the given shards through c in batches of
// maxRows rows (runs split where a shard ends), planning everything up
// front in small PLAN messages, holding one batch at a time, and checks
// each batch. It returns the number of batches.
func drain(t testing.TB, c *Client, shards []int, rowsPer int, rs []*shard.Reader, seq0 uint64) int {
	t.Helper()
	B := int(c.Layout().MaxRows)
	var batches [][]Run
	var cur []Run
	n := 0
	for _, s := range shards {
		for r := 0; r < rowsPer; {
			m := min(B-n, rowsPer-r)
			cur = append(cur, Run{File: uint32(s), Row: uint32(r), Rows: uint32(m), Flags: RunContinues})
			n += m
			r += m
			if n == B {
				cur[len(cur)-1].Flags = 0
				batches = append(batches, cur)
				cur, n = nil, 0
			}
		}
	}
	if len(cur) > 0 {
		cur[len(cur)-1].Flags = 0
		batches = append(batches, cur)
	}
	var plan []Run
	for _, b := range batches {
		plan = append(plan, b...)
	}
	for i := 0; i < len(plan); i += 3 { // batches split across messages too
		if err := c.Plan(plan[i:min(i+3, len(plan))]); err != nil {
			t.Fatal(err)
		}
	}
	for k := range batches {
		slot, h, err := c.Wait()
		if err != nil {
			t.Fatalf("batch %d: %v", k, err)
		}
		if int(h.Rows) != len(expand(batches[k])) {
			t.Fatalf("batch %d: %d rows", k, h.Rows)
		}
		checkSlot(t, c, slot, seq0+uint64(k), batches[k], rs)
		if err := c.Release(1); err != nil {
			t.Fatal(err)
		}
	}
	return len(batches)
}

func TestServeRoundTrip(t *testing.T) {
	for _, mode := range []shard.Mode{shard.ModePad, shard.ModePack} {
		t.Run(string(mode), func(t *testing.T) {
			// batch_rows 3 and batches of 4: rows come from several record batches.
			dir := writeDataset(t, 2, 201, 16, mode, 3)
			ts := startServer(t, Config{Data: dir})
			rs := readers(t, dir, 2)
			c := dial(t, ts.sock, 3, 4)
			var info struct {
				Ranks       int              `json:"ranks"`
				RowsPerRank int              `json:"rows_per_rank"`
				SeqLen      int              `json:"seq_len"`
				Mode        string           `json:"mode"`
				Served      []int            `json:"served_ranks"`
				Files       []map[string]any `json:"files"`
			}
			if err := json.Unmarshal(c.Info(), &info); err != nil {
				t.Fatal(err)
			}
			if info.Ranks != 2 || info.SeqLen != 16 || info.Mode != string(mode) || len(info.Served) != 2 || info.Files[0]["batches"] != nil {
				t.Fatalf("info %s", c.Info())
			}
			got := drain(t, c, []int{1, 0}, info.RowsPerRank, rs, 0)
			if got < 8 {
				t.Fatalf("%d batches", got)
			}
			// The source_ids column, asked for: 0 on the tokens of a
			// version 1 shard, -1 on padding (mixtures: test_mix.py).
			cs := dial(t, ts.sock, 3, 4, HelloSourceIDs)
			if !cs.Layout().Columns[ColSourceIDs].Present() || c.Layout().Columns[ColSourceIDs].Present() {
				t.Fatalf("source_ids column: %+v with the flag, %+v without", cs.Layout().Columns[ColSourceIDs], c.Layout().Columns[ColSourceIDs])
			}
			if n := drain(t, cs, []int{0, 1}, info.RowsPerRank, rs, 0); n != got {
				t.Fatalf("%d batches with source_ids, %d without", n, got)
			}
			// A cross-shard batch with a row repeated.
			mid := uint32(info.RowsPerRank / 2)
			runs := []Run{{1, mid, 1, RunContinues}, {0, uint32(info.RowsPerRank - 1), 1, RunContinues}, {1, mid, 1, 0}}
			if err := c.Plan(runs); err != nil {
				t.Fatal(err)
			}
			slot, _, err := c.Wait()
			if err != nil {
				t.Fatal(err)
			}
			checkSlot(t, c, slot, uint64(got), runs, rs)
		})
	}
}

func TestEightRanksAtOnce(t *testing.T) {
	const ranks = 8
	dir := writeDataset(t, ranks, 8*13, 32, shard.ModePad, 5)
	ts := startServer(t, Config{Data: dir})
	rs := readers(t, dir, ranks)
	var wg sync.WaitGroup
	errs := make(chan error, ranks)
	for r := range ranks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			c, err := Dial(ctx, ts.sock, Hello{Slots: 2, MaxRows: 4, Rank: int32(r), Worker: -1})
			if err != nil {
				errs <- err
				return
			}
			defer c.Close()
			ft := &fatalT{TB: t}
			func() {
				defer func() {
					if p := recover(); p != nil && p != ft {
						panic(p)
					}
				}()
				drain(ft, c, []int{r}, 13, rs, 0)
			}()
			if ft.err != nil {
				errs <- fmt.Errorf("rank %d: %v", r, ft.err)
			}
		}()
	}
	// All eight are connected at once (each holds its ring while draining).
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	waitFor(t, func() bool { return ts.srv.Clients() == 0 }, "clients to disconnect")
}

// fatalT lets helpers that call Fatal run in a goroutine other than the test's.
type fatalT struct {
	testing.TB
	err error
}

func (f *fatalT) Helper() {}
func (f *fatalT) Fatal(args ...any) {
	f.err = errors.New(fmt.Sprint(args...))
	panic(f)
}
func (f *fatalT) Fatalf(format string, args ...any) {
	f.err = fmt.Errorf(format, args...)
	panic(f)
}

func waitFor(t testing.TB, cond func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// memfds counts this process's descriptors and mappings of ferry-serve rings.
func memfds(t testing.TB, pid int) (fds, maps int) {
	t.Helper()
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		l, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, e.Name()))
		if err == nil && strings.HasPrefix(l, "/memfd:ferry-serve") {
			fds++
		}
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		t.Fatal(err)
	}
	maps = strings.Count(string(b), "memfd:ferry-serve")
	return fds, maps
}

func TestClientGoneFreesRing(t *testing.T) {
	dir := writeDataset(t, 2, 20, 8, shard.ModePad, 0)
	ts := startServer(t, Config{Data: dir})
	f0, m0 := memfds(t, os.Getpid())
	ctx := context.Background()
	c, err := Dial(ctx, ts.sock, Hello{Slots: 4, MaxRows: 2})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Plan([]Run{{0, 1, 1, 0}, {1, 1, 2, 0}, {1, 3, 2, 0}, {0, 0, 1, 0}, {0, 4, 2, 0}}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.Wait(); err != nil {
		t.Fatal(err)
	}
	// Both ends map the ring now (the daemon closed its descriptor after WELCOME).
	if _, m := memfds(t, os.Getpid()); m != m0+2 {
		t.Fatalf("ring mapped %d times, want 2", m-m0)
	}
	if ts.srv.Clients() != 1 {
		t.Fatalf("%d clients", ts.srv.Clients())
	}
	// The client leaves with batches planned, filled and held, and the
	// daemon waiting for a free slot.
	c.Close()
	waitFor(t, func() bool { return ts.srv.Clients() == 0 }, "the daemon to drop the client")
	waitFor(t, func() bool { f, m := memfds(t, os.Getpid()); return f == f0 && m == m0 }, "the ring to be unmapped and closed")
}

// TestHelloUnknownFlags: a HELLO flag this daemon does not know is refused
// with a message naming it (a newer client against an older daemon).
func TestHelloUnknownFlags(t *testing.T) {
	dir := writeDataset(t, 1, 8, 16, shard.ModePad, 4)
	ts := startServer(t, Config{Data: dir})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := Dial(ctx, ts.sock, Hello{Slots: 2, MaxRows: 2, Worker: -1, Flags: HelloSourceIDs << 1})
	if err == nil {
		c.Close()
		t.Fatal("HELLO with flag 2 accepted")
	}
	if !strings.Contains(err.Error(), "HELLO flags 0x2 at byte 20") {
		t.Fatalf("error %v, want one naming the HELLO flags", err)
	}
}

func TestRequestErrors(t *testing.T) {
	dir := writeDataset(t, 4, 40, 8, shard.ModePad, 0)
	ts := startServer(t, Config{Data: dir, Ranks: []int{0, 2}, MaxClientBytes: 1 << 20})
	raw := func(b []byte) func(c *Client) error {
		return func(c *Client) error { _, err := c.conn.Write(b); return err }
	}
	plan := func(runs ...Run) func(c *Client) error { return func(c *Client) error { return c.Plan(runs) } }
	tests := []struct {
		name     string
		send     func(c *Client) error
		wantCode uint32
		wantMsg  string
	}{
		{"not served", plan(Run{1, 0, 1, 0}), CodeNotServed, "shard 1; this daemon serves [0 2] of 4"},
		{"file out of range", plan(Run{7, 0, 1, 0}), CodeNotServed, "shard 7"},
		{"rows out of range", plan(Run{2, 9, 2, 0}), CodeLimit, "rows 9..10 of shard 2, the shard has 10 rows"},
		{"batch too big", plan(Run{0, 0, 1, RunContinues}, Run{2, 0, 2, 0}), CodeLimit, "max_rows"},
		{"batch too big across messages", func(c *Client) error {
			c.Plan([]Run{{0, 0, 2, RunContinues}})
			return c.Plan([]Run{{2, 0, 1, 0}})
		}, CodeLimit, "max_rows"},
		{"zero rows", raw(AppendPlan(nil, []Run{{0, 0, 0, 0}})), CodeBadRequest, "want rows > 0"},
		{"bad flags", raw(AppendPlan(nil, []Run{{0, 0, 1, 2}})), CodeBadRequest, "flags"},
		{"garbage", raw([]byte("hello daemon, hi")), CodeBadRequest, "magic"},
		{"second hello", raw(AppendHello(nil, Hello{Version: Version, Slots: 1, MaxRows: 1})), CodeBadRequest, "want PLAN"},
		{"release more than held", func(c *Client) error {
			c.Plan([]Run{{0, 0, 1, 0}, {0, 1, 1, 0}, {0, 2, 1, 0}})
			return c.Release(5)
		}, CodeBadRequest, "handed back more slots"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := dial(t, ts.sock, 2, 2)
			err := tt.send(c)
			for err == nil {
				_, _, err = c.Wait()
			}
			if _, _, err2 := c.Wait(); err2.Error() != err.Error() {
				t.Errorf("second Wait: %v", err2)
			}
			want := fmt.Sprintf("code %d", tt.wantCode)
			if !errors.Is(err, ErrRemote) || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), tt.wantMsg) {
				t.Fatalf("got %v, want ErrRemote with %s and %q", err, want, tt.wantMsg)
			}
		})
	}
	// Over the per-client memory limit: refused at HELLO.
	_, err := Dial(context.Background(), ts.sock, Hello{Slots: 64, MaxRows: 1024})
	if !errors.Is(err, ErrRemote) || !strings.Contains(err.Error(), "max-client-bytes") {
		t.Fatalf("big ring: %v", err)
	}
	_, err = Dial(context.Background(), ts.sock, Hello{Slots: 0, MaxRows: 1})
	if !errors.Is(err, ErrRemote) {
		t.Fatalf("zero slots: %v", err)
	}
}

func TestShutdownTellsClients(t *testing.T) {
	dir := writeDataset(t, 1, 10, 8, shard.ModePack, 0)
	srv, err := NewServer(context.Background(), Config{Data: dir})
	if errors.Is(err, ErrUnsupported) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	sock := filepath.Join(t.TempDir(), "s.sock")
	ln, err := Listen(sock)
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, ln) }()
	c := dial(t, sock, 2, 2)
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.Wait(); !errors.Is(err, ErrRemote) || !strings.Contains(err.Error(), "shutting down") {
		t.Fatalf("client got %v", err)
	}
	if _, err := os.Lstat(sock); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("socket file left behind: %v", err)
	}
}

func TestListenStaleSocket(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("SOCK_SEQPACKET Unix sockets: Linux only")
	}
	sock := filepath.Join(t.TempDir(), "s.sock")
	// A socket file nobody listens on, as a SIGKILLed daemon leaves it.
	ln, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: sock, Net: "unixpacket"})
	if err != nil {
		t.Fatal(err)
	}
	ln.SetUnlinkOnClose(false)
	ln.Close()
	if _, err := os.Lstat(sock); err != nil {
		t.Fatal(err)
	}
	ln2, err := Listen(sock)
	if err != nil {
		t.Fatalf("stale socket not replaced: %v", err)
	}
	defer ln2.Close()
	if _, err := Listen(sock); err == nil || !strings.Contains(err.Error(), "another ferry-serve") {
		t.Fatalf("second daemon on a live socket: %v", err)
	}
	plain := filepath.Join(t.TempDir(), "file")
	os.WriteFile(plain, nil, 0o644)
	if _, err := Listen(plain); err == nil {
		t.Fatal("listening over a regular file")
	}
}

func TestFillAllocs(t *testing.T) {
	dir := writeDataset(t, 2, 64, 64, shard.ModePad, 8)
	ds, err := OpenDataset(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	defer ds.Close()
	lay, err := NewLayout(2, 16, 64, ModePad, HelloSourceIDs) // every column filled
	if err != nil {
		t.Fatal(err)
	}
	mem := make([]byte, lay.TotalSize())
	ss := &session{srv: &Server{ds: ds}}
	runs := []Run{{0, 5, 6, RunContinues}, {1, 2, 9, RunContinues}, {0, 30, 1, 0}}
	for _, r := range runs {
		if err := ds.checkRun(r); err != nil {
			t.Fatal(err)
		}
	}
	if a := testing.AllocsPerRun(100, func() { ss.fillOne(&lay, mem, 3, runs) }); a != 0 {
		t.Fatalf("filling a slot allocates %.1f times", a)
	}
	buf := make([]byte, 0, MaxMsgSize)
	if a := testing.AllocsPerRun(100, func() { buf = AppendPlan(buf[:0], runs) }); a != 0 {
		t.Fatalf("AppendPlan allocates %.1f times", a)
	}
}

func TestOpenDatasetErrors(t *testing.T) {
	good := writeDataset(t, 2, 10, 8, shard.ModePad, 0)
	manifest, err := os.ReadFile(filepath.Join(good, "manifest.json"))
	if err != nil {
		t.Fatal(err)
	}
	shard0 := filepath.Join(good, shard.FileName(0, 2))
	shardBytes, err := os.ReadFile(shard0)
	if err != nil {
		t.Fatal(err)
	}
	copyDir := func(t *testing.T, mess func(dir string)) string {
		dir := t.TempDir()
		os.WriteFile(filepath.Join(dir, "manifest.json"), manifest, 0o644)
		for r := range 2 {
			b, _ := os.ReadFile(filepath.Join(good, shard.FileName(r, 2)))
			os.WriteFile(filepath.Join(dir, shard.FileName(r, 2)), b, 0o644)
		}
		mess(dir)
		return dir
	}
	editManifest := func(edit func(m map[string]any)) func(string) {
		return func(dir string) {
			var m map[string]any
			json.Unmarshal(manifest, &m)
			edit(m)
			b, _ := json.Marshal(m)
			os.WriteFile(filepath.Join(dir, "manifest.json"), b, 0o644)
		}
	}
	file0 := func(m map[string]any) map[string]any { return m["files"].([]any)[0].(map[string]any) }
	tests := []struct {
		name    string
		mess    func(dir string)
		ranks   []int
		verify  bool
		wantErr error
		wantMsg string
	}{
		{"ok", func(string) {}, nil, true, nil, ""},
		{"no manifest", func(d string) { os.Remove(filepath.Join(d, "manifest.json")) }, nil, false, os.ErrNotExist, "manifest.json"},
		{"manifest not json", func(d string) { os.WriteFile(filepath.Join(d, "manifest.json"), []byte("{"), 0o644) }, nil, false, ErrCorrupt, "manifest.json"},
		{"wrong format", editManifest(func(m map[string]any) { m["format"] = "x" }), nil, false, ErrCorrupt, "format"},
		{"future version", editManifest(func(m map[string]any) { m["version"] = 2 }), nil, false, ErrCorrupt, "version 2"},
		{"escaping path", editManifest(func(m map[string]any) { file0(m)["path"] = "../x.arrow" }), nil, false, ErrCorrupt, "plain file name"},
		{"missing shard", func(d string) { os.Remove(filepath.Join(d, shard.FileName(0, 2))) }, nil, false, os.ErrNotExist, "rank-00000"},
		{"missing shard not served", func(d string) { os.Remove(filepath.Join(d, shard.FileName(0, 2))) }, []int{1}, false, nil, ""},
		{"truncated shard", func(d string) {
			os.WriteFile(filepath.Join(d, shard.FileName(0, 2)), shardBytes[:len(shardBytes)-8], 0o644)
		}, nil, false, ErrCorrupt, "bytes, manifest says"},
		{"bad magic", func(d string) {
			b := append([]byte("NOTARR"), shardBytes[6:]...)
			os.WriteFile(filepath.Join(d, shard.FileName(0, 2)), b, 0o644)
		}, nil, false, ErrCorrupt, "ARROW1"},
		{"flipped byte", func(d string) {
			b := append([]byte(nil), shardBytes...)
			b[len(b)/2] ^= 1
			os.WriteFile(filepath.Join(d, shard.FileName(0, 2)), b, 0o644)
		}, nil, true, ErrCorrupt, "sha256"},
		{"buffer out of file", editManifest(func(m map[string]any) {
			file0(m)["batches"].([]any)[0].(map[string]any)["buffers"].(map[string]any)["labels"].(map[string]any)["offset"] = 1 << 30
		}), nil, false, ErrCorrupt, `buffer "labels"`},
		{"rank out of range", func(string) {}, []int{2}, false, nil, "ranks 0..1"},
		// In range and aligned, so only the Arrow cross-check can tell.
		{"swapped buffers", editManifest(func(m map[string]any) {
			bufs := file0(m)["batches"].([]any)[0].(map[string]any)["buffers"].(map[string]any)
			bufs["labels"], bufs["input_ids"] = bufs["input_ids"], bufs["labels"]
		}), nil, false, shard.ErrMismatch, "buffer"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := copyDir(t, tt.mess)
			ds, err := OpenDataset(context.Background(), dir, WithRanks(tt.ranks...), WithVerify(tt.verify))
			if ds != nil {
				ds.Close()
			}
			if tt.wantErr == nil && tt.wantMsg == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || (tt.wantErr != nil && !errors.Is(err, tt.wantErr)) || !strings.Contains(err.Error(), tt.wantMsg) {
				t.Fatalf("got %v, want %v containing %q", err, tt.wantErr, tt.wantMsg)
			}
		})
	}
}

// BenchmarkFillSlot measures the daemon's per-batch work for the bench's
// batch shape (4 × 1024, pad mode: input_ids, labels, attention_mask).
func BenchmarkFillSlot(b *testing.B) {
	dir := writeDataset(b, 2, 512, 1024, shard.ModePad, 0)
	ds, err := OpenDataset(context.Background(), dir)
	if err != nil {
		b.Fatal(err)
	}
	defer ds.Close()
	lay, err := NewLayout(8, 4, 1024, ModePad, 0)
	if err != nil {
		b.Fatal(err)
	}
	mem := make([]byte, lay.TotalSize())
	ss := &session{srv: &Server{ds: ds}}
	runs := []Run{{0, 40, 4, 0}}
	b.SetBytes(4 * 1024 * 4 * 3)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		ss.fillOne(&lay, mem, uint64(i), runs)
	}
}
