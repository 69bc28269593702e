package shard

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// CheckArrow reads shard directories with pyarrow and compares them with
// this package's reader: arrowcheck.CheckDir, which arrowcheck_test.go
// (package shard_test) installs, as arrowcheck imports this package.
var CheckArrow = func(t testing.TB, dirs ...string) {
	t.Helper()
	t.Fatal("shard: CheckArrow not installed (arrowcheck_test.go)")
}

func synth(n, maxLen int) []Example {
	exs := make([]Example, n)
	for i := range exs {
		l := 1 + (i*7919)%maxLen
		t := make([]int32, l)
		for j := range t {
			t[j] = int32(1000 + (i*31+j)%50000)
		}
		exs[i] = Example{Sample: int64(i), Tokens: t, Prompt: l / 3}
	}
	return exs
}

func writeSynth(t *testing.T, dir string, mode Mode, labels Labels, n, L, ranks int, dropLast bool, batchRows int) (*Manifest, []Example) {
	t.Helper()
	maxLen := L
	if mode == ModePack {
		maxLen = max(L/4, 1)
	}
	exs := synth(n, maxLen)
	src, err := NewExampleSource(Layout{SeqLen: L, Mode: mode, Labels: labels, PadID: 7}, exs)
	if err != nil {
		t.Fatal(err)
	}
	m, err := WriteDir(context.Background(), dir, DirConfig{Layout: Layout{SeqLen: L, Mode: mode, Labels: labels}, Ranks: ranks,
		Seed: 42, DropLast: dropLast, BatchRows: batchRows, Tokenizer: TokenizerInfo{SHA256: "abc", PadID: 7}}, src)
	if err != nil {
		t.Fatal(err)
	}
	return m, exs
}

// TestRoundTrip writes directories in both modes and checks every row read
// back against the examples it came from and the format's invariants, then
// has pyarrow read them all.
func TestRoundTrip(t *testing.T) {
	root := t.TempDir()
	var dirs []string
	for _, tc := range []struct {
		mode              Mode
		labels            Labels
		n, L, ranks, brow int
		dropLast          bool
	}{
		{ModePad, LabelsCopy, 101, 32, 4, 10, false},
		{ModePad, LabelsMaskPad, 101, 32, 4, 1024, true},
		{ModePad, LabelsMaskPrompt, 50, 16, 1, 7, false},
		{ModePack, LabelsMaskPad, 500, 64, 3, 5, false},
		{ModePack, LabelsMaskPrompt, 300, 128, 2, 1024, true},
		{ModePack, LabelsCopy, 64, 8, 2, 3, false},
	} {
		name := fmt.Sprintf("%s-%s-n%d-L%d-r%d-b%d-drop%v", tc.mode, tc.labels, tc.n, tc.L, tc.ranks, tc.brow, tc.dropLast)
		dir := filepath.Join(root, name)
		dirs = append(dirs, dir)
		t.Run(name, func(t *testing.T) {
			m, exs := writeSynth(t, dir, tc.mode, tc.labels, tc.n, tc.L, tc.ranks, tc.dropLast, tc.brow)
			if m.TotalRows != m.Ranks*m.RowsPerRank {
				t.Fatalf("total %d != %d×%d", m.TotalRows, m.Ranks, m.RowsPerRank)
			}
			if tc.mode == ModePad && m.UniqueRows != tc.n {
				t.Fatalf("unique rows %d, want %d", m.UniqueRows, tc.n)
			}
			seen := map[int64]int{}
			var tokens int64
			var row Row
			loss, err := ReadLossTokens(dir, m)
			if err != nil {
				t.Fatal(err)
			}
			for rank := range tc.ranks {
				_, r, err := OpenDir(dir, rank, WithChecksum())
				if err != nil {
					t.Fatal(err)
				}
				if r.NumRows() != m.RowsPerRank {
					t.Fatalf("rank %d: %d rows, want %d", rank, r.NumRows(), m.RowsPerRank)
				}
				for j := range r.NumRows() {
					if err := r.Row(j, &row); err != nil {
						t.Fatal(err)
					}
					p := j*tc.ranks + rank
					checkRowT(t, tc.mode, tc.labels, 7, tc.L, exs, &row)
					want := uint32(0)
					for _, l := range row.Labels[1:] {
						if l != -100 {
							want++
						}
					}
					if loss[rank][j] != want {
						t.Fatalf("rank %d row %d: %s says %d loss tokens, labels have %d", rank, j, LossTokensName, loss[rank][j], want)
					}
					if p < m.UniqueRows {
						tokens += int64(row.Length)
						for _, s := range row.Segments {
							seen[s.Sample]++
						}
					}
				}
				r.Close()
			}
			if m.Stats.Tokens != tokens {
				t.Errorf("stats tokens %d, counted %d", m.Stats.Tokens, tokens)
			}
			distinct := min(m.UniqueRows, m.TotalRows)
			if want := float64(tokens) / float64(distinct*tc.L); m.Stats.Efficiency != want {
				t.Errorf("efficiency %v, want %v", m.Stats.Efficiency, want)
			}
			if !tc.dropLast {
				for i := range exs {
					if seen[int64(i)] != 1 {
						t.Fatalf("sample %d seen %d times, want once", i, seen[int64(i)])
					}
				}
			}
			for s, c := range seen {
				if c != 1 {
					t.Fatalf("sample %d seen %d times", s, c)
				}
			}
		})
	}
	CheckArrow(t, dirs...)
}

