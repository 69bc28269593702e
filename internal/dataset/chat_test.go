package dataset

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"

	"github.com/ferryml/ferry/chattemplate"
)

// asJSON renders a conversation's messages, tools and kwargs as JSON (keys
// in their order) to compare with what a test expects.
func asJSON(t *testing.T, c Conversation) string {
	t.Helper()
	var enc func(v chattemplate.Value) string
	enc = func(v chattemplate.Value) string {
		switch v := v.(type) {
		case *chattemplate.List:
			parts := make([]string, len(v.Items))
			for i, x := range v.Items {
				parts[i] = enc(x)
			}
			return "[" + strings.Join(parts, ",") + "]"
		case *chattemplate.Dict:
			var parts []string
			for _, k := range v.Keys() {
				x, _ := v.Get(k)
				kb, _ := json.Marshal(k)
				parts = append(parts, string(kb)+":"+enc(x))
			}
			return "{" + strings.Join(parts, ",") + "}"
		}
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	s := enc(c.Messages)
	if c.Tools != nil {
		s += " tools=" + enc(c.Tools)
	}
	for k, v := range c.Kwargs {
		s += " " + k + "=" + enc(v)
	}
	return s
}

func TestReadChatShapes(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		format   Format
		want     []string
	}{
		{"messages array", `[{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]}]`, JSONArray,
			[]string{`[{"role":"user","content":"hi"},{"role":"assistant","content":"yo"}]`}},
		{"one object", `{"messages": [{"role": "user", "content": "hi"}], "chat_template_kwargs": {"enable_thinking": false}}`, JSONArray,
			[]string{`[{"role":"user","content":"hi"}] enable_thinking=false`}},
		{"bare array file", `[{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]`, JSONArray,
			[]string{`[{"role":"user","content":"hi"},{"role":"assistant","content":"yo"}]`}},
		{"pretty array of records", "[\n  {\n    \"messages\": [{\"role\": \"user\", \"content\": \"a\"}]\n  },\n  {\"messages\": [{\"role\": \"user\", \"content\": \"b\"}]}\n]\n", JSONArray,
			[]string{`[{"role":"user","content":"a"}]`, `[{"role":"user","content":"b"}]`}},
		{"pretty message list", "\xef\xbb\xbf[\n  {\"from\": \"human\", \"value\": \"q\"},\n  {\"from\": \"gpt\", \"value\": \"a\"}\n]\n", JSONArray,
			[]string{`[{"role":"user","content":"q"},{"role":"assistant","content":"a"}]`}},
		{"one-line array and a blank line", "[{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}]}, {\"messages\": [{\"role\": \"user\", \"content\": \"b\"}]}]\n \r\n", JSONArray,
			[]string{`[{"role":"user","content":"a"}]`, `[{"role":"user","content":"b"}]`}},
		{"pretty object", "{\n  \"messages\": [{\"role\": \"user\", \"content\": \"hi\"}]\n}\n", JSONArray,
			[]string{`[{"role":"user","content":"hi"}]`}},
		{"jsonl bare arrays", "[{\"role\": \"user\", \"content\": \"a\"}]\n\n[{\"role\": \"user\", \"content\": \"b\"}]", JSONLines,
			[]string{`[{"role":"user","content":"a"}]`, `[{"role":"user","content":"b"}]`}},
		{"sharegpt with system and tools string", `{"conversations": [{"from": "human", "value": "q"}, {"from": "gpt", "value": "a"}], "system": "be brief", "tools": "[{\"name\": \"f\"}]"}`, JSONArray,
			[]string{`[{"role":"system","content":"be brief"},{"role":"user","content":"q"},{"role":"assistant","content":"a"}] tools=[{"name":"f"}]`}},
		{"system not doubled", `{"messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "q"}], "system": "other"}`, JSONArray,
			[]string{`[{"role":"system","content":"s"},{"role":"user","content":"q"}]`}},
		{"llamafactory parts", `{"messages": [{"role": "assistant", "content": [{"type": "reasoning", "value": "think"}, {"type": "text", "value": "ok"}, {"type": "tool_call", "value": "{\"name\": \"f\", \"arguments\": {\"x\": 1.0}}"}]}]}`, JSONArray,
			[]string{`[{"role":"assistant","content":"ok","reasoning_content":"think","tool_calls":[{"type":"function","function":{"name":"f","arguments":{"x":1}}}]}]`}},
		{"text parts kept", `{"messages": [{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}]}`, JSONArray,
			[]string{`[{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}]`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, err := ParseChat("in", []byte(tc.in), Options{})
			if err != nil {
				t.Fatal(err)
			}
			if res.Format != tc.format {
				t.Errorf("format %s, want %s", res.Format, tc.format)
			}
			if len(res.Records) != len(tc.want) {
				t.Fatalf("%d records, want %d", len(res.Records), len(tc.want))
			}
			for i, w := range tc.want {
				if got := asJSON(t, res.Records[i]); got != w {
					t.Errorf("record %d:\n got %s\nwant %s", i, got, w)
				}
			}
		})
	}
}

