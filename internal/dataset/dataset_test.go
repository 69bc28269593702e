package dataset

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/compress"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"
)

const tiny = "../../testdata/alpaca/alpaca_tiny.json"

func TestReadFormats(t *testing.T) {
	raw, err := os.ReadFile(tiny)
	if err != nil {
		t.Fatal(err)
	}
	var want []map[string]string
	if err := json.Unmarshal(raw, &want); err != nil {
		t.Fatal(err)
	}
	var jsonl bytes.Buffer
	for _, r := range want {
		b, _ := json.Marshal(r)
		jsonl.Write(b)
		jsonl.WriteByte('\n')
	}
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write(raw)
	zw.Close()
	enc, _ := zstd.NewWriter(nil)
	zs := enc.EncodeAll(jsonl.Bytes(), nil)
	pq := writeParquet(t, want, false)
	pqLarge := writeParquet(t, want, true)
	for _, tc := range []struct {
		name   string
		data   []byte
		format Format
	}{
		{"array", raw, JSONArray},
		{"jsonl", jsonl.Bytes(), JSONLines},
		{"gzip array", gz.Bytes(), JSONArray},
		{"zstd jsonl", zs, JSONLines},
		{"parquet", pq, Parquet},
		{"parquet large_string", pqLarge, Parquet},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "data.json") // the name never decides the format
			if err := os.WriteFile(p, tc.data, 0o644); err != nil {
				t.Fatal(err)
			}
			res, err := Read(context.Background(), p, Options{})
			if err != nil {
				t.Fatal(err)
			}
			if res.Format != tc.format {
				t.Errorf("format %s, want %s", res.Format, tc.format)
			}
			if len(res.Records) != len(want) {
				t.Fatalf("%d records, want %d", len(res.Records), len(want))
			}
			for i, r := range res.Records {
				w := want[i]
				if r.Instruction != w["instruction"] || r.Input != w["input"] || r.Output != w["output"] || res.Samples[i] != int64(i) {
					t.Fatalf("record %d differs: %+v", i, r)
				}
			}
		})
	}
}

func writeParquet(t testing.TB, recs []map[string]string, large bool, opts ...parquet.WriterProperty) []byte {
	t.Helper()
	typ := arrow.DataType(arrow.BinaryTypes.String)
	if large {
		typ = arrow.BinaryTypes.LargeString
	}
	fields := []arrow.Field{{Name: "instruction", Type: typ}, {Name: "input", Type: typ}, {Name: "output", Type: typ}, {Name: "text", Type: typ}}
	schema := arrow.NewSchema(fields, nil)
	b := array.NewRecordBuilder(memory.DefaultAllocator, schema)
	defer b.Release()
	for _, r := range recs {
		for i, f := range fields {
			switch fb := b.Field(i).(type) {
			case *array.StringBuilder:
				fb.Append(r[f.Name])
			case *array.LargeStringBuilder:
				fb.Append(r[f.Name])
			}
		}
	}
	rec := b.NewRecordBatch()
	defer rec.Release()
	var buf bytes.Buffer
	w, err := pqarrow.NewFileWriter(schema, &buf, parquet.NewWriterProperties(opts...), pqarrow.DefaultWriterProps())
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Write(rec); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestBadInput(t *testing.T) {
	for _, tc := range []struct {
		name      string
		in        string
		wantErr   error
		wantIndex int64
		wantLine  int64
		wantIn    string // substring of the message
	}{
		{"invalid json", `[{"instruction": "a", "output": "b"}, {"instruction": ]`, ErrSyntax, 1, 1, "want a value"},
		{"trailing comma", "[\n{\"instruction\": \"a\", \"output\": \"b\"},\n]", ErrSyntax, 1, 3, "trailing comma"},
		{"trailing comma in object", `[{"instruction": "a", "output": "b",}]`, ErrSyntax, 0, 1, "trailing comma"},
		{"missing instruction", `[{"output": "b"}]`, ErrField, 0, 1, `"instruction" is missing`},
		{"missing output", "[{\"instruction\": \"a\"},\n{\"instruction\": \"a\"}]", ErrField, 0, 1, `"output" is missing`},
		{"null output", `[{"instruction": "a", "output": null}]`, ErrField, 0, 1, `"output" is null`},
		{"number input", `[{"instruction": "a", "input": 3, "output": "x"}]`, ErrField, 0, 1, `"input" is a number`},
		{"invalid utf8", "[{\"instruction\": \"a\xff\", \"output\": \"b\"}]", ErrUTF8, 0, 1, "0xff"},
		{"lone surrogate", `[{"instruction": "a\ud800", "output": "b"}]`, ErrUTF8, 0, 1, "surrogate"},
		{"raw control", "[{\"instruction\": \"a\x03\", \"output\": \"b\"}]", ErrField, 0, 1, "control"},
		{"cut short", `[{"instruction": "a", "output": "b"}`, ErrSyntax, 1, 1, "cut short"},
		{"jsonl bad line", "{\"instruction\": \"a\", \"output\": \"b\"}\n{\"instruction\": \"a\" \"output\": \"b\"}\n", ErrSyntax, 1, 2, "want ','"},
		{"jsonl two per line", `{"instruction": "a", "output": "b"} {"instruction": "a", "output": "b"}`, ErrSyntax, 0, 1, "one object per line"},
		{"not an object", `[1]`, ErrSyntax, 0, 1, "a number, want an object"},
		{"garbage after", `[] x`, ErrSyntax, 0, 1, "after the closing"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("in.json", []byte(tc.in), Options{})
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("err %v, want %v", err, tc.wantErr)
			}
			var re *RecordError
			if !errors.As(err, &re) {
				t.Fatalf("err %v is not a RecordError", err)
			}
			if re.Index != tc.wantIndex || re.Line != tc.wantLine || re.File != "in.json" {
				t.Errorf("at record %d line %d, want record %d line %d", re.Index, re.Line, tc.wantIndex, tc.wantLine)
			}
			if !strings.Contains(err.Error(), tc.wantIn) || !strings.Contains(err.Error(), "in.json: record") {
				t.Errorf("message %q lacks %q", err, tc.wantIn)
			}
		})
	}
	for _, in := range []string{"", "  \n", "[]", "[ ]\n"} {
		if _, err := Parse("e.json", []byte(in), Options{}); !errors.Is(err, ErrEmpty) {
			t.Errorf("%q: err %v, want ErrEmpty", in, err)
		}
	}
	if _, err := Parse("x.txt", []byte("hello"), Options{}); !errors.Is(err, ErrFormat) {
		t.Errorf("text: err %v, want ErrFormat", err)
	}
}

