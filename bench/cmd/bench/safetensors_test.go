package main

import (
	"encoding/binary"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

type stIn struct {
	dtype string
	shape []int64
	data  []byte
}

func writeST(t *testing.T, path string, tensors map[string]stIn, order []string) {
	t.Helper()
	hdr := map[string]any{"__metadata__": map[string]string{"format": "pt"}}
	var data []byte
	for _, name := range order {
		in := tensors[name]
		hdr[name] = map[string]any{"dtype": in.dtype, "shape": in.shape, "data_offsets": []int{len(data), len(data) + len(in.data)}}
		data = append(data, in.data...)
	}
	h, _ := json.Marshal(hdr)
	for len(h)%8 != 0 {
		h = append(h, ' ')
	}
	var n [8]byte
	binary.LittleEndian.PutUint64(n[:], uint64(len(h)))
	b := append(append(n[:], h...), data...)
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestCompareSafetensors(t *testing.T) {
	ts := map[string]stIn{
		"a.weight": {"BF16", []int64{2, 2}, []byte{1, 2, 3, 4, 5, 6, 7, 8}},
		"b.bias":   {"F32", []int64{1}, []byte{9, 9, 9, 9}},
		"c":        {"I64", []int64{}, []byte{1, 0, 0, 0, 0, 0, 0, 0}},
	}
	torchDir, ferryDir := t.TempDir(), t.TempDir()
	writeST(t, filepath.Join(torchDir, "model.safetensors"), ts, []string{"b.bias", "a.weight", "c"})
	// ferry splits the same tensors over two files, in another order.
	writeST(t, filepath.Join(ferryDir, "model-00001-of-00002.safetensors"), ts, []string{"a.weight"})
	writeST(t, filepath.Join(ferryDir, "model-00002-of-00002.safetensors"), ts, []string{"c", "b.bias"})
	msg, err := compareSafetensors(ferryDir, torchDir)
	if err != nil || !strings.Contains(msg, "all 3 tensors identical") || !strings.Contains(msg, "2 file(s)") {
		t.Fatalf("identical: %q, %v", msg, err)
	}

	for name, mod := range map[string]func(map[string]stIn){
		"bytes":   func(m map[string]stIn) { m["a.weight"] = stIn{"BF16", []int64{2, 2}, []byte{1, 2, 3, 4, 5, 6, 7, 0}} },
		"dtype":   func(m map[string]stIn) { m["b.bias"] = stIn{"I32", []int64{1}, []byte{9, 9, 9, 9}} },
		"shape":   func(m map[string]stIn) { m["a.weight"] = stIn{"BF16", []int64{4}, []byte{1, 2, 3, 4, 5, 6, 7, 8}} },
		"missing": func(m map[string]stIn) { delete(m, "c") },
		"extra":   func(m map[string]stIn) { m["d"] = stIn{"U8", []int64{1}, []byte{1}} },
	} {
		t.Run(name, func(t *testing.T) {
			m := map[string]stIn{}
			for k, v := range ts {
				m[k] = v
			}
			mod(m)
			var order []string
			for k := range m {
				order = append(order, k)
			}
			dir := t.TempDir()
			writeST(t, filepath.Join(dir, "model.safetensors"), m, order)
			if msg, err := compareSafetensors(dir, torchDir); err == nil {
				t.Errorf("difference not found: %q", msg)
			}
		})
	}
}

func TestReadSafetensorsCorrupt(t *testing.T) {
	for name, b := range map[string][]byte{
		"short":        {1, 2, 3},
		"huge header":  {0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0, '{', '}'},
		"bad json":     append([]byte{2, 0, 0, 0, 0, 0, 0, 0}, '{', '['),
		"out of range": append([]byte{52, 0, 0, 0, 0, 0, 0, 0}, []byte(`{"x":{"dtype":"U8","shape":[9],"data_offsets":[0,9]}}`)...),
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			os.WriteFile(filepath.Join(dir, "m.safetensors"), b, 0o644)
			if _, err := readSafetensorsDir(dir); err == nil {
				t.Error("corrupt file accepted")
			}
		})
	}
	if _, err := readSafetensorsDir(t.TempDir()); err == nil {
		t.Error("empty directory accepted")
	}
}