func TestReadChatBadRecords(t *testing.T) {
	for _, tc := range []struct {
		name, in  string
		wantErr   error
		wantIndex int64
		wantLine  int64
		wantIn    string
	}{
		{"image part", "{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}]}\n{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}, {\"role\": \"user\", \"content\": [{\"type\": \"image_url\", \"image_url\": {}}]}]}",
			ErrChat, 1, 2, `messages[1].content[0]: is a "image_url" part`},
		{"malformed tools", `[{"messages": [{"role": "user", "content": "a"}]}, {"messages": [{"role": "user", "content": "a"}], "tools": "[{"}]`,
			ErrChat, 1, 1, "tools: a JSON string that does not parse"},
		{"no messages", `[{"text": "a"}]`, ErrChat, 0, 1, `neither "messages" nor "conversations" (keys: text)`},
		{"message not an object", `[{"messages": ["hi"]}]`, ErrChat, 0, 1, "messages[0]: is a string"},
		{"sharegpt turn without from", `[{"conversations": [{"from": "human", "value": "a"}, {"value": "b"}]}]`, ErrChat, 0, 1, `turn 1 has no "from"`},
		{"array cut short", "[{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}]},\n{\"messages\": [", ErrSyntax, 1, 2, "cut short"},
		{"jsonl bad line", "{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}]}\n{\"messages\": [}\n", ErrSyntax, 1, 2, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseChat("data.jsonl", []byte(tc.in), Options{})
			var re *RecordError
			if !errors.As(err, &re) {
				t.Fatalf("error %v, want a RecordError", err)
			}
			if !errors.Is(err, tc.wantErr) || re.Index != tc.wantIndex || re.Line != tc.wantLine || !strings.Contains(err.Error(), tc.wantIn) {
				t.Errorf("error %q (index %d, line %d), want %v at record %d, line %d, containing %q", err, re.Index, re.Line, tc.wantErr, tc.wantIndex, tc.wantLine, tc.wantIn)
			}
			if !strings.HasPrefix(err.Error(), "data.jsonl: record ") {
				t.Errorf("error %q does not start with the file and record", err)
			}
		})
	}
}

func TestReadChatSkipsBadRecords(t *testing.T) {
	in := "{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}]}\n{\"messages\": \"x\"}\n{\"messages\": [{\"role\": \"user\", \"content\": \"c\"}]}\n"
	var seen []int64
	res, err := ParseChat("in", []byte(in), Options{OnBad: func(e *RecordError) error { seen = append(seen, e.Index); return nil }})
	if err != nil {
		t.Fatal(err)
	}
	if res.Skipped != 1 || len(seen) != 1 || seen[0] != 1 || len(res.Records) != 2 || res.Samples[1] != 2 {
		t.Errorf("skipped %d %v, records %d samples %v", res.Skipped, seen, len(res.Records), res.Samples)
	}
}

