// Package tokgolden reads the tokenizer goldens of testdata/tokenizers: the
// ids HF tokenizers gives for every line of the hard corpus, per family.
//
// Each family has two files:
//
//	corpus-dev.MODEL.nospecial.ids.jsonl.zst  {"ids":[...]} per corpus line, add_special_tokens=False
//	corpus-dev.MODEL.special.jsonl.zst        {"prefix":[...],"suffix":[...]} per line
//
// With add_special_tokens=True HF gives prefix + nospecial ids + suffix for
// that line (the special tokens the post-processor adds). The split is
// lossless: scripts/split-tokenizer-goldens checked every line of every
// family when it wrote the files, and python/tests/unit/test_tokenizer_hf.py
// checks the rebuilt ids against HF tokenizers itself.
package tokgolden

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"github.com/klauspost/compress/zstd"
)

// IDs returns the golden ids of every corpus line for model, with or
// without the special tokens, from the goldens in dir.
func IDs(dir, model string, special bool) ([][]int32, error) {
	base := filepath.Join(dir, "corpus-dev."+model+".nospecial.ids.jsonl.zst")
	ids, err := readLines(base, func(line []byte, out [][]int32) ([][]int32, error) {
		v, err := field(line, `{"ids":[`, `]}`)
		return append(out, v), err
	})
	if err != nil || !special {
		return ids, err
	}
	i := 0
	name := filepath.Join(dir, "corpus-dev."+model+".special.jsonl.zst")
	_, err = readLines(name, func(line []byte, out [][]int32) ([][]int32, error) {
		pre, rest, ok := bytes.Cut(line, []byte(`],"suffix":[`))
		if !ok {
			return nil, fmt.Errorf(`not {"prefix":[...],"suffix":[...]}`)
		}
		p, err := field(append(pre, ']', '}'), `{"prefix":[`, `]}`)
		if err != nil {
			return nil, err
		}
		s, err := field(rest, "", `]}`)
		if err != nil {
			return nil, err
		}
		if i >= len(ids) {
			return nil, fmt.Errorf("more lines than %s", filepath.Base(base))
		}
		ids[i] = append(append(p, ids[i]...), s...)
		i++
		return out, nil
	})
	if err == nil && i != len(ids) {
		err = fmt.Errorf("%s: %d lines, %s has %d", name, i, filepath.Base(base), len(ids))
	}
	return ids, err
}

func readLines(path string, each func([]byte, [][]int32) ([][]int32, error)) ([][]int32, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	d, err := zstd.NewReader(f, zstd.WithDecoderConcurrency(1))
	if err != nil {
		return nil, err
	}
	defer d.Close()
	sc := bufio.NewScanner(d)
	sc.Buffer(nil, 64<<20)
	var out [][]int32
	for n := 1; sc.Scan(); n++ {
		if out, err = each(sc.Bytes(), out); err != nil {
			return nil, fmt.Errorf("%s: line %d: %v", path, n, err)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %v", path, err)
	}
	return out, nil
}

// field parses prefix + comma-separated ints + suffix, by hand: encoding/json
// is slow under -race.
func field(line []byte, prefix, suffix string) ([]int32, error) {
	body, ok := bytes.CutPrefix(line, []byte(prefix))
	body, ok2 := bytes.CutSuffix(body, []byte(suffix))
	if !ok || !ok2 {
		return nil, fmt.Errorf("not %s...%s", prefix, suffix)
	}
	ids := []int32{}
	for len(body) > 0 {
		num, rest, _ := bytes.Cut(body, []byte(","))
		v, err := strconv.ParseInt(string(num), 10, 32)
		if err != nil {
			return nil, err
		}
		ids = append(ids, int32(v))
		body = rest
	}
	return ids, nil
}