func checkRowT(t *testing.T, mode Mode, labels Labels, pad int32, L int, exs []Example, row *Row) {
	t.Helper()
	if len(row.InputIDs) != L || len(row.Labels) != L {
		t.Fatalf("row lengths %d/%d", len(row.InputIDs), len(row.Labels))
	}
	if mode == ModePad && len(row.Segments) != 1 {
		t.Fatalf("pad row with %d segments", len(row.Segments))
	}
	at := int32(0)
	for _, s := range row.Segments {
		ex := exs[s.Sample]
		if s.Start != at || int(s.Length) != len(ex.Tokens) {
			t.Fatalf("segment %+v, want start %d length %d", s, at, len(ex.Tokens))
		}
		got := row.InputIDs[s.Start : s.Start+s.Length]
		if !slices.Equal(got, ex.Tokens) {
			t.Fatalf("sample %d tokens differ", s.Sample)
		}
		for j := range int(s.Length) {
			want := ex.Tokens[j]
			if labels == LabelsMaskPrompt && j < ex.Prompt {
				want = IgnoreIndex
			}
			if mode == ModePack && j == 0 {
				want = IgnoreIndex
			}
			if lab := row.Labels[int(s.Start)+j]; lab != want {
				t.Fatalf("sample %d label %d = %d, want %d", s.Sample, j, lab, want)
			}
			if mode == ModePack && row.PositionIDs[int(s.Start)+j] != int32(j) {
				t.Fatalf("sample %d position %d = %d", s.Sample, j, row.PositionIDs[int(s.Start)+j])
			}
		}
		at += s.Length
	}
	if at != row.Length {
		t.Fatalf("segments cover %d, length %d", at, row.Length)
	}
	for j := int(row.Length); j < L; j++ {
		wantLab := int32(IgnoreIndex)
		if labels == LabelsCopy {
			wantLab = pad
		}
		if row.InputIDs[j] != pad || row.Labels[j] != wantLab {
			t.Fatalf("pad position %d: id %d label %d", j, row.InputIDs[j], row.Labels[j])
		}
		if mode == ModePack {
			last := row.Segments[len(row.Segments)-1]
			if want := last.Length + int32(j) - row.Length; row.PositionIDs[j] != want {
				t.Fatalf("pad position %d: position id %d, want %d", j, row.PositionIDs[j], want)
			}
		}
	}
	if mode == ModePad && row.PositionIDs != nil {
		t.Fatal("position ids in pad mode")
	}
}

func TestAssign(t *testing.T) {
	for _, tc := range []struct {
		unique, ranks int
		dropLast      bool
		wantPerRank   int
		wantErr       error
	}{
		{10, 3, false, 4, nil},
		{10, 3, true, 3, nil},
		{9, 3, false, 3, nil},
		{2, 3, false, 0, ErrTooFewRows},
		{2, 3, true, 0, ErrTooFewRows},
		{5, 0, false, 0, ErrConfig},
	} {
		order, per, err := Assign(tc.unique, tc.ranks, 1, tc.dropLast)
		if !errors.Is(err, tc.wantErr) {
			t.Fatalf("%+v: err %v, want %v", tc, err, tc.wantErr)
		}
		if err != nil {
			continue
		}
		if per != tc.wantPerRank || len(order) != per*tc.ranks {
			t.Fatalf("%+v: per rank %d, order %d", tc, per, len(order))
		}
		count := make([]int, tc.unique)
		for p, u := range order {
			count[u]++
			if p >= tc.unique && order[p] != order[p-tc.unique] {
				t.Fatalf("%+v: position %d does not wrap around", tc, p)
			}
		}
		for u, c := range count {
			if (!tc.dropLast && c < 1) || c > 2 {
				t.Fatalf("%+v: row %d appears %d times", tc, u, c)
			}
		}
	}
}

