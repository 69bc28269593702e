package shard

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func partExamples() ([]Example, []uint8) {
	exs := []Example{
		{Sample: 0, Tokens: []int32{1, 2, 3}, Prompt: 2},
		{Sample: 2, Tokens: []int32{4}, Prompt: 0},
		{Sample: 2, Tokens: []int32{5, 6}, Prompt: 1},
		{Sample: 7, Tokens: []int32{-1, 1 << 30}, Prompt: 2},
	}
	return exs, []uint8{0, PartSplit, 0, PartTruncated}
}

func TestPartRoundTrip(t *testing.T) {
	exs, flags := partExamples()
	var buf bytes.Buffer
	n, sum, err := WritePart(&buf, exs, flags)
	if err != nil {
		t.Fatal(err)
	}
	h := sha256.Sum256(buf.Bytes())
	if n != int64(buf.Len()) || sum != hex.EncodeToString(h[:]) {
		t.Fatalf("size %d (wrote %d), sha %s", n, buf.Len(), sum)
	}
	path := filepath.Join(t.TempDir(), PartFileName(0, 1))
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	p, err := OpenPart(path)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	got, gotFlags := p.AppendExamples(nil, nil, 100)
	if len(got) != len(exs) || !slices.Equal(gotFlags, flags) {
		t.Fatalf("%d examples, flags %v", len(got), gotFlags)
	}
	for i := range exs {
		if got[i].Sample != exs[i].Sample+100 || got[i].Prompt != exs[i].Prompt || !slices.Equal(got[i].Tokens, exs[i].Tokens) {
			t.Errorf("example %d: %+v, want %+v (+100)", i, got[i], exs[i])
		}
	}
	// An empty part is valid.
	buf.Reset()
	if _, _, err := WritePart(&buf, nil, nil); err != nil {
		t.Fatal(err)
	}
	if p, err := NewPart(buf.Bytes()); err != nil || p.NumExamples() != 0 {
		t.Fatalf("empty part: %v", err)
	}
}

// TestPartLoss: examples with a Loss (chat data) keep it through a part
// file, an example without one in such a file reads back as trained
// throughout, and a bitmap's unused bits must be 0.
func TestPartLoss(t *testing.T) {
	exs, flags := partExamples()
	exs[0].Loss = []bool{false, true, true}
	exs[2].Loss = []bool{true, false}
	exs[3].Loss = []bool{false, false}
	var buf bytes.Buffer
	n, _, err := WritePart(&buf, exs, flags)
	if err != nil {
		t.Fatal(err)
	}
	if n != int64(buf.Len()) || n != 32+16*4+4*8+1 {
		t.Fatalf("size %d, wrote %d, want %d", n, buf.Len(), 32+16*4+4*8+1)
	}
	p, err := NewPart(buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	got, _ := p.AppendExamples(nil, nil, 0)
	want := [][]bool{{false, true, true}, {true}, {true, false}, {false, false}}
	for i := range got {
		if !slices.Equal(got[i].Loss, want[i]) {
			t.Errorf("example %d: loss %v, want %v", i, got[i].Loss, want[i])
		}
	}
	bad := slices.Clone(buf.Bytes())
	bad[len(bad)-1] ^= 0x80 // 8 tokens use every bit of the byte
	if _, err := NewPart(bad); err != nil {
		t.Fatalf("full last byte: %v", err)
	}
	exs[3] = Example{Sample: 7, Tokens: exs[3].Tokens[:1], Loss: exs[3].Loss[:1]} // 7 tokens
	buf.Reset()
	if _, _, err := WritePart(&buf, exs, flags); err != nil {
		t.Fatal(err)
	}
	bad = slices.Clone(buf.Bytes())
	bad[len(bad)-1] |= 0x80
	if _, err := NewPart(bad); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("unused bit set: %v, want ErrCorrupt", err)
	}
	exs[0].Loss = exs[0].Loss[:2]
	if _, _, err := WritePart(&buf, exs, flags); !errors.Is(err, ErrConfig) {
		t.Fatalf("loss of the wrong length: %v, want ErrConfig", err)
	}
}

