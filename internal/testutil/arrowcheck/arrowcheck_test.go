package arrowcheck

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ferryml/ferry/internal/testutil/synth"
	"github.com/ferryml/ferry/shard"
)

func write(t *testing.T, dir string, mode shard.Mode, labels shard.Labels, n, L, ranks, batchRows int) *shard.Manifest {
	t.Helper()
	src, err := shard.NewExampleSource(shard.Layout{SeqLen: L, Mode: mode, Labels: labels, PadID: 3}, synth.Examples(n, L, mode))
	if err != nil {
		t.Fatal(err)
	}
	m, err := shard.WriteDir(context.Background(), dir, shard.DirConfig{Layout: shard.Layout{SeqLen: L, Mode: mode, Labels: labels},
		Ranks: ranks, Seed: 5, BatchRows: batchRows, Tokenizer: shard.TokenizerInfo{SHA256: "t", PadID: 3}}, src)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// needPyarrow skips a test that is only about pyarrow when it is missing
// (fails under FERRY_REQUIRE_TOOLS=1).
func needPyarrow(t *testing.T, err error) {
	t.Helper()
	if !errors.Is(err, ErrMissing) {
		return
	}
	if os.Getenv("FERRY_REQUIRE_TOOLS") == "1" {
		t.Fatal(err)
	}
	t.Skip(err)
}

// TestCheckDir: every mode and labels policy, several record batches per
// shard and a short last one, checked in one call.
func TestCheckDir(t *testing.T) {
	root := t.TempDir()
	var dirs []string
	for i, tc := range []struct {
		mode   shard.Mode
		labels shard.Labels
	}{
		{shard.ModePad, shard.LabelsCopy}, {shard.ModePad, shard.LabelsMaskPad},
		{shard.ModePack, shard.LabelsMaskPrompt}, {shard.ModePack, shard.LabelsCopy},
	} {
		d := filepath.Join(root, fmt.Sprint(i))
		write(t, d, tc.mode, tc.labels, 90, 32, 3, 7)
		dirs = append(dirs, d)
	}
	var expect []Shard
	for _, d := range dirs {
		expect = append(expect, Expect(t, d)...)
	}
	report, err := Check(t, dirs, expect)
	needPyarrow(t, err)
	if err != nil {
		t.Fatal(err)
	}
	// 4 dirs × 3 shards; 30 rows per shard in pad mode in batches of 7.
	if !strings.Contains(report, "arrowcheck: ok:") || !strings.Contains(report, "4 directories, 12 shards") {
		t.Fatalf("report: %s", report)
	}
	CheckDir(t, dirs[0])
}

// TestCheckReports breaks a checked directory in several ways and wants
// each break reported, naming what broke.
func TestCheckReports(t *testing.T) {
	const L = 16
	for _, tc := range []struct {
		name   string
		mode   shard.Mode
		expect bool // compare with the Go reader's expectation taken before the break
		// mess breaks dir (2 ranks); r is rank 1 opened with the Go reader before.
		mess func(t *testing.T, dir string, r *shard.Reader)
		want []string
	}{
		{"token byte vs Go reader", shard.ModePad, true, func(t *testing.T, dir string, r *shard.Reader) {
			// A real token (row 0, position 0 is never padding): only the Go
			// reader's digest and the file's SHA-256 can tell.
			flip(t, dir, r.Batch(0).Buffers()[shard.ColInputIDs].Offset)
		}, []string{"batch 0 (rows 0..6) column input_ids: pyarrow's values hash", "ferry's reader read", "manifest says"}},
		{"padding byte", shard.ModePad, false, func(t *testing.T, dir string, r *shard.Reader) {
			var row shard.Row
			for i := range r.NumRows() {
				if r.Row(i, &row); row.Length < L && i < 7 {
					b := r.Batch(i / 7)
					flip(t, dir, b.Buffers()[shard.ColInputIDs].Offset+int64(((i-b.RowStart)*L+L-1)*4))
					return
				}
			}
			t.Fatal("no padded row")
		}, []string{"batch 0 (rows 0..6): input_ids: padding that is not pad_id 3"}},
		{"length byte", shard.ModePack, false, func(t *testing.T, dir string, r *shard.Reader) {
			flip(t, dir, r.Batch(1).Buffers()[shard.ColLength].Offset+4)
		}, []string{"batch 1 (rows 7..13)", "first row 8"}},
		{"position id byte", shard.ModePack, true, func(t *testing.T, dir string, r *shard.Reader) {
			flip(t, dir, r.Batch(0).Buffers()[shard.ColPositionIDs].Offset+4*3)
		}, []string{"column position_ids: pyarrow's values hash", "position_ids: do not restart"}},
		{"manifest offset", shard.ModePad, false, func(t *testing.T, dir string, r *shard.Reader) {
			// The manifest points input_ids at the labels buffer.
			p := filepath.Join(dir, shard.ManifestName)
			var m map[string]any
			b, _ := os.ReadFile(p)
			if err := json.Unmarshal(b, &m); err != nil {
				t.Fatal(err)
			}
			bufs := m["files"].([]any)[1].(map[string]any)["batches"].([]any)[0].(map[string]any)["buffers"].(map[string]any)
			bufs["input_ids"] = bufs["labels"]
			b, _ = json.Marshal(m)
			if err := os.WriteFile(p, b, 0o644); err != nil {
				t.Fatal(err)
			}
		}, []string{"column input_ids: pyarrow's values start at byte", "column input_ids: row "}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			write(t, dir, tc.mode, shard.LabelsMaskPad, 200, L, 2, 7)
			report, err := Check(t, []string{dir}, Expect(t, dir))
			needPyarrow(t, err)
			if err != nil {
				t.Fatalf("before the break: %v; report:\n%s", err, report)
			}
			var expect []Shard
			if tc.expect {
				expect = Expect(t, dir)
			}
			r, err := shard.Open(filepath.Join(dir, shard.FileName(1, 2)))
			if err != nil {
				t.Fatal(err)
			}
			tc.mess(t, dir, r)
			r.Close()
			report, err = Check(t, []string{dir}, expect)
			if err == nil || errors.Is(err, ErrMissing) {
				t.Fatalf("err %v, want a report of the break; report:\n%s", err, report)
			}
			t.Logf("report:\n%s", report)
			for _, w := range tc.want {
				if !strings.Contains(report, w) {
					t.Errorf("report lacks %q:\n%s", w, report)
				}
			}
			if !strings.Contains(report, shard.FileName(1, 2)) || strings.Contains(report, shard.FileName(0, 2)) {
				t.Errorf("report does not name rank 1 alone:\n%s", report)
			}
		})
	}
}

// flip inverts the low bit of the byte at off in rank 1's shard.
func flip(t *testing.T, dir string, off int64) {
	t.Helper()
	p := filepath.Join(dir, shard.FileName(1, 2))
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	b[off] ^= 1
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestMissingPython: a wrong interpreter is ErrMissing, not a pass.
func TestMissingPython(t *testing.T) {
	t.Setenv("FERRY_PYTHON", filepath.Join(t.TempDir(), "no-python"))
	if _, err := start(); !errors.Is(err, ErrMissing) {
		t.Fatalf("err %v, want ErrMissing", err)
	}
	t.Setenv("FERRY_PYTHON", "/bin/false")
	if _, err := start(); err == nil || errors.Is(err, ErrMissing) {
		t.Fatalf("err %v, want a failure that says the process died", err)
	}
}