// TestPermutationGolden pins the shuffle: the Python side and resumed jobs
// depend on it never changing.
func TestPermutationGolden(t *testing.T) {
	r := NewRand(0)
	if got := r.Uint64(); got != 0xE220A8397B1DCDAF {
		t.Fatalf("SplitMix64(0) first value %#x, want 0xE220A8397B1DCDAF", got)
	}
	got := Permutation(10, 42)
	want := []int32{0, 9, 5, 8, 6, 4, 7, 2, 1, 3} // from an independent Python implementation
	if !slices.Equal(got, want) {
		t.Fatalf("Permutation(10, 42) = %v, want %v", got, want)
	}
	sorted := slices.Clone(Permutation(1000, 7))
	slices.Sort(sorted)
	for i, v := range sorted {
		if int(v) != i {
			t.Fatal("not a permutation")
		}
	}
}

func TestPack(t *testing.T) {
	const L = 1024
	lengths := make([]int32, 5000)
	r := NewRand(3)
	var sum int64
	for i := range lengths {
		lengths[i] = int32(1 + r.Below(300))
		sum += int64(lengths[i])
	}
	lengths[7] = L
	sum += L - int64(lengths[7])
	items, rowStart, err := Pack(lengths, L)
	if err != nil {
		t.Fatal(err)
	}
	seen := make([]bool, len(lengths))
	for k := range len(rowStart) - 1 {
		n := int32(0)
		for _, it := range items[rowStart[k]:rowStart[k+1]] {
			if seen[it] {
				t.Fatalf("item %d twice", it)
			}
			seen[it] = true
			n += lengths[it]
		}
		if n > L {
			t.Fatalf("row %d holds %d tokens", k, n)
		}
	}
	if !slices.Equal(seen, slices.Repeat([]bool{true}, len(seen))) {
		t.Fatal("an item is missing")
	}
	rows := len(rowStart) - 1
	eff := float64(sum) / float64(rows*L)
	lower := int((sum + L - 1) / L)
	t.Logf("%d items, %d tokens: %d rows (lower bound %d), efficiency %.4f", len(lengths), sum, rows, lower, eff)
	if eff < 0.98 {
		t.Errorf("packing efficiency %.4f < 0.98", eff)
	}
	if _, _, err := Pack([]int32{3, 0}, 8); !errors.Is(err, ErrConfig) {
		t.Fatalf("zero length: %v", err)
	}
	if _, _, err := Pack([]int32{9}, 8); !errors.Is(err, ErrConfig) {
		t.Fatalf("too long: %v", err)
	}
}

func TestFillErrors(t *testing.T) {
	l := Layout{SeqLen: 4, Mode: ModePad, Labels: LabelsMaskPad}
	row := l.NewRow()
	for _, tc := range []struct {
		name string
		l    Layout
		exs  []Example
	}{
		{"two in pad", l, []Example{{Tokens: []int32{1}}, {Tokens: []int32{2}}}},
		{"none in pad", l, nil},
		{"empty", l, []Example{{Tokens: nil}}},
		{"too long", l, []Example{{Tokens: []int32{1, 2, 3, 4, 5}}}},
	} {
		if err := tc.l.Fill(row, tc.exs); !errors.Is(err, ErrConfig) {
			t.Errorf("%s: err %v, want ErrConfig", tc.name, err)
		}
	}
	pk := Layout{SeqLen: 4, Mode: ModePack, Labels: LabelsMaskPad}
	if err := pk.Fill(pk.NewRow(), []Example{{Tokens: []int32{1, 2, 3}}, {Tokens: []int32{4, 5}}}); !errors.Is(err, ErrConfig) {
		t.Errorf("overflowing pack row: %v", err)
	}
}

