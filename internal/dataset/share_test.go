package dataset

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/klauspost/compress/gzip"
)

// TestShare: for any number of parts, the shares tile the files in order,
// only plain JSON Lines files are cut inside, and reading every share gives
// the records ReadFiles gives, numbered the same once offset.
func TestShare(t *testing.T) {
	dir := t.TempDir()
	var lines bytes.Buffer
	for i := range 300 {
		fmt.Fprintf(&lines, `{"instruction": "do %d", "output": "%s"}`+"\n", i, strings.Repeat("x", i%37))
		if i%50 == 3 {
			lines.WriteString("\n  \n") // blank lines
		}
	}
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write(lines.Bytes())
	zw.Close()
	array := `[{"instruction": "a", "output": "b"}, {"instruction": "c", "output": "d"}]`
	files := map[string][]byte{
		"0.jsonl": lines.Bytes(), "1.json": []byte(array), "2.jsonl.gz": gz.Bytes(), "3.jsonl": lines.Bytes()[:bytes.IndexByte(lines.Bytes()[2000:], '\n')+2001],
	}
	var locs []string
	for _, name := range []string{"0.jsonl", "1.json", "2.jsonl.gz", "3.jsonl"} {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, files[name], 0o644); err != nil {
			t.Fatal(err)
		}
		locs = append(locs, p)
	}
	ctx := context.Background()
	want, err := ReadFiles(ctx, locs, Options{})
	if err != nil {
		t.Fatal(err)
	}
	for n := 1; n <= 9; n++ {
		var recs []Record
		var samples []int64
		var base int64
		fi, pos := 0, int64(0)
		for part := range n {
			pieces, sizes, err := Share(ctx, locs, part, n)
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range pieces {
				if p.File != locs[fi] || p.Off != pos || p.Size != sizes[fi] {
					t.Fatalf("n=%d part %d: piece %+v, want %s from byte %d", n, part, p, locs[fi], pos)
				}
				if !p.Whole() && !strings.HasSuffix(p.File, ".jsonl") {
					t.Fatalf("n=%d: %s cut at [%d, %d)", n, p.File, p.Off, p.End)
				}
				pos = p.End
				if pos == p.Size {
					fi, pos = fi+1, 0
				}
			}
			res, per, err := ReadPieces(ctx, pieces, Options{})
			if err != nil {
				t.Fatalf("n=%d part %d: %v", n, part, err)
			}
			recs = append(recs, res.Records...)
			for _, s := range res.Samples {
				samples = append(samples, base+s)
			}
			for _, p := range per {
				base += p.Records
			}
		}
		if fi != len(locs) {
			t.Fatalf("n=%d: the shares end in file %d", n, fi)
		}
		if !reflect.DeepEqual(recs, want.Records) || !reflect.DeepEqual(samples, want.Samples) {
			t.Fatalf("n=%d: %d records, want %d", n, len(recs), len(want.Records))
		}
	}
}

// TestReadRangeCrossing: a range whose last (malformed) record runs past
// its end fails with ErrSplit instead of reading differently from a whole
// read.
func TestReadRangeCrossing(t *testing.T) {
	data := `{"instruction": "a", "output": "b"}` + "\n" +
		`{"instruction": "a", "output": {"x": 1}` + "\n" + // unterminated: a whole read skips the next line with it
		`{"instruction": "c", "output": "d"}` + "\n"
	p := filepath.Join(t.TempDir(), "x.jsonl")
	if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	cut := int64(strings.LastIndex(data[:len(data)-1], "\n") + 1)
	skip := Options{OnBad: func(*RecordError) error { return nil }}
	whole, err := Read(context.Background(), p, skip)
	if err != nil || len(whole.Records) != 1 {
		t.Fatalf("whole read: %v, %d records", err, len(whole.Records))
	}
	size := int64(len(data))
	_, _, err = ReadPieces(context.Background(), []Piece{{File: p, Size: size, Off: 0, End: cut}}, skip)
	if !errors.Is(err, ErrSplit) {
		t.Fatalf("range crossing a record: %v, want ErrSplit", err)
	}
	// (isBoundary takes that newline for a boundary: the line before ends
	// with '}', though inside a record. The lookahead check catches it.)
	res, _, err := ReadPieces(context.Background(), []Piece{{File: p, Size: size, Off: cut, End: size}}, skip)
	if err != nil || len(res.Records) != 1 {
		t.Fatalf("last range: %v", err)
	}
}