// TestReadChatParquet reads messages as a list<struct> column, as the
// datasets library writes them: every struct has every field, a key a
// message lacks is null (and normalisation drops it later).
func TestReadChatParquet(t *testing.T) {
	msg := arrow.StructOf(arrow.Field{Name: "role", Type: arrow.BinaryTypes.String, Nullable: true},
		arrow.Field{Name: "content", Type: arrow.BinaryTypes.LargeString, Nullable: true},
		arrow.Field{Name: "weight", Type: arrow.PrimitiveTypes.Float32, Nullable: true})
	schema := arrow.NewSchema([]arrow.Field{
		{Name: "messages", Type: arrow.ListOf(msg), Nullable: true},
		{Name: "source", Type: arrow.BinaryTypes.String, Nullable: true},
	}, nil)
	rec, _, err := array.RecordFromJSON(memory.DefaultAllocator, schema, strings.NewReader(`[
		{"messages": [{"role": "user", "content": "hi", "weight": null}, {"role": "assistant", "content": "yo", "weight": 0.5}], "source": "a"},
		{"messages": [{"role": "user", "content": "q", "weight": 1}], "source": null}
	]`))
	if err != nil {
		t.Fatal(err)
	}
	defer rec.Release()
	var buf bytes.Buffer
	w, err := pqarrow.NewFileWriter(schema, &buf, parquet.NewWriterProperties(), pqarrow.DefaultWriterProps())
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Write(rec); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	res, err := ParseChat("chats.parquet", buf.Bytes(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		`[{"role":"user","content":"hi","weight":null},{"role":"assistant","content":"yo","weight":0.5}]`,
		`[{"role":"user","content":"q","weight":1}]`,
	}
	if res.Format != Parquet || len(res.Records) != len(want) {
		t.Fatalf("format %s, %d records", res.Format, len(res.Records))
	}
	for i, w := range want {
		if got := asJSON(t, res.Records[i]); got != w {
			t.Errorf("row %d:\n got %s\nwant %s", i, got, w)
		}
	}
	// FirstChat reads a Parquet file whole, from any first chunk.
	firstChatEvery(t, buf.Bytes(), 1, 4, 100, 64<<10)
	if c, err := firstChat("chats.parquet", bytes.NewReader(buf.Bytes()), 1<<20); err != nil || asJSON(t, c) != want[0] {
		t.Errorf("FirstChat of the Parquet file: %s", firstOutcome(t, c, err))
	}
}

func FuzzParseChat(f *testing.F) {
	f.Add([]byte(`[{"messages": [{"role": "user", "content": "hi"}]}]`))
	f.Add([]byte(`{"conversations": [{"from": "function_call", "value": "{\"name\": \"f\", \"arguments\": {}}"}], "tools": "[]"}`))
	f.Add([]byte("[{\"role\": \"user\"}]\n[{\"role\": \"assistant\", \"content\": [{\"type\": \"tool_call\", \"value\": \"1\"}]}]"))
	f.Fuzz(func(t *testing.T, data []byte) {
		res, err := ParseChat("fuzz", data, Options{MaxBytes: 1 << 20, OnBad: func(*RecordError) error { return nil }})
		if err != nil {
			return
		}
		if len(res.Records) != len(res.Samples) {
			t.Fatalf("%d records, %d samples", len(res.Records), len(res.Samples))
		}
		for _, c := range res.Records {
			if c.Messages == nil {
				t.Fatal("a record without messages")
			}
		}
	})
}

// FuzzParseChatWhole: a file that is one JSON value reads as that value
// parsed whole: an array of records, the messages of one conversation (when
// its first element looks like a message) or one record, although ParseChat
// parses only the records, one by one.
func FuzzParseChatWhole(f *testing.F) {
	f.Add([]byte(`[{"messages": [{"role": "user", "content": "hi"}]}, {"text": 1}]`))
	f.Add([]byte("[\n {\"role\": \"user\", \"content\": \"hi\"},\n {\"role\": \"assistant\", \"content\": \"yo\"}\n]"))
	f.Add([]byte("{\n\"conversations\": [{\"from\": \"human\", \"value\": \"q\"}]\n}"))
	f.Add([]byte("[\n[{\"role\": \"user\"}],\n{\"from\": \"gpt\", \"value\": \"x\"}\n]"))
	f.Fuzz(func(t *testing.T, data []byte) {
		if !json.Valid(data) || bytes.HasPrefix(data, []byte("\xef\xbb\xbf")) {
			return
		}
		whole, err := chattemplate.ParseJSONValue(data)
		if err != nil {
			return
		}
		var want []string
		var bad int64
		keep := func(v chattemplate.Value) {
			if c, _, err := conversation(v); err != nil {
				bad++
			} else {
				want = append(want, asJSON(t, c))
			}
		}
		if l, ok := whole.(*chattemplate.List); ok && (len(l.Items) == 0 || !looksLikeMessage(l.Items[0])) {
			for _, it := range l.Items {
				keep(it)
			}
		} else {
			keep(whole)
		}
		res, err := ParseChat("fuzz", data, Options{OnBad: func(*RecordError) error { return nil }})
		if len(want) == 0 && bad == 0 {
			if !errors.Is(err, ErrEmpty) {
				t.Fatalf("an empty array: error %v, want ErrEmpty", err)
			}
			return
		}
		if err != nil {
			t.Fatalf("ParseChat: %v", err)
		}
		if res.Format != JSONArray || res.Skipped != bad || len(res.Records) != len(want) {
			t.Fatalf("format %s, %d records, %d skipped; want %d records, %d skipped", res.Format, len(res.Records), res.Skipped, len(want), bad)
		}
		for i, w := range want {
			if got := asJSON(t, res.Records[i]); got != w {
				t.Fatalf("record %d:\n got %s\nwant %s", i, got, w)
			}
		}
	})
}

// TestReadChatPieces: byte ranges of a JSON Lines file read the records a
// whole read does, numbered across the pieces, and a bad record in a later
// range is named by its byte offset in the file.
func TestReadChatPieces(t *testing.T) {
	good := `{"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"}]}` + "\n"
	bad := `{"messages": [{"role": "user", "content": "Hi"}, ` + "\n"
	data := good + good + bad + good
	p := filepath.Join(t.TempDir(), "c.jsonl")
	if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	size, cut := int64(len(data)), int64(2*len(good))
	pieces := []Piece{{File: p, Size: size, Off: 0, End: cut}, {File: p, Size: size, Off: cut, End: size}}
	_, _, err := ReadChatPieces(context.Background(), pieces, Options{})
	var re *RecordError
	if !errors.As(err, &re) || re.File != p || re.Index != 0 || re.Offset != cut || !errors.Is(err, ErrSyntax) {
		t.Fatalf("bad record in the second range: %v, want record 0 at byte %d", err, cut)
	}
	skip := Options{OnBad: func(*RecordError) error { return nil }}
	whole, err := ReadChat(context.Background(), p, skip)
	if err != nil {
		t.Fatal(err)
	}
	res, per, err := ReadChatPieces(context.Background(), pieces, skip)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(res.Samples, whole.Samples) || res.Skipped != 1 || res.Bytes != size || res.Format != JSONLines {
		t.Fatalf("pieces read samples %v, %d skipped, %d bytes, %s; whole %v", res.Samples, res.Skipped, res.Bytes, res.Format, whole.Samples)
	}
	if per[0].Records != 2 || per[1].Records != 2 || per[1].Skipped != 1 {
		t.Errorf("per piece %+v", per)
	}
}

// firstOutcome is what FirstChat (or firstRecord) gave: record 0 as JSON,
// or the error.
func firstOutcome(t *testing.T, c Conversation, err error) string {
	t.Helper()
	if err != nil {
		return "error: " + err.Error()
	}
	return asJSON(t, c)
}

// wholeFirst is record 0 of data read whole, checked against ParseChat:
// the record it reads first, or the error it stops at for record 0.
func wholeFirst(t *testing.T, data []byte) string {
	t.Helper()
	c, ok, err := firstRecord("in", data, false)
	if !ok {
		t.Fatal("firstRecord of a whole input is undecided")
	}
	res, perr := ParseChat("in", data, Options{OnBad: func(e *RecordError) error {
		if e.Index == 0 {
			return e
		}
		return nil
	}})
	var re *RecordError
	switch {
	case perr == nil && (err != nil || res.Samples[0] != 0 || asJSON(t, res.Records[0]) != asJSON(t, c)):
		t.Fatalf("ParseChat reads record 0 as %v, firstRecord as %s", res.Records[0], firstOutcome(t, c, err))
	case errors.As(perr, &re) && re.Index == 0 && (err == nil || perr.Error() != err.Error()):
		t.Fatalf("ParseChat stops at record 0 with %v, firstRecord gives %s", perr, firstOutcome(t, c, err))
	case perr != nil && re == nil && (err == nil || perr.Error() != err.Error()):
		t.Fatalf("ParseChat fails with %v, firstRecord gives %s", perr, firstOutcome(t, c, err))
	}
	return firstOutcome(t, c, err)
}

// firstChatEvery runs firstChat over data from each first chunk size in
// sizes (none: every size from 1 byte to the whole) and holds it to
// record 0 of data read whole.
func firstChatEvery(t *testing.T, data []byte, sizes ...int) {
	t.Helper()
	want := wholeFirst(t, data)
	defer func(n int) { firstChatChunk = n }(firstChatChunk)
	if len(sizes) == 0 {
		for n := 1; n <= len(data)+1; n++ {
			sizes = append(sizes, n)
		}
	}
	for _, n := range sizes {
		firstChatChunk = n
		c, err := firstChat("in", bytes.NewReader(data), 1<<20)
		if got := firstOutcome(t, c, err); got != want {
			t.Fatalf("first chunk of %d bytes:\n got %s\nwant %s", n, got, want)
		}
	}
}

// TestFirstChat: FirstChat reads record 0 as ReadChat does, from any
// prefix length, plain or compressed; the inputs of the shape and bad
// record tests, and starts that tell apart a JSON array from JSON Lines
// only further on.
func TestFirstChat(t *testing.T) {
	msg := `{"messages": [{"role": "user", "content": "a"}]}`
	ins := []string{
		`[{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]}]`,
		`{"messages": [{"role": "user", "content": "hi"}], "chat_template_kwargs": {"enable_thinking": false}}`,
		`[{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]`,
		"[\n  {\n    \"messages\": [{\"role\": \"user\", \"content\": \"a\"}]\n  },\n  " + msg + "\n]\n",
		"\xef\xbb\xbf[\n  {\"from\": \"human\", \"value\": \"q\"},\n  {\"from\": \"gpt\", \"value\": \"a\"}\n]\n",
		"[" + msg + ", " + msg + "]\n \r\n",
		"{\n  \"messages\": [{\"role\": \"user\", \"content\": \"hi\"}]\n}\n",
		"[{\"role\": \"user\", \"content\": \"a\"}]\n\n[{\"role\": \"user\", \"content\": \"b\"}]",
		"[{\"role\": \"user\", \"content\": \"a\"}]",
		msg + "\n{\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"image_url\", \"image_url\": {}}]}]}",
		`[{"text": "a"}]`,
		`[{"instruction": "a", "input": "", "output": "b"}, {"instruction": "c"}]`,
		`[{"messages": ["hi"]}]`,
		"[" + msg + ",\n{\"messages\": [",
		msg + "\n{\"messages\": [}\n",
		// a first line that is a whole array of records, then more lines:
		// an array of records (cut short after its first line)
		"[" + msg + "]\n[" + msg + "]\n",
		// two pretty-printed objects: not one JSON value, and not JSON Lines
		"{\n\"messages\": []\n}\n{\n\"messages\": []\n}\n",
		msg,
		msg + "\n",
		"[]\n[" + msg + "]",
		"[]",
		"  \n\n",
		"",
		"[1]\n[2]",
		"12345\n",
		`{"messages": [{"role": "user", "content": "a"}]`,
		// what FuzzFirstChat found: a conversation, a JSON Lines number and
		// an array's number that a prefix ends where the input goes on
		`[{"role": "0"}] 0000000000000000`,
		" 0\v0",
		"[1.A",
	}
	for i, in := range ins {
		firstChatEvery(t, []byte(in))
		var gz bytes.Buffer
		zw := gzip.NewWriter(&gz)
		zw.Write([]byte(in))
		zw.Close()
		zs := zstdCompress(t, []byte(in))
		if in != "" {
			for _, z := range [][]byte{gz.Bytes(), zs} {
				c, err := firstChat("in", bytes.NewReader(z), 1<<20)
				if got, want := firstOutcome(t, c, err), wholeFirst(t, []byte(in)); got != want {
					t.Errorf("input %d compressed:\n got %s\nwant %s", i, got, want)
				}
			}
		}
	}
}

func zstdCompress(t *testing.T, b []byte) []byte {
	t.Helper()
	zw, err := zstd.NewWriter(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer zw.Close()
	return zw.EncodeAll(b, nil)
}

// countingReader counts the bytes read from r.
type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// TestFirstChatReadsAPrefix: FirstChat reads record 0 of an 8 MiB JSON
// Lines file, or of a one-line JSON array of records, from its first
// chunk, and never reaches the bad record at the end; a first record
// longer than the chunk is read in growing prefixes.
func TestFirstChatReadsAPrefix(t *testing.T) {
	rec := `{"messages": [{"role": "user", "content": "` + strings.Repeat("x", 1000) + `"}]}`
	var jsonl, arr bytes.Buffer
	arr.WriteString("[")
	for jsonl.Len() < 8<<20 {
		jsonl.WriteString(rec + "\n")
		arr.WriteString(rec + ",")
	}
	jsonl.WriteString("{\"messages\": [}\n")
	arr.WriteString("{\"messages\": [}]")
	for _, in := range [][]byte{jsonl.Bytes(), arr.Bytes()} {
		cr := &countingReader{r: bytes.NewReader(in)}
		c, err := firstChat("in", cr, 1<<30)
		if err != nil || asJSON(t, c) != `[{"role":"user","content":"`+strings.Repeat("x", 1000)+`"}]` {
			t.Fatalf("record 0: %s", firstOutcome(t, c, err))
		}
		if cr.n > int64(firstChatChunk)+64<<10 {
			t.Errorf("read %d bytes of %d for record 0 (first chunk %d)", cr.n, len(in), firstChatChunk)
		}
	}
	// FirstChat opens a path (or an s3:// URL) through storage.
	path := filepath.Join(t.TempDir(), "c.jsonl.gz")
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write(jsonl.Bytes())
	zw.Close()
	if err := os.WriteFile(path, gz.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	if c, err := FirstChat(context.Background(), path); err != nil || len(c.Messages.Items) != 1 {
		t.Fatalf("FirstChat(%s): %s", path, firstOutcome(t, c, err))
	}
	if _, err := FirstChat(context.Background(), path+".missing"); err == nil {
		t.Fatal("FirstChat of a missing file: no error")
	}
	long := `{"messages": [{"role": "user", "content": "` + strings.Repeat("y", 300<<10) + `"}]}` + "\n" + rec + "\n"
	c, err := firstChat("in", strings.NewReader(long), 1<<30)
	if err != nil || len(asJSON(t, c)) < 300<<10 {
		t.Fatalf("a long record 0: %v", err)
	}
}

// FuzzFirstChat: FirstChat reads record 0 of any input, from prefixes of
// any length, as the input read whole does (and as ParseChat does).
func FuzzFirstChat(f *testing.F) {
	f.Add([]byte(`[{"messages": [{"role": "user", "content": "hi"}]}, {"text": 1}]`), uint16(1))
	f.Add([]byte("[\n {\"role\": \"user\", \"content\": \"hi\"},\n {\"role\": \"assistant\", \"content\": \"yo\"}\n]"), uint16(3))
	f.Add([]byte("[{\"role\": \"user\"}]\n[{\"role\": \"assistant\", \"content\": \"x\"}]"), uint16(2))
	f.Add([]byte("{\"messages\": []}\n{\"messages\": [}"), uint16(7))
	f.Fuzz(func(t *testing.T, data []byte, chunk uint16) {
		if len(data) > 1<<16 {
			return
		}
		firstChatEvery(t, data, 1+int(chunk)%(len(data)+1))
	})
}