func TestWriterRejectsBadRows(t *testing.T) {
	meta := FileMeta{Rank: 0, Ranks: 1, SeqLen: 4, Mode: ModePad, Labels: LabelsMaskPad}
	for _, tc := range []struct {
		name string
		row  Row
	}{
		{"short ids", Row{InputIDs: []int32{1}, Labels: make([]int32, 4), Length: 1, Segments: []Segment{{0, 0, 1, 0}}}},
		{"length too big", Row{InputIDs: make([]int32, 4), Labels: make([]int32, 4), Length: 5, Segments: []Segment{{0, 0, 5, 0}}}},
		{"gap", Row{InputIDs: make([]int32, 4), Labels: make([]int32, 4), Length: 2, Segments: []Segment{{0, 1, 1, 0}}}},
		{"short cover", Row{InputIDs: make([]int32, 4), Labels: make([]int32, 4), Length: 3, Segments: []Segment{{0, 0, 2, 0}}}},
		{"source in a version 1 file", Row{InputIDs: make([]int32, 4), Labels: make([]int32, 4), Length: 1, Segments: []Segment{{0, 0, 1, 2}}}},
		{"position ids in pad", Row{InputIDs: make([]int32, 4), Labels: make([]int32, 4), PositionIDs: make([]int32, 4), Length: 1, Segments: []Segment{{0, 0, 1, 0}}}},
	} {
		w, err := NewWriter(&bytes.Buffer{}, meta)
		if err != nil {
			t.Fatal(err)
		}
		if err := w.Add(&tc.row); !errors.Is(err, ErrConfig) {
			t.Errorf("%s: err %v, want ErrConfig", tc.name, err)
		}
		if err := w.Close(); !errors.Is(err, ErrConfig) {
			t.Errorf("%s: Close err %v, want the sticky ErrConfig", tc.name, err)
		}
	}
	if _, err := NewWriter(&bytes.Buffer{}, FileMeta{Rank: 2, Ranks: 2, SeqLen: 4, Mode: ModePad, Labels: LabelsCopy}); !errors.Is(err, ErrConfig) {
		t.Errorf("rank 2 of 2: %v", err)
	}
}

func TestWriterAddAllocs(t *testing.T) {
	meta := FileMeta{Rank: 0, Ranks: 1, SeqLen: 64, Mode: ModePack, Labels: LabelsMaskPad}
	w, err := NewWriter(&bytes.Buffer{}, meta, WithBatchRows(1<<16))
	if err != nil {
		t.Fatal(err)
	}
	l := Layout{SeqLen: 64, Mode: ModePack, Labels: LabelsMaskPad}
	row := l.NewRow()
	exs := synth(4, 16)
	for range 10 { // warm up the segment buffers
		if err := l.Fill(row, exs); err != nil {
			t.Fatal(err)
		}
		_ = w.Add(row)
	}
	w.segSample = slices.Grow(w.segSample, 1<<16*4)
	w.segStart = slices.Grow(w.segStart, 1<<16*4)
	w.segLength = slices.Grow(w.segLength, 1<<16*4)
	allocs := testing.AllocsPerRun(1000, func() {
		_ = l.Fill(row, exs)
		_ = w.Add(row)
	})
	if allocs != 0 {
		t.Fatalf("Fill+Add: %v allocs per row, want 0", allocs)
	}
}

func TestExistingOutput(t *testing.T) {
	dir := t.TempDir()
	writeSynth(t, dir, ModePad, LabelsCopy, 10, 8, 2, false, 4)
	src, _ := NewExampleSource(Layout{SeqLen: 8, Mode: ModePad, Labels: LabelsCopy}, synth(10, 8))
	_, err := WriteDir(context.Background(), dir, DirConfig{Layout: Layout{SeqLen: 8, Mode: ModePad, Labels: LabelsCopy}, Ranks: 2}, src)
	if !errors.Is(err, ErrExists) {
		t.Fatalf("err %v, want ErrExists", err)
	}
	// Force replaces it, also with a different rank count; stale shards go.
	if _, err := WriteDir(context.Background(), dir, DirConfig{Layout: Layout{SeqLen: 8, Mode: ModePad, Labels: LabelsCopy}, Ranks: 3, Force: true}, src); err != nil {
		t.Fatal(err)
	}
	ents, _ := os.ReadDir(dir)
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	want := []string{LossTokensName, ManifestName, FileName(0, 3), FileName(1, 3), FileName(2, 3)}
	slices.Sort(want)
	if !slices.Equal(names, want) {
		t.Fatalf("directory holds %v, want %v", names, want)
	}
	CheckArrow(t, dir)
}