func TestSkipBad(t *testing.T) {
	in := "{\"instruction\": \"a\", \"output\": \"b\"}\n" +
		"{\"instruction\": \"a\" \"output\": \"b\"}\n" + // syntax: skipped with its line
		"{\"instruction\": null, \"output\": \"b\"}\n" +
		"\n" +
		"{\"instruction\": \"c\", \"input\": \"d\", \"history\": [[\"x\", \"y\"]], \"system\": {\"a\": [1, 2.5e3, true, null]}, \"output\": \"e\"}\n"
	var seen []int64
	res, err := Parse("in.jsonl", []byte(in), Options{OnBad: func(e *RecordError) error {
		seen = append(seen, e.Index)
		return nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	if res.Skipped != 2 || len(res.Records) != 2 || res.Samples[1] != 3 {
		t.Fatalf("skipped %d, records %d, samples %v", res.Skipped, len(res.Records), res.Samples)
	}
	if r := res.Records[1]; r.Instruction != "c" || r.Input != "d" || r.Output != "e" {
		t.Fatalf("record %+v", r)
	}
	if len(seen) != 2 || seen[0] != 1 || seen[1] != 2 {
		t.Fatalf("bad records %v, want [1 2]", seen)
	}
	// Only bad records: a counted skip, not ErrEmpty.
	res, err = Parse("in.jsonl", []byte(`{"output": "b"}`), Options{OnBad: func(*RecordError) error { return nil }})
	if err != nil || res.Skipped != 1 {
		t.Fatalf("err %v, res %+v", err, res)
	}
}

func TestNullInput(t *testing.T) {
	res, err := Parse("n.json", []byte(`[{"instruction": "a", "input": null, "output": "b"}]`), Options{})
	if err != nil || res.Records[0] != (Record{"a", "", "b"}) {
		t.Fatalf("null input: %v %+v", err, res)
	}
}

func TestEscapes(t *testing.T) {
	in := `[{"instruction": "q\"\\\/\b\f\n\r\t\u00e9\ud83d\ude00\u0003", "output": "é😀"}]`
	res, err := Parse("e.json", []byte(in), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := res.Records[0].Instruction, "q\"\\/\b\f\n\r\té😀\x03"; got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
	var std []Record
	if err := json.Unmarshal([]byte(in), &std); err != nil || std[0] != res.Records[0] {
		t.Fatalf("differs from encoding/json: %+v %v", std, err)
	}
}

func TestTemplate(t *testing.T) {
	a := Alpaca()
	for _, tc := range []struct {
		rec        Record
		want       string
		wantPrompt int
	}{
		{Record{"Do x", "", "Done"}, "### Instruction:\nDo x\n\n### Response:\nDone<eos>", len("### Instruction:\nDo x\n\n### Response:\n")},
		{Record{"Do x", "with y", "Done"}, "### Instruction:\nDo x\n\n### Input:\nwith y\n\n### Response:\nDone<eos>", len("### Instruction:\nDo x\n\n### Input:\nwith y\n\n### Response:\n")},
	} {
		got, p := a.Append(nil, &tc.rec, "", "<eos>")
		if string(got) != tc.want || p != tc.wantPrompt {
			t.Errorf("got %q prompt %d, want %q prompt %d", got, p, tc.want, tc.wantPrompt)
		}
	}
	u, err := ParseTemplate("{bos}Q: {instruction}{?input} ({input}){/input} {{x}}\nA: {output}{eos}")
	if err != nil {
		t.Fatal(err)
	}
	got, p := u.Append([]byte("pre"), &Record{"i", "n", "o"}, "<s>", "</s>")
	if string(got) != "pre<s>Q: i (n) {x}\nA: o</s>" || p != len("<s>Q: i (n) {x}\nA: ") {
		t.Errorf("user template: %q %d", got, p)
	}
	if !strings.HasPrefix(u.Name, "file:") {
		t.Errorf("name %q", u.Name)
	}
	for _, bad := range []string{"{instruction}", "{output}{output}", "{x}{output}", "{?input}{output}{/input}", "{?input}{output}", "{/input}{output}", "{output", "}{output}"} {
		if _, err := ParseTemplate(bad); !errors.Is(err, ErrTemplate) {
			t.Errorf("%q: err %v, want ErrTemplate", bad, err)
		}
	}
}

func FuzzParse(f *testing.F) {
	raw, err := os.ReadFile(tiny)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(raw[:2000])
	f.Add([]byte(`[{"instruction": "a\ud83d\ude00", "input": "", "output": "b", "x": [1, {"y": null}]}]`))
	f.Add([]byte("{\"instruction\": \"a\", \"output\": \"b\"}\n{\"instruction\": 1}\n"))
	recs := []map[string]string{{"instruction": "a", "input": "", "output": "b"}, {"instruction": "c", "input": "d", "output": "e"}}
	f.Add(writeParquet(f, recs, false))
	f.Add(writeParquet(f, recs, true, parquet.WithCompression(compress.Codecs.Snappy), parquet.WithDictionaryDefault(false)))
	f.Fuzz(func(t *testing.T, data []byte) {
		res, err := Parse("fuzz.json", data, Options{OnBad: func(*RecordError) error { return nil }})
		if err != nil {
			if !errors.Is(err, ErrSyntax) && !errors.Is(err, ErrEmpty) && !errors.Is(err, ErrFormat) && !errors.Is(err, ErrField) {
				t.Fatalf("unclassified error %v", err)
			}
			return
		}
		if len(res.Records) != len(res.Samples) {
			t.Fatal("records and samples differ in length")
		}
		// Whatever encoding/json accepts as an array of string records, we
		// must read identically.
		var std []map[string]any
		if json.Unmarshal(data, &std) == nil && res.Format == JSONArray && res.Skipped == 0 && len(std) == len(res.Records) {
			for i, m := range std {
				want := Record{}
				want.Instruction, _ = m["instruction"].(string)
				want.Input, _ = m["input"].(string)
				want.Output, _ = m["output"].(string)
				if want != res.Records[i] && validUTF8Record(want) {
					t.Fatalf("record %d: %+v, encoding/json says %+v", i, res.Records[i], want)
				}
			}
		}
	})
}

func validUTF8Record(r Record) bool {
	return !strings.ContainsRune(r.Instruction+r.Input+r.Output, '\uFFFD')
}

func FuzzTemplate(f *testing.F) {
	f.Add(AlpacaTemplate)
	f.Add("{bos}{{x}} {?input}{input}{/input}{output}{eos}")
	f.Fuzz(func(t *testing.T, text string) {
		tm, err := ParseTemplate(text)
		if err != nil {
			if !errors.Is(err, ErrTemplate) {
				t.Fatalf("error %v does not wrap ErrTemplate", err)
			}
			return
		}
		rec := Record{Instruction: "I", Input: "N", Output: "O"}
		out, p := tm.Append(nil, &rec, "<b>", "<e>")
		if p < 0 || p > len(out) || !strings.HasPrefix(string(out[p:]), "O") {
			t.Fatalf("prompt length %d in %q: the output does not start there", p, out)
		}
	})
}