func TestIsBoundary(t *testing.T) {
	for _, tc := range []struct {
		s    string
		i    int
		want bool
	}{
		{"{}\n{}", 3, true},
		{"{} \r\n \n {}", 5, true},
		{"{} \r\n \n {}", 7, true},
		{"{}\n{}", 2, false},
		{"{},\n{}", 4, false},
		{"{}\n,{}", 3, false},
		{"{}\n" + strings.Repeat(" ", maxBlank+1) + "{}", 3, false},
	} {
		if got := isBoundary([]byte(tc.s), tc.i); got != tc.want {
			t.Errorf("isBoundary(%q, %d) = %v", tc.s, tc.i, got)
		}
	}
}

// FuzzParseRange: reading a JSON Lines input as two byte ranges cut where
// Share may cut (isBoundary) gives the records (and skipped lines) of one
// whole read, unless the first range reports ErrSplit; it never panics.
func FuzzParseRange(f *testing.F) {
	f.Add([]byte("{\"instruction\": \"a\", \"output\": \"b\"}\n\n  \n{\"instruction\": \"c\", \"output\": \"d\"}\n"), uint16(1))
	f.Add([]byte("{\"instruction\": \"a\", \"output\": {\"x\": 1}\n{\"instruction\": \"c\", \"output\": \"d\"}\n{\"instruction\": 3}\n"), uint16(1))
	f.Add([]byte("{\"instruction\":\n \"a\", \"output\": \"b\"}\n{\"instruction\": \"cut\n{\"instruction\": \"c\", \"output\": \"d\"}"), uint16(2))
	f.Fuzz(func(t *testing.T, data []byte, k uint16) {
		if len(data) > 1<<16 {
			return
		}
		parse := func(d []byte, limit int, base int64) (*Result, error) {
			res := &Result{}
			err := parseJSONRange("f", d, limit, base, res, func(*RecordError) error { res.Skipped++; return nil })
			return res, err
		}
		whole, err := parse(data, len(data), 0)
		if err != nil || whole.Format != JSONLines {
			return
		}
		// the cut: the k-th boundary (mod their number)
		var nls []int
		for i := 1; i < len(data); i++ {
			if isBoundary(data, i) {
				nls = append(nls, i)
			}
		}
		if len(nls) == 0 {
			return
		}
		cut := nls[int(k)%len(nls)]
		first, err := parse(data[:cut+1], cut, 0)
		if errors.Is(err, ErrSplit) {
			return
		}
		if err != nil {
			t.Fatalf("first range: %v", err)
		}
		second, err := parse(data[cut:], len(data)-cut, int64(cut))
		if err != nil {
			t.Fatalf("second range: %v", err)
		}
		got := append(append([]Record{}, first.Records...), second.Records...)
		if !reflect.DeepEqual(got, whole.Records) && (len(got) > 0 || len(whole.Records) > 0) {
			t.Fatalf("cut at %d: %d+%d records, whole %d", cut, len(first.Records), len(second.Records), len(whole.Records))
		}
		if first.Skipped+second.Skipped != whole.Skipped {
			t.Fatalf("cut at %d: %d+%d skipped, whole %d", cut, first.Skipped, second.Skipped, whole.Skipped)
		}
	})
}

// TestEveryBoundary: valid JSON Lines with blank lines, CRLF and records
// spread over lines reads the same cut at every boundary Share may pick
// (none reports ErrSplit).
func TestEveryBoundary(t *testing.T) {
	data := "{\"instruction\": \"a\", \"output\": \"b\"}\n\n  \n" +
		"{\"instruction\": \"c\",\n \"output\": \"d\"}\r\n" +
		"{\"instruction\": \"e\", \"output\": \"h\", \"extra\": {\"x\": {}}\n}\n \t\n" +
		"{\"instruction\": \"f\", \"output\": \"g\"}\n"
	p := filepath.Join(t.TempDir(), "x.jsonl")
	if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	whole, err := Read(ctx, p, Options{})
	if err != nil {
		t.Fatal(err)
	}
	size := int64(len(data))
	cuts := 0
	for b := 1; b < len(data); b++ {
		if !isBoundary([]byte(data), b) {
			continue
		}
		cuts++
		res, _, err := ReadPieces(ctx, []Piece{{File: p, Size: size, End: int64(b)}, {File: p, Size: size, Off: int64(b), End: size}}, Options{})
		if err != nil {
			t.Fatalf("cut at %d: %v", b, err)
		}
		if !reflect.DeepEqual(res.Records, whole.Records) {
			t.Fatalf("cut at %d: %d records, want %d", b, len(res.Records), len(whole.Records))
		}
	}
	if cuts < 6 {
		t.Fatalf("%d boundaries", cuts)
	}
}