// TestCancelLeavesNoManifest cancels a write mid-way: no manifest, no temp files.
func TestCancelLeavesNoManifest(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	calls := 0
	src := funcSource{n: 5000, fill: func(i int, dst *Row) error {
		calls++
		if calls == 600 {
			cancel()
		}
		return Layout{SeqLen: 8, Mode: ModePad, Labels: LabelsCopy}.Fill(dst, []Example{{Sample: int64(i), Tokens: []int32{1, 2}}})
	}}
	_, err := WriteDir(ctx, dir, DirConfig{Layout: Layout{SeqLen: 8, Mode: ModePad, Labels: LabelsCopy}, Ranks: 1}, src)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err %v, want context.Canceled", err)
	}
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		t.Errorf("left behind: %s", e.Name())
	}
}

type funcSource struct {
	n    int
	fill func(int, *Row) error
}

func (f funcSource) NumRows() int                  { return f.n }
func (f funcSource) FillRow(i int, dst *Row) error { return f.fill(i, dst) }

func TestVerifyMismatch(t *testing.T) {
	dir := t.TempDir()
	writeSynth(t, dir, ModePack, LabelsMaskPad, 200, 32, 2, false, 8)
	CheckArrow(t, dir)
	p := filepath.Join(dir, FileName(1, 2))
	data, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	// Flip one token byte: the structure stays valid, the checksum does not.
	m, _ := ReadManifest(dir)
	off := m.Files[1].Batches[0].Buffers[ColInputIDs].Offset
	data[off] ^= 0xff
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := OpenDir(dir, 1); err != nil {
		t.Fatalf("without checksum: %v", err)
	}
	if _, _, err := OpenDir(dir, 1, WithChecksum()); !errors.Is(err, ErrMismatch) {
		t.Fatalf("with checksum: %v, want ErrMismatch", err)
	}
	if err := os.WriteFile(p, data[:len(data)-1], 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := OpenDir(dir, 1); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("truncated: %v, want ErrCorrupt", err)
	}
}

func TestManifestValidate(t *testing.T) {
	dir := t.TempDir()
	m, _ := writeSynth(t, dir, ModePad, LabelsCopy, 10, 8, 2, false, 4)
	CheckArrow(t, dir)
	for _, tc := range []struct {
		name string
		mess func(m *Manifest)
	}{
		{"format", func(m *Manifest) { m.Format = "x" }},
		{"version", func(m *Manifest) { m.Version = 2 }},
		{"total", func(m *Manifest) { m.TotalRows++ }},
		{"files", func(m *Manifest) { m.Files = m.Files[:1] }},
		{"path", func(m *Manifest) { m.Files[1].Path = "../x.arrow" }},
		{"rows", func(m *Manifest) { m.Files[0].Rows = 1 }},
		{"mode", func(m *Manifest) { m.Mode = "zip" }},
		{"unique", func(m *Manifest) { m.UniqueRows = 1000 }},
	} {
		c := *m
		c.Files = slices.Clone(m.Files)
		tc.mess(&c)
		b, _ := c.Encode()
		if _, err := DecodeManifest("m.json", bytes.NewReader(b)); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: err %v, want ErrCorrupt", tc.name, err)
		}
	}
	if _, err := DecodeManifest("m.json", bytes.NewReader([]byte("{"))); !errors.Is(err, ErrCorrupt) {
		t.Errorf("bad json: %v", err)
	}
}

func TestReaderCorrupt(t *testing.T) {
	dir := t.TempDir()
	writeSynth(t, dir, ModePack, LabelsMaskPad, 100, 32, 1, false, 8)
	CheckArrow(t, dir)
	data, err := os.ReadFile(filepath.Join(dir, FileName(0, 1)))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		mess func([]byte) []byte
	}{
		{"empty", func([]byte) []byte { return nil }},
		{"magic", func(b []byte) []byte { b[0] = 'X'; return b }},
		{"truncated", func(b []byte) []byte { return b[:len(b)-20] }},
		{"footer length", func(b []byte) []byte { b[len(b)-10] ^= 0x7f; return b }},
		{"half", func(b []byte) []byte { return append(b[:len(b)/2:len(b)/2], b[len(b)-10:]...) }},
	} {
		b := tc.mess(slices.Clone(data))
		if _, err := NewMappedReader("x.arrow", b); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: err %v, want ErrCorrupt", tc.name, err)
		}
	}
}

