package dataset

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestExpand(t *testing.T) {
	dir := t.TempDir()
	for _, n := range []string{"train-00001-of-00002.parquet", "train-00000-of-00002.parquet", "test-00000-of-00001.parquet", "notes.txt"} {
		if err := os.WriteFile(filepath.Join(dir, n), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ctx := context.Background()
	j := func(n string) string { return filepath.Join(dir, n) }
	got, err := Expand(ctx, []string{j("train-*.parquet"), j("notes.txt")})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{j("train-00000-of-00002.parquet"), j("train-00001-of-00002.parquet"), j("notes.txt")}
	if !slices.Equal(got, want) {
		t.Fatalf("Expand = %v, want %v (globs sorted, patterns in the order given)", got, want)
	}
	// A name without metacharacters is passed on as is (Read reports a missing file).
	if got, err := Expand(ctx, []string{j("missing.json")}); err != nil || !slices.Equal(got, []string{j("missing.json")}) {
		t.Fatalf("plain name: %v, %v", got, err)
	}
	for _, tc := range []struct {
		patterns []string
		is       error
		msg      string
	}{
		{[]string{j("validation-*.parquet")}, ErrNoMatch, "validation-*.parquet"},
		{[]string{j("train-*.parquet"), j("train-00000-of-00002.parquet")}, nil, "already named by"},
		{[]string{j("[train")}, filepath.ErrBadPattern, "[train"},
	} {
		_, err := Expand(ctx, tc.patterns)
		if err == nil || (tc.is != nil && !errors.Is(err, tc.is)) || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("Expand(%v) = %v, want an error (%v) naming %q", tc.patterns, err, tc.is, tc.msg)
		}
	}
}

// TestReadFiles: several files in several formats read as one input; the
// sample indices run on across files, skipped records included, and errors
// name the file and its own record index.
func TestReadFiles(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, data []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	a := write("a.json", []byte(`[{"instruction":"a0","output":"x"},{"instruction":"a1","output":"x"}]`))
	b := write("b.jsonl", []byte("{\"instruction\":\"b0\",\"output\":\"x\"}\n{\"instruction\":7}\n{\"instruction\":\"b2\",\"output\":\"x\"}\n"))
	c := write("c.parquet", writeParquet(t, []map[string]string{{"instruction": "c0", "output": "x"}}, false))
	ctx := context.Background()
	skip := Options{OnBad: func(*RecordError) error { return nil }}
	res, err := ReadFiles(ctx, []string{a, b, c}, skip)
	if err != nil {
		t.Fatal(err)
	}
	var ins []string
	for _, r := range res.Records {
		ins = append(ins, r.Instruction)
	}
	if !slices.Equal(ins, []string{"a0", "a1", "b0", "b2", "c0"}) || !slices.Equal(res.Samples, []int64{0, 1, 2, 4, 5}) {
		t.Fatalf("records %v samples %v", ins, res.Samples)
	}
	if res.Skipped != 1 || res.Format != "json+jsonl+parquet" {
		t.Fatalf("skipped %d format %q", res.Skipped, res.Format)
	}
	var sizes int64
	for _, p := range []string{a, b, c} {
		st, _ := os.Stat(p)
		sizes += st.Size()
	}
	if res.RawBytes != sizes {
		t.Fatalf("raw bytes %d, files hold %d", res.RawBytes, sizes)
	}
	// Head: the first n records by index (split="train[:n]"), skipped ones counted.
	h := *res
	if err := h.Head(4, "abc"); err != nil || len(h.Records) != 3 || h.Records[2].Instruction != "b0" || h.Skipped != 1 {
		t.Fatalf("Head(4): %v, %d records, skipped %d", err, len(h.Records), h.Skipped)
	}
	h = *res
	if err := h.Head(7, "abc"); !errors.Is(err, ErrLimit) || !strings.Contains(err.Error(), "abc has only 6 records") {
		t.Fatalf("Head(7) of 6: %v", err)
	}
	_, err = ReadFiles(ctx, []string{a, b, c}, Options{})
	var re *RecordError
	if !errors.As(err, &re) || re.File != b || re.Index != 1 || !strings.Contains(err.Error(), "b.jsonl: record 1") {
		t.Fatalf("bad record: %v, want a RecordError naming %s record 1", err, b)
	}
}
