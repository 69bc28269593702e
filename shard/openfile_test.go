package shard

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestManifestValidateBatches: the checks a reader without Arrow (serve,
// np.frombuffer) relies on: batch_rows rows per batch but the last, in
// order, and every buffer 8-byte aligned inside its file.
func TestManifestValidateBatches(t *testing.T) {
	m, _ := writeSynth(t, t.TempDir(), ModePad, LabelsMaskPad, 40, 8, 2, false, 4)
	if n := len(m.Files[0].Batches); n != 5 {
		t.Fatalf("%d batches, want 5", n)
	}
	buf := func(m *Manifest, b int, k string) *BufferRef {
		r := m.Files[0].Batches[b].Buffers[k]
		return &r
	}
	setBuf := func(m *Manifest, b int, k string, r *BufferRef) { m.Files[0].Batches[b].Buffers[k] = *r }
	for _, tc := range []struct {
		name, want string
		mess       func(m *Manifest)
	}{
		{"batch_rows 0", "batch_rows 0", func(m *Manifest) { m.BatchRows = 0 }},
		{"batch_rows over", "batch_rows", func(m *Manifest) { m.BatchRows = MaxBatchRows + 1 }},
		{"short middle batch", "batch 1: row_start 4 rows 3", func(m *Manifest) { m.Files[0].Batches[1].Rows = 3 }},
		{"gap", "batch 2: row_start 9", func(m *Manifest) { m.Files[0].Batches[2].RowStart = 9 }},
		{"rows sum", "batches hold 16 rows, manifest says 20", func(m *Manifest) { m.Files[0].Batches = m.Files[0].Batches[:4] }},
		{"unaligned", `buffer "length"`, func(m *Manifest) { r := buf(m, 0, ColLength); r.Offset += 4; setBuf(m, 0, ColLength, r) }},
		{"beyond file", `buffer "input_ids"`, func(m *Manifest) {
			r := buf(m, 3, ColInputIDs)
			r.Length = m.Files[0].Bytes
			setBuf(m, 3, ColInputIDs, r)
		}},
		{"negative", `buffer "labels"`, func(m *Manifest) { r := buf(m, 0, ColLabels); r.Offset = -8; setBuf(m, 0, ColLabels, r) }},
		{"subdirectory", "not a plain file name", func(m *Manifest) { m.Files[1].Path = "x/" + m.Files[1].Path }},
		{"bytes", "-1 bytes", func(m *Manifest) { m.Files[0].Bytes = -1 }},
	} {
		b, _ := m.Encode()
		c, err := DecodeManifest("m.json", bytes.NewReader(b)) // a deep copy
		if err != nil {
			t.Fatal(err)
		}
		tc.mess(c)
		b, _ = c.Encode()
		if _, err := DecodeManifest("m.json", bytes.NewReader(b)); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err %v, want ErrCorrupt saying %q", tc.name, err, tc.want)
		}
	}
}

// TestOpenFile: a shard opened from anywhere (a cache copy too) is checked
// against its manifest entry; size and SHA-256 before its bytes are parsed.
func TestOpenFile(t *testing.T) {
	dir := t.TempDir()
	m, _ := writeSynth(t, dir, ModePack, LabelsMaskPad, 60, 16, 2, false, 4)
	data, err := os.ReadFile(filepath.Join(dir, FileName(1, 2)))
	if err != nil {
		t.Fatal(err)
	}
	other := t.TempDir()
	put := func(b []byte) string {
		p := filepath.Join(other, "copy.arrow")
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	p := put(data)
	r, err := m.OpenFile(p, 1, WithChecksum())
	if err != nil {
		t.Fatal(err)
	}
	if r.NumRows() != m.RowsPerRank || r.Meta().Rank != 1 {
		t.Fatalf("rows %d rank %d", r.NumRows(), r.Meta().Rank)
	}
	for i := range r.NumBatches() {
		b := r.Batch(i)
		ref := b.Buffers()[ColInputIDs]
		if int(ref.Length) != 4*b.Rows*16 || int32(binary.LittleEndian.Uint32(r.Bytes()[ref.Offset:])) != b.InputIDs[0] {
			t.Fatalf("batch %d input_ids at %+v", i, ref)
		}
	}
	r.Close()

	flipped := slices.Clone(data)
	flipped[m.Files[1].Batches[0].Buffers[ColInputIDs].Offset] ^= 0xff
	for _, tc := range []struct {
		name    string
		data    []byte
		rank    int
		opts    []VerifyOption
		wantErr error
		want    string
	}{
		{"truncated", data[:len(data)-8], 1, nil, ErrCorrupt, "bytes, manifest says"},
		{"grown", append(slices.Clone(data), 0), 1, nil, ErrCorrupt, "bytes, manifest says"},
		{"flipped token", flipped, 1, []VerifyOption{WithChecksum()}, ErrMismatch, "sha256"},
		{"other rank", data, 0, nil, nil, ""}, // size or metadata: either way refused
		{"rank out of range", data, 2, nil, ErrConfig, "rank 2"},
	} {
		p := put(tc.data)
		r, err := m.OpenFile(p, tc.rank, tc.opts...)
		if err == nil {
			r.Close()
			t.Errorf("%s: no error", tc.name)
			continue
		}
		if tc.wantErr != nil && (!errors.Is(err, tc.wantErr) || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%s: err %v, want %v saying %q", tc.name, err, tc.wantErr, tc.want)
		}
		if tc.rank < 2 && !strings.Contains(err.Error(), p) {
			t.Errorf("%s: err %v does not name %s", tc.name, err, p)
		}
	}
	// Without the checksum a flipped token is not seen (token values are not checked).
	r, err = m.OpenFile(put(flipped), 1)
	if err != nil {
		t.Fatalf("flipped token without checksum: %v", err)
	}
	r.Close()
}
