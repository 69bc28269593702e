package shard

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/ipc"
)

// A shard rewritten with compressed buffers whose stated uncompressed size
// is 1 TiB: arrow-go allocates what the file states, and an allocation the
// runtime cannot satisfy is a fatal error, not a panic. The reader must
// refuse it with ErrCorrupt (this input killed a fuzz worker in CI).
func TestReaderRefusesHugeUncompressedSize(t *testing.T) {
	data := lz4Shard(t)

	// The compressed file as written is a readable shard (decompressed
	// into the heap, within the reader's limit).
	r, err := NewMappedReader("lz4.arrow", data)
	if err != nil {
		t.Fatalf("compressed shard: %v", err)
	}
	if r.NumRows() != 8 {
		t.Fatalf("%d rows, want 8", r.NumRows())
	}

	// input_ids: 8 rows × 16 tokens × 4 bytes = 512 bytes, stated as the
	// first 8 bytes of its compressed buffer (the flatbuffer metadata may
	// hold the same number: patch each place in turn).
	var want [8]byte
	binary.LittleEndian.PutUint64(want[:], 8*16*4)
	refused := 0
	for at := 0; ; at++ {
		i := bytes.Index(data[at:], want[:])
		if i < 0 {
			break
		}
		at += i
		bad := bytes.Clone(data)
		binary.LittleEndian.PutUint64(bad[at:], 1<<40)
		_, err := NewMappedReader("huge.arrow", bad)
		if err != nil && !errors.Is(err, ErrCorrupt) {
			t.Fatalf("offset %d: error %v does not wrap ErrCorrupt", at, err)
		}
		if err != nil && strings.Contains(err.Error(), "over the reader's limit") {
			refused++
			t.Logf("offset %d: %v", at, err)
		}
	}
	if refused == 0 {
		t.Fatal("no patched copy reached the allocation limit")
	}
}

// lz4Shard is a valid 8-row pad shard rewritten by arrow-go with LZ4 frame
// compressed buffers.
func lz4Shard(tb testing.TB) []byte {
	tb.Helper()
	dir := tb.TempDir()
	src, err := NewExampleSource(Layout{SeqLen: 16, Mode: ModePad, Labels: LabelsMaskPad}, synth(8, 8))
	if err != nil {
		tb.Fatal(err)
	}
	if _, err := WriteDir(context.Background(), dir, DirConfig{Layout: Layout{SeqLen: 16, Mode: ModePad, Labels: LabelsMaskPad}, Ranks: 1, BatchRows: 8}, src); err != nil {
		tb.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, FileName(0, 1)))
	if err != nil {
		tb.Fatal(err)
	}
	fr, err := ipc.NewMappedFileReader(b)
	if err != nil {
		tb.Fatal(err)
	}
	var out bytes.Buffer
	w, err := ipc.NewFileWriter(&out, ipc.WithSchema(fr.Schema()), ipc.WithLZ4())
	if err != nil {
		tb.Fatal(err)
	}
	for i := range fr.NumRecords() {
		rec, err := fr.RecordBatchAt(i)
		if err != nil {
			tb.Fatal(err)
		}
		if err := w.Write(rec); err != nil {
			tb.Fatal(err)
		}
		rec.Release()
	}
	if err := w.Close(); err != nil {
		tb.Fatal(err)
	}
	fr.Close()
	return out.Bytes()
}