func TestPartCorrupt(t *testing.T) {
	exs, flags := partExamples()
	var buf bytes.Buffer
	if _, _, err := WritePart(&buf, exs, flags); err != nil {
		t.Fatal(err)
	}
	good := buf.Bytes()
	for _, tc := range []struct {
		name string
		mess func(b []byte) []byte
	}{
		{"truncated", func(b []byte) []byte { return b[:len(b)-1] }},
		{"header only", func(b []byte) []byte { return b[:20] }},
		{"magic", func(b []byte) []byte { b[0] = 'X'; return b }},
		{"version", func(b []byte) []byte { b[8] = 1; return b }},
		{"unknown feature", func(b []byte) []byte { b[12] = 2; return b }},
		{"huge count", func(b []byte) []byte { binary.LittleEndian.PutUint64(b[16:], 1<<62); return b }},
		{"zero length", func(b []byte) []byte { binary.LittleEndian.PutUint32(b[32+8:], 0); return b }},
		{"prompt past length", func(b []byte) []byte { binary.LittleEndian.PutUint32(b[32+12:], 9); return b }},
		{"unknown flag", func(b []byte) []byte { b[32+15] = 0x80; return b }},
		{"samples descend", func(b []byte) []byte { binary.LittleEndian.PutUint64(b[32:], 5); return b }},
		{"lengths", func(b []byte) []byte { binary.LittleEndian.PutUint32(b[32+8:], 4); return b }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := NewPart(tc.mess(slices.Clone(good))); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("got %v, want ErrCorrupt", err)
			}
		})
	}
}

func TestPartManifestValidate(t *testing.T) {
	m := &PartManifest{Format: PartFormatName, Version: PartFormatVersion, Part: 1, Parts: 3,
		Options: PartOptions{Layout: Layout{SeqLen: 16, Mode: ModePad, Labels: LabelsMaskPad}, Ranks: 1, BatchRows: 8},
		Share:   []PartPiece{{File: "a", Size: 10, Off: 2, End: 10, Records: 3, Skipped: 1}}, Records: 3, RecordsSkipped: 1,
		File: PartFileEntry{Path: PartFileName(1, 3), Bytes: 32, SHA256: hex.EncodeToString(make([]byte, 32))}}
	b, err := EncodePartManifest(m)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := DecodePartManifest("m", bytes.NewReader(b)); err != nil {
		t.Fatal(err)
	}
	m.File.Path = "../x.bin"
	b, _ = EncodePartManifest(m)
	if _, err := DecodePartManifest("m", bytes.NewReader(b)); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("bad file name: %v", err)
	}
}

// FuzzPart: a part file parser of untrusted bytes never panics, and what it
// accepts reads back whole.
func FuzzPart(f *testing.F) {
	exs, flags := partExamples()
	var buf bytes.Buffer
	if _, _, err := WritePart(&buf, exs, flags); err != nil {
		f.Fatal(err)
	}
	f.Add(buf.Bytes())
	f.Add(buf.Bytes()[:40])
	f.Add([]byte(PartMagic))
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := NewPart(data)
		if err != nil {
			return
		}
		got, _ := p.AppendExamples(nil, nil, 0)
		var n int
		for _, e := range got {
			n += len(e.Tokens)
		}
		if n != len(p.tokens) {
			t.Fatalf("examples hold %d tokens, the file %d", n, len(p.tokens))
		}
	})
}

