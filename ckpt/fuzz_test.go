package ckpt

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

func addFiles(f *testing.F, pattern string, limit int) {
	paths, _ := filepath.Glob(pattern)
	for i, p := range paths {
		if i == limit {
			break
		}
		if b, err := os.ReadFile(p); err == nil {
			f.Add(b)
		}
	}
}

// FuzzParseMetadata: the .metadata pickle decoder never panics, never
// allocates beyond its input, and returns either a Metadata or an error.
func FuzzParseMetadata(f *testing.F) {
	addFiles(f, filepath.Join(fixtureRoot, "*", ".metadata"), 10)
	addFiles(f, filepath.Join(fixtureRoot, "*", "*", ".metadata"), 10)
	addFiles(f, filepath.Join("testdata", "*.metadata"), 4) // real torch 2.15
	f.Fuzz(func(t *testing.T, data []byte) {
		md, err := ParseMetadata(data, "fuzz")
		if err != nil {
			return
		}
		for _, it := range md.Items {
			if it.Kind == KindTensor && len(it.Shape) > maxDims {
				t.Fatalf("%q: %d dims", it.Key, len(it.Shape))
			}
			for _, ch := range it.Chunks {
				if CheckRelPath(ch.Loc.File) != nil {
					t.Fatalf("unsafe path %q accepted", ch.Loc.File)
				}
			}
		}
	})
}

// FuzzReadTensorBlob: the torch.save archive reader never panics and only
// returns data ranges inside the archive.
func FuzzReadTensorBlob(f *testing.F) {
	addFiles(f, filepath.Join(fixtureRoot, "torch-1.13", "fsdp1-bf16-ws2", "__0_1*.distcp"), 6)
	addFiles(f, filepath.Join(fixtureRoot, "torch-1.13", "mixed-ws4", "__0_0.distcp"), 1)
	// torch 2.6: many blobs back to back (the reader sees the last one's
	// central directory behind the others' bytes)
	addFiles(f, filepath.Join(fixtureRoot, "torch26-fsdp2tp-bf16-2x2", "__0_0.distcp"), 1)
	f.Fuzz(func(t *testing.T, data []byte) {
		tb, err := ReadTensorBlob(bytes.NewReader(data), int64(len(data)), "fuzz")
		if err != nil {
			return
		}
		if tb.DataOffset < 0 || tb.DataLength < 0 || tb.DataOffset+tb.DataLength > int64(len(data)) {
			t.Fatalf("data range [%d,+%d) outside %d bytes", tb.DataOffset, tb.DataLength, len(data))
		}
	})
}

// FuzzSafetensorsHeader: the header parser never panics, accepted headers
// tile the data section exactly, and the prefix mode (a blob followed by
// other bytes) accepts what the whole-file mode accepts, with the same
// tensors, and tiles its own data section.
func FuzzSafetensorsHeader(f *testing.F) {
	addFiles(f, filepath.Join(fixtureRoot, "*", "*", "expected.safetensors"), 3)
	addFiles(f, filepath.Join(fixtureRoot, "hf-sharded-ws4", "shard-*.safetensors"), 2)
	f.Add(stFile(`{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}`, 1))
	f.Fuzz(func(t *testing.T, data []byte) {
		p, perr := ParseSafetensorsPrefix(bytes.NewReader(data), int64(len(data)), "fuzz")
		if perr == nil {
			var at int64
			for _, tt := range p.Tensors {
				if tt.Begin != at {
					t.Fatalf("prefix: hole or overlap at %d", at)
				}
				at = tt.End
			}
			if at != p.DataSize || p.DataOffset+p.DataSize > int64(len(data)) {
				t.Fatalf("prefix: data ends at %d, section %d, %d bytes", at, p.DataSize, len(data))
			}
		}
		h, err := ParseSafetensorsHeader(bytes.NewReader(data), int64(len(data)), "fuzz")
		if err != nil {
			return
		}
		if perr != nil || len(p.Tensors) != len(h.Tensors) || p.DataSize != h.DataSize {
			t.Fatalf("whole file accepted, prefix: %v", perr)
		}
		var at int64
		for _, tt := range h.Tensors {
			if tt.Begin != at {
				t.Fatalf("hole or overlap at %d", at)
			}
			at = tt.End
		}
		if h.DataOffset+at != int64(len(data)) {
			t.Fatalf("data ends at %d, file has %d bytes", h.DataOffset+at, len(data))
		}
	})
}
