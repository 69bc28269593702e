package ckpt

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// copyFixture copies a fixture directory into a temporary directory.
func copyFixture(t *testing.T, rel string) string {
	t.Helper()
	src := filepath.Join(fixtureRoot, rel)
	dst := t.TempDir()
	ents, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dst, e.Name()), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dst
}

func TestOpenRejectsBadCheckpoints(t *testing.T) {
	replaceIn := func(name, old, new string) func(t *testing.T, dir string) {
		return func(t *testing.T, dir string) {
			p := filepath.Join(dir, name)
			b, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Contains(b, []byte(old)) {
				t.Fatalf("%s has no %q", name, old)
			}
			if err := os.WriteFile(p, bytes.ReplaceAll(b, []byte(old), []byte(new)), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	tests := []struct {
		name    string
		fixture string
		mess    func(t *testing.T, dir string)
		wantErr error
		want    []string // substrings of the message
	}{
		{"relative path leaves the directory", "torch-1.13/fsdp1-bf16-ws4", replaceIn(".metadata", "__3_0.distcp", "../_0.distcp"),
			ErrUnsafePath, []string{"../_0.distcp"}},
		{"absolute relative path", "torch-1.13/fsdp1-bf16-ws4", replaceIn(".metadata", "__3_0.distcp", "/etc/passwdx"),
			ErrUnsafePath, []string{"/etc/passwdx"}},
		{"item past end of file", "torch-1.13/fsdp1-bf16-ws4", func(t *testing.T, dir string) {
			if err := os.Truncate(filepath.Join(dir, "__3_0.distcp"), 25000); err != nil {
				t.Fatal(err)
			}
		}, ErrCorrupt, []string{"__3_0.distcp", "past end of the 25000-byte file", `item "lm_head.weight"`}},
		{"missing data file", "torch-1.13/fsdp1-bf16-ws4", func(t *testing.T, dir string) {
			os.Remove(filepath.Join(dir, "__2_0.distcp"))
		}, fs.ErrNotExist, []string{"__2_0.distcp"}},
		{"blob is not a zip", "torch-1.13/fsdp1-bf16-ws2", replaceIn("__1_4.distcp", "PK\x03\x04", "XX\x03\x04"),
			ErrCorrupt, []string{"__1_4.distcp", "tensor", "chunk", "not a torch.save archive"}},
		{"blob data.pkl damaged", "torch-1.13/fsdp1-bf16-ws2", replaceIn("__0_3.distcp", "_rebuild_tensor_v2", "_rebuild_tensor_xx"),
			ErrCorrupt, []string{"__0_3.distcp", "data.pkl", `tensor "model.layers.0.self_attn.v_proj.weight"`}},
		{"metadata not a pickle", "torch-1.13/fsdp1-bf16-ws2", func(t *testing.T, dir string) {
			os.WriteFile(filepath.Join(dir, ".metadata"), []byte("not a pickle"), 0o644)
		}, ErrCorrupt, []string{".metadata"}},
		{"metadata truncated", "torch-1.13/mixed-ws4", func(t *testing.T, dir string) {
			os.Truncate(filepath.Join(dir, ".metadata"), 5000)
		}, ErrCorrupt, []string{".metadata"}},
		{"no checkpoint", "torch-1.13/fsdp1-bf16-ws2", func(t *testing.T, dir string) {
			ents, _ := os.ReadDir(dir)
			for _, e := range ents {
				os.Remove(filepath.Join(dir, e.Name()))
			}
		}, ErrNotCheckpoint, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := copyFixture(t, tt.fixture)
			tt.mess(t, dir)
			ck, err := OpenDir(context.Background(), dir)
			if err == nil {
				ck.Close()
				t.Fatalf("Open succeeded, want %v", tt.wantErr)
			}
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("err = %v, want %v", err, tt.wantErr)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}

func TestCheckCoverage(t *testing.T) {
	ch := func(off, size []int64) Chunk {
		return Chunk{Offsets: off, Sizes: size, Loc: Location{File: "__0_0.distcp"}}
	}
	tests := []struct {
		name    string
		shape   []int64
		chunks  []Chunk
		wantErr error
		want    string
	}{
		{"dim0 tiles", []int64{5, 3}, []Chunk{ch([]int64{3, 0}, []int64{2, 3}), ch([]int64{0, 0}, []int64{3, 3})}, nil, ""},
		{"2-D mesh tiles", []int64{4, 4}, []Chunk{ch([]int64{0, 0}, []int64{2, 2}), ch([]int64{0, 2}, []int64{2, 2}),
			ch([]int64{2, 0}, []int64{2, 2}), ch([]int64{2, 2}, []int64{2, 2})}, nil, ""},
		{"zero-size chunk at the end is skipped", []int64{2, 3}, []Chunk{ch([]int64{0, 0}, []int64{2, 3}), ch([]int64{2, 0}, []int64{0, 3})}, nil, ""},
		{"0-dim", []int64{}, []Chunk{ch([]int64{}, []int64{})}, nil, ""},
		{"empty tensor, no chunks", []int64{0, 4}, nil, nil, ""},
		{"outside", []int64{5, 3}, []Chunk{ch([]int64{0, 0}, []int64{3, 3}), ch([]int64{3, 0}, []int64{3, 3})},
			ErrCorrupt, `tensor "t" [5,3] chunk 1 [3:6, 0:3] (file __0_0.distcp) lies outside`},
		{"negative offset", []int64{5, 3}, []Chunk{ch([]int64{-1, 0}, []int64{3, 3})}, ErrCorrupt, "lies outside"},
		{"overlap", []int64{5, 3}, []Chunk{ch([]int64{0, 0}, []int64{3, 3}), ch([]int64{2, 0}, []int64{3, 3})},
			ErrCorrupt, "chunk 1 [2:5, 0:3] (file __0_0.distcp) overlaps chunk 0 [0:3, 0:3]"},
		{"overlap in dim 1", []int64{2, 4}, []Chunk{ch([]int64{0, 0}, []int64{2, 3}), ch([]int64{0, 2}, []int64{2, 2})},
			ErrCorrupt, "overlaps"},
		{"duplicate 0-dim", []int64{}, []Chunk{ch([]int64{}, []int64{}), ch([]int64{}, []int64{})}, ErrCorrupt, "overlaps"},
		{"gap", []int64{5, 3}, []Chunk{ch([]int64{0, 0}, []int64{2, 3}), ch([]int64{3, 0}, []int64{2, 3})},
			ErrCorrupt, "chunks cover 12 of 15 elements"},
		{"no chunks", []int64{2}, nil, ErrCorrupt, "cover 0 of 2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := checkCoverage(&Item{Key: "t", Shape: tt.shape, DType: BF16, Chunks: tt.chunks})
			if !errors.Is(err, tt.wantErr) || (tt.wantErr == nil) != (err == nil) {
				t.Fatalf("err = %v, want %v", err, tt.wantErr)
			}
			if err != nil && !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %q does not contain %q", err, tt.want)
			}
		})
	}
}

func stFile(header string, data int) []byte {
	b := binary.LittleEndian.AppendUint64(nil, uint64(len(header)))
	b = append(b, header...)
	return append(b, make([]byte, data)...)
}

func TestParseSafetensorsHeader(t *testing.T) {
	tests := []struct {
		name    string
		file    []byte
		wantErr error
	}{
		{"ok", stFile(`{"__metadata__":{"format":"pt"},"a":{"dtype":"BF16","shape":[2],"data_offsets":[0,4]},"b":{"dtype":"F32","shape":[],"data_offsets":[4,8]}}`, 8), nil},
		{"ok padded", stFile(`{"a":{"dtype":"U8","shape":[0],"data_offsets":[0,0]}}    `, 0), nil},
		{"too short", []byte{1, 2, 3}, ErrCorrupt},
		{"header past end", stFile(`{}`, 0)[:9], ErrCorrupt},
		{"header above limit", binary.LittleEndian.AppendUint64(nil, MaxHeaderSize+1), ErrLimit},
		{"not json", stFile(`{"a":`, 0), ErrCorrupt},
		{"not an object", stFile(`[1,2]`, 0), ErrCorrupt},
		{"trailing data", stFile(`{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}`, 2), ErrCorrupt},
		{"hole", stFile(`{"a":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}}`, 2), ErrCorrupt},
		{"overlap", stFile(`{"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},"b":{"dtype":"U8","shape":[2],"data_offsets":[1,3]}}`, 3), ErrCorrupt},
		{"size mismatch", stFile(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}}`, 4), ErrCorrupt},
		{"past data", stFile(`{"a":{"dtype":"U8","shape":[8],"data_offsets":[0,8]}}`, 4), ErrCorrupt},
		{"unknown dtype", stFile(`{"a":{"dtype":"Q7","shape":[1],"data_offsets":[0,1]}}`, 1), ErrUnsupported},
		{"negative shape", stFile(`{"a":{"dtype":"U8","shape":[-1],"data_offsets":[0,0]}}`, 0), ErrCorrupt},
		{"huge shape", stFile(`{"a":{"dtype":"U8","shape":[4294967296,4294967296],"data_offsets":[0,0]}}`, 0), ErrCorrupt},
		{"bad metadata", stFile(`{"__metadata__":{"x":1}}`, 0), ErrCorrupt},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseSafetensorsHeader(bytes.NewReader(tt.file), int64(len(tt.file)), "x.safetensors")
			if !errors.Is(err, tt.wantErr) || (tt.wantErr == nil) != (err == nil) {
				t.Fatalf("err = %v, want %v", err, tt.wantErr)
			}
		})
	}
}

func TestParseMetadataRejects(t *testing.T) {
	tests := []struct {
		name string
		data []byte
	}{
		{"empty", nil},
		{"int", []byte("\x80\x04K\x05.")},
		{"no stop", []byte("\x80\x04K\x05")},
		{"frame past end", []byte("\x80\x04\x95\xff\xff\xff\xff\x00\x00\x00\x00K\x05.")},
		{"huge unicode", []byte("\x80\x04\x8d\xff\xff\xff\xff\xff\xff\xff\x7f.")},
		{"unknown opcode", []byte("\x80\x04\xff.")},
		{"empty long", []byte("\x80\x04\x8a\x00.")},
		{"stack underflow", []byte("\x80\x04R.")},
		{"odd setitems", []byte("\x80\x04}(K\x01u.")},
		{"global without module", []byte("\x80\x04\x93.")},
		{"reduce on int", []byte("\x80\x04K\x01)R.")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := ParseMetadata(tt.data, "m"); !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrUnsupported) {
				t.Fatalf("err = %v, want ErrCorrupt", err)
			}
		})
	}
}

// TestPickleIsInert checks that a pickle calling os.system and other
// callables only yields inert values.
func TestPickleIsInert(t *testing.T) {
	// cos\nsystem\n(S'touch /tmp/pwned'\ntR.
	data := []byte("cos\nsystem\n(S'touch /tmp/ferry-pwned'\ntR.")
	v, err := unpickle(data, "evil")
	if err != nil {
		t.Fatal(err)
	}
	o, ok := v.(*pyObject)
	if !ok || o.Class.String() != "os.system" || len(o.Args) != 1 {
		t.Fatalf("got %#v, want an inert os.system call record", v)
	}
	if _, err := os.Stat("/tmp/ferry-pwned"); err == nil {
		t.Fatal("the pickle ran a command")
	}
	if _, err := ParseMetadata(data, "evil"); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("ParseMetadata(evil) = %v, want ErrCorrupt", err)
	}
}

func TestCheckRelPath(t *testing.T) {
	for _, p := range []string{"__0_0.distcp", "sub/__0_0.distcp"} {
		if err := CheckRelPath(p); err != nil {
			t.Errorf("CheckRelPath(%q) = %v", p, err)
		}
	}
	for _, p := range []string{"", ".", "..", "../x", "a/../../x", "/abs", `a\b`, "a//b", "./a", "a\x00b"} {
		if err := CheckRelPath(p); !errors.Is(err, ErrUnsafePath) {
			t.Errorf("CheckRelPath(%q) = %v, want ErrUnsafePath", p, err)
		}
	}
}

func TestSymlinkCannotEscape(t *testing.T) {
	dir := copyFixture(t, "torch-1.13/fsdp1-bf16-ws4")
	outside := filepath.Join(t.TempDir(), "secret")
	b, _ := os.ReadFile(filepath.Join(dir, "__3_0.distcp"))
	os.WriteFile(outside, b, 0o644)
	os.Remove(filepath.Join(dir, "__3_0.distcp"))
	if err := os.Symlink(outside, filepath.Join(dir, "__3_0.distcp")); err != nil {
		t.Skip("symlinks not supported:", err)
	}
	_, err := OpenDir(context.Background(), dir)
	if err == nil || !errors.Is(err, ErrUnsafePath) {
		t.Fatalf("err = %v, want ErrUnsafePath", err)
	}
}
