package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// stTensor is one tensor of a safetensors file.
type stTensor struct {
	file   string
	dtype  string
	shape  []int64
	sha256 [32]byte
}

// maxSTHeader bounds a safetensors header (the format's own limit is 100 MB).
const maxSTHeader = 100 << 20

// readSafetensorsDir reads every *.safetensors file in dir and returns its
// tensors by name, with a checksum of each tensor's bytes.
func readSafetensorsDir(dir string) (map[string]stTensor, error) {
	paths, err := filepath.Glob(filepath.Join(dir, "*.safetensors"))
	if err != nil {
		return nil, err
	}
	if len(paths) == 0 {
		return nil, fmt.Errorf("%s: no .safetensors file", dir)
	}
	out := map[string]stTensor{}
	for _, p := range paths {
		if err := readSafetensors(p, out); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func readSafetensors(path string, out map[string]stTensor) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	var n8 [8]byte
	if _, err := io.ReadFull(f, n8[:]); err != nil {
		return fmt.Errorf("%s: header length: %w", path, err)
	}
	hlen := binary.LittleEndian.Uint64(n8[:])
	if hlen > maxSTHeader || int64(hlen) > fi.Size()-8 {
		return fmt.Errorf("%s: header of %d bytes in a file of %d", path, hlen, fi.Size())
	}
	hdr := make([]byte, hlen)
	if _, err := io.ReadFull(f, hdr); err != nil {
		return fmt.Errorf("%s: header: %w", path, err)
	}
	var entries map[string]json.RawMessage
	if err := json.Unmarshal(bytes.TrimRight(hdr, " "), &entries); err != nil {
		return fmt.Errorf("%s: header: %w", path, err)
	}
	base := int64(8 + hlen)
	dataLen := fi.Size() - base
	names := make([]string, 0, len(entries))
	for k := range entries {
		if k != "__metadata__" {
			names = append(names, k)
		}
	}
	sort.Strings(names)
	for _, name := range names {
		var e struct {
			Dtype       string   `json:"dtype"`
			Shape       []int64  `json:"shape"`
			DataOffsets [2]int64 `json:"data_offsets"`
		}
		if err := json.Unmarshal(entries[name], &e); err != nil {
			return fmt.Errorf("%s: tensor %q: %w", path, name, err)
		}
		lo, hi := e.DataOffsets[0], e.DataOffsets[1]
		if lo < 0 || hi < lo || hi > dataLen {
			return fmt.Errorf("%s: tensor %q: data [%d, %d) outside the %d data bytes", path, name, lo, hi, dataLen)
		}
		if _, dup := out[name]; dup {
			return fmt.Errorf("%s: tensor %q is also in %s", path, name, out[name].file)
		}
		h := sha256.New()
		if _, err := io.Copy(h, io.NewSectionReader(f, base+lo, hi-lo)); err != nil {
			return fmt.Errorf("%s: tensor %q: %w", path, name, err)
		}
		t := stTensor{file: filepath.Base(path), dtype: e.Dtype, shape: e.Shape}
		copy(t.sha256[:], h.Sum(nil))
		out[name] = t
	}
	return nil
}

// compareSafetensors checks that ferry's output directory holds exactly the
// tensors of the anchor's (names, dtypes, shapes and bytes), however the
// two split them into files.
func compareSafetensors(ferryDir, anchorDir string) (string, error) {
	a, err := readSafetensorsDir(ferryDir)
	if err != nil {
		return "", err
	}
	b, err := readSafetensorsDir(anchorDir)
	if err != nil {
		return "", err
	}
	var problems []string
	for name, tb := range b {
		ta, ok := a[name]
		switch {
		case !ok:
			problems = append(problems, fmt.Sprintf("%q missing", name))
		case ta.dtype != tb.dtype || fmt.Sprint(ta.shape) != fmt.Sprint(tb.shape):
			problems = append(problems, fmt.Sprintf("%q is %s%v, PyTorch's is %s%v", name, ta.dtype, ta.shape, tb.dtype, tb.shape))
		case ta.sha256 != tb.sha256:
			problems = append(problems, fmt.Sprintf("%q bytes differ", name))
		}
	}
	for name := range a {
		if _, ok := b[name]; !ok {
			problems = append(problems, fmt.Sprintf("%q not in PyTorch's output", name))
		}
	}
	if len(problems) > 0 {
		sort.Strings(problems)
		msg := fmt.Sprintf("%d of %d tensors differ from PyTorch's: %s", len(problems), len(b), strings.Join(problems[:min(5, len(problems))], "; "))
		return msg, fmt.Errorf("%s", msg)
	}
	files := map[string]bool{}
	for _, t := range a {
		files[t.file] = true
	}
	return fmt.Sprintf("all %d tensors identical to PyTorch's (names, dtypes, shapes, bytes; ferry wrote %d file(s))", len(b), len(files)), nil
}
