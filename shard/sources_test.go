package shard

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestSourcesRoundTrip writes a mixture's directory (format version 2) in
// both modes and reads every segment's source back, with ferry's reader
// and pyarrow; a directory without sources stays version 1.
func TestSourcesRoundTrip(t *testing.T) {
	root := t.TempDir()
	var dirs []string
	for _, mode := range []Mode{ModePad, ModePack} {
		dir := filepath.Join(root, string(mode))
		dirs = append(dirs, dir)
		exs := synth(60, 8)
		want := map[int64]int32{}
		for i := range exs {
			exs[i].Source = int32(i % 3)
			want[exs[i].Sample] = exs[i].Source
		}
		layout := Layout{SeqLen: 16, Mode: mode, Labels: LabelsMaskPad, PadID: 7}
		src, err := NewExampleSource(layout, exs)
		if err != nil {
			t.Fatal(err)
		}
		one := 1.0
		srcs := []SourceInfo{{Name: "a", Weight: &one}, {Name: "b", Weight: &one}, {Name: "c", Repeat: &one}}
		m, err := WriteDir(context.Background(), dir, DirConfig{Layout: layout, Ranks: 2, Seed: 3, BatchRows: 7,
			Tokenizer: TokenizerInfo{SHA256: "abc", PadID: 7}, Sources: srcs}, src)
		if err != nil {
			t.Fatal(err)
		}
		if m.Version != 2 || len(m.Sources) != 3 {
			t.Fatalf("version %d with %d sources, want 2 with 3", m.Version, len(m.Sources))
		}
		seen := 0
		for rank := range m.Ranks {
			_, r, err := OpenDir(dir, rank, WithChecksum())
			if err != nil {
				t.Fatal(err)
			}
			if !r.Meta().Sources {
				t.Fatalf("rank %d: meta without sources", rank)
			}
			var row Row
			for i := range r.NumRows() {
				if err := r.Row(i, &row); err != nil {
					t.Fatal(err)
				}
				for _, s := range row.Segments {
					if s.Source != want[s.Sample] {
						t.Fatalf("%s rank %d row %d: sample %d has source %d, want %d", mode, rank, i, s.Sample, s.Source, want[s.Sample])
					}
					seen++
				}
			}
			r.Close()
		}
		if seen < len(exs) {
			t.Fatalf("%d segments read, want at least %d", seen, len(exs))
		}
	}
	CheckArrow(t, dirs...)

	// A version 2 manifest without sources (or version 1 with) is corrupt.
	m, err := ReadManifest(dirs[0])
	if err != nil {
		t.Fatal(err)
	}
	m.Sources = nil
	if err := m.Validate(); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "sources") {
		t.Fatalf("version 2 without sources: %v, want ErrCorrupt naming sources", err)
	}
	// A version 2 shard under a version 1 manifest does not match it.
	m.Version = 1
	b, err := m.Encode()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dirs[0], ManifestName), b, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := OpenDir(dirs[0], 0); !errors.Is(err, ErrMismatch) {
		t.Fatalf("version 2 shard, version 1 manifest: %v, want ErrMismatch", err)
	}
}

// TestWriterRejectsSourceWithoutSources: a segment with a source cannot go
// into a version 1 file.
func TestWriterRejectsSourceWithoutSources(t *testing.T) {
	layout := Layout{SeqLen: 4, Mode: ModePad, Labels: LabelsMaskPad}
	row := layout.NewRow()
	if err := layout.Fill(row, []Example{{Sample: 0, Source: 1, Tokens: []int32{5, 6}}}); err != nil {
		t.Fatal(err)
	}
	w, err := NewWriter(new(strings.Builder), FileMeta{Ranks: 1, SeqLen: 4, Mode: ModePad, Labels: LabelsMaskPad})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Add(row); !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "source 1") {
		t.Fatalf("Add: %v, want ErrConfig naming source 1", err)
	}
}