func FuzzReader(f *testing.F) {
	dir := f.TempDir()
	var subs []string
	for i, mode := range []Mode{ModePad, ModePack} {
		sub := filepath.Join(dir, fmt.Sprint(i))
		subs = append(subs, sub)
		exs := synth(20, 8)
		src, err := NewExampleSource(Layout{SeqLen: 16, Mode: mode, Labels: LabelsMaskPad}, exs)
		if err != nil {
			f.Fatal(err)
		}
		if _, err := WriteDir(context.Background(), sub, DirConfig{Layout: Layout{SeqLen: 16, Mode: mode, Labels: LabelsMaskPad}, Ranks: 1, BatchRows: 4}, src); err != nil {
			f.Fatal(err)
		}
		b, err := os.ReadFile(filepath.Join(sub, FileName(0, 1)))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	CheckArrow(f, subs...) // the seeds are valid shards
	f.Add(lz4Shard(f))     // compressed buffers state their own size
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := NewMappedReader("fuzz.arrow", data)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error %v does not wrap ErrCorrupt", err)
			}
			return
		}
		var row Row
		for i := range r.NumRows() {
			if err := r.Row(i, &row); err != nil {
				t.Fatal(err)
			}
			_ = row.InputIDs[len(row.InputIDs)-1]
		}
	})
}

func FuzzManifest(f *testing.F) {
	dir := f.TempDir()
	src, err := NewExampleSource(Layout{SeqLen: 8, Mode: ModePack, Labels: LabelsMaskPad}, synth(30, 2))
	if err != nil {
		f.Fatal(err)
	}
	if _, err := WriteDir(context.Background(), dir, DirConfig{Layout: Layout{SeqLen: 8, Mode: ModePack, Labels: LabelsMaskPad}, Ranks: 2, BatchRows: 3}, src); err != nil {
		f.Fatal(err)
	}
	CheckArrow(f, dir)
	b, err := os.ReadFile(filepath.Join(dir, ManifestName))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b)
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := DecodeManifest("fuzz.json", bytes.NewReader(data))
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error %v does not wrap ErrCorrupt", err)
			}
			return
		}
		// A valid manifest names only shard files inside its directory.
		for i, fe := range m.Files {
			if fe.Path != FileName(i, m.Ranks) {
				t.Fatalf("accepted path %q", fe.Path)
			}
		}
	})
}

// TestLossTokensSideFile: loss_tokens.u32 is checked against the manifest
// (size, checksum, total) and an output without it is reported as such.
func TestLossTokensSideFile(t *testing.T) {
	dir := t.TempDir()
	m, _ := writeSynth(t, dir, ModePack, LabelsMaskPrompt, 200, 32, 3, false, 8)
	if m.LossTokens == nil || m.LossTokens.Total <= 0 {
		t.Fatalf("manifest loss_tokens = %+v", m.LossTokens)
	}
	p := filepath.Join(dir, LossTokensName)
	orig, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	bad := bytes.Clone(orig)
	bad[5] ^= 1
	for name, data := range map[string][]byte{"flipped": bad, "truncated": orig[:len(orig)-4]} {
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := ReadLossTokens(dir, m); !errors.Is(err, ErrMismatch) || !strings.Contains(err.Error(), p) {
			t.Errorf("%s: err = %v, want ErrMismatch naming %s", name, err, p)
		}
	}
	old := *m
	old.LossTokens = nil
	if _, err := ReadLossTokens(dir, &old); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("no loss_tokens in manifest: err = %v, want fs.ErrNotExist", err)
	}
	wrong := *m
	lt := *m.LossTokens
	lt.Bytes += 4
	wrong.LossTokens = &lt
	if err := wrong.Validate(); !errors.Is(err, ErrCorrupt) {
		t.Errorf("loss_tokens bytes off by 4: Validate = %v, want ErrCorrupt", err)
	}
}
