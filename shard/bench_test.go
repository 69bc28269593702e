package shard

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"testing"
)

func BenchmarkWriterAdd(b *testing.B) {
	for _, mode := range []Mode{ModePad, ModePack} {
		b.Run(fmt.Sprintf("mode=%s/seq=1024", mode), func(b *testing.B) {
			l := Layout{SeqLen: 1024, Mode: mode, Labels: LabelsMaskPad}
			w, err := NewWriter(io.Discard, FileMeta{Rank: 0, Ranks: 1, SeqLen: 1024, Mode: mode, Labels: LabelsMaskPad})
			if err != nil {
				b.Fatal(err)
			}
			row := l.NewRow()
			exs := synth(8, 120)
			if mode == ModePad {
				exs = exs[:1]
			}
			b.SetBytes(int64(1024 * 4 * 2))
			b.ReportAllocs()
			for b.Loop() {
				if err := l.Fill(row, exs); err != nil {
					b.Fatal(err)
				}
				if err := w.Add(row); err != nil {
					b.Fatal(err)
				}
			}
			_ = w.Close()
		})
	}
}

func BenchmarkReaderRow(b *testing.B) {
	dir := b.TempDir()
	src, err := NewExampleSource(Layout{SeqLen: 1024, Mode: ModePack, Labels: LabelsMaskPad}, synth(4000, 256))
	if err != nil {
		b.Fatal(err)
	}
	if _, err := WriteDir(context.Background(), dir, DirConfig{Layout: Layout{SeqLen: 1024, Mode: ModePack, Labels: LabelsMaskPad}, Ranks: 1}, src); err != nil {
		b.Fatal(err)
	}
	r, err := Open(filepath.Join(dir, FileName(0, 1)))
	if err != nil {
		b.Fatal(err)
	}
	defer r.Close()
	var row Row
	var sum int64
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		_ = r.Row(i%r.NumRows(), &row)
		sum += int64(row.InputIDs[0])
		i++
	}
	_ = sum
}