// FuzzPartManifest: the part manifest decoder never panics on mutated JSON.
func FuzzPartManifest(f *testing.F) {
	m := &PartManifest{Format: PartFormatName, Version: PartFormatVersion, Part: 0, Parts: 2,
		Options: PartOptions{Layout: Layout{SeqLen: 16, Mode: ModePack, Labels: LabelsMaskPad}, Ranks: 2, BatchRows: 8},
		Share:   []PartPiece{{File: "a.jsonl", Size: 10, Off: 0, End: 4, Format: "jsonl", Records: 1}}, Records: 1,
		File: PartFileEntry{Path: PartFileName(0, 2), Bytes: 48, SHA256: hex.EncodeToString(make([]byte, 32))}}
	b, err := EncodePartManifest(m)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b)
	f.Add([]byte(`{"format":"ferry-part","version":1,"parts":70000}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := DecodePartManifest("fuzz", bytes.NewReader(data))
		if err == nil && (m.Part < 0 || m.Part >= m.Parts || m.File.Path != PartFileName(m.Part, m.Parts)) {
			t.Fatalf("accepted part %d of %d, file %q", m.Part, m.Parts, m.File.Path)
		}
	})
}

// TestParsePartManifestName: the parser reads back exactly the names
// PartManifestName writes.
func TestParsePartManifestName(t *testing.T) {
	for _, tc := range []struct {
		name string
		i, n int
		ok   bool
	}{
		{PartManifestName(0, 1), 0, 1, true},
		{PartManifestName(17, 300), 17, 300, true},
		{PartManifestName(65535, MaxParts), 65535, MaxParts, true},
		{"part-1-of-3.json", 0, 0, false},
		{"part-00001-of-00003.bin", 0, 0, false},
		{"part-00001-of-00003.json.tmp", 0, 0, false},
		{".part-00001-of-00003.json", 0, 0, false},
		{"part--0001-of-00003.json", 0, 0, false},
		{"part-00001-of-00003", 0, 0, false},
	} {
		i, n, ok := ParsePartManifestName(tc.name)
		if i != tc.i || n != tc.n || ok != tc.ok {
			t.Errorf("%q: %d, %d, %v; want %d, %d, %v", tc.name, i, n, ok, tc.i, tc.n, tc.ok)
		}
	}
}

// TestPartOpenFile: a part file of another size, other bytes or other
// counts than its manifest says is refused with ErrMismatch, naming it.
func TestPartOpenFile(t *testing.T) {
	exs, flags := partExamples()
	var buf bytes.Buffer
	size, sum, err := WritePart(&buf, exs, flags)
	if err != nil {
		t.Fatal(err)
	}
	var tokens int64
	for _, e := range exs {
		tokens += int64(len(e.Tokens))
	}
	good := &PartManifest{Records: exs[len(exs)-1].Sample + 1, Examples: int64(len(exs)), Tokens: tokens,
		File: PartFileEntry{Path: PartFileName(0, 1), Bytes: size, SHA256: sum}}
	for _, tc := range []struct {
		name string
		mess func(b []byte, m *PartManifest) []byte
		want string
	}{
		{"whole", func(b []byte, m *PartManifest) []byte { return b }, ""},
		{"truncated", func(b []byte, m *PartManifest) []byte { return b[:len(b)-4] }, "truncated"},
		{"corrupted", func(b []byte, m *PartManifest) []byte { b[len(b)-3] ^= 1; return b }, "SHA-256"},
		{"other counts", func(b []byte, m *PartManifest) []byte { m.Tokens++; return b }, "examples"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := *good
			path := filepath.Join(t.TempDir(), m.File.Path)
			if err := os.WriteFile(path, tc.mess(slices.Clone(buf.Bytes()), &m), 0o644); err != nil {
				t.Fatal(err)
			}
			p, err := m.OpenFile(path)
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				if p.NumExamples() != len(exs) {
					t.Errorf("%d examples, want %d", p.NumExamples(), len(exs))
				}
				p.Close()
				return
			}
			if !errors.Is(err, ErrMismatch) || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), path) {
				t.Fatalf("got %v, want ErrMismatch naming %s and saying %q", err, path, tc.want)
			}
		})
	}
}
