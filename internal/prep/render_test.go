package prep

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/ferryml/ferry/tokenize"
)

// TestRender: records in record order, a record the reader refuses and one
// the template refuses each in its place with SkipBad, the ids the text's
// tokenization without special tokens; without SkipBad the first bad
// record is the error, naming the file and the record.
func TestRender(t *testing.T) {
	in := twoTurns +
		`{"messages": "not a list"}` + "\n" +
		`{"messages": [{"role": "user", "content": [{"type": "image"}]}]}` + "\n" +
		`{"conversations": [{"from": "human", "value": "Hi"}, {"from": "gpt", "value": "Yo"}]}` + "\n"
	var out bytes.Buffer
	r, err := Render(context.Background(), RenderConfig{Tokenizer: qwenDir, Date: "2026-07-26", SkipBad: true}, strings.NewReader(in), &out)
	if err != nil {
		t.Fatal(err)
	}
	if r.Name != "stdin" || r.Rendered != 2 || r.Skipped != 2 {
		t.Errorf("result %+v, want stdin, 2 rendered, 2 skipped", r)
	}
	tok, err := tokenize.Load(qwenDir)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	if len(lines) != 4 {
		t.Fatalf("%d lines, want 4:\n%s", len(lines), out.String())
	}
	for i, l := range lines {
		var v struct {
			Record   int64   `json:"record"`
			Text     string  `json:"text"`
			InputIDs []int32 `json:"input_ids"`
			Error    string  `json:"error"`
		}
		if err := json.Unmarshal([]byte(l), &v); err != nil {
			t.Fatal(err)
		}
		if v.Record != int64(i) {
			t.Errorf("line %d is record %d", i, v.Record)
		}
		switch i {
		case 0, 3:
			if !strings.HasPrefix(v.Text, "<|im_start|>") || !strings.HasSuffix(v.Text, "<|im_end|>\n") {
				t.Errorf("record %d: text %q", i, v.Text)
			}
			if want := tok.Encode(v.Text, false); !slices.Equal(v.InputIDs, want) {
				t.Errorf("record %d: ids %v, want %v", i, v.InputIDs, want)
			}
		default:
			if v.Error == "" || v.Text != "" {
				t.Errorf("record %d: %q, want an error line", i, l)
			}
		}
	}
	p := filepath.Join(t.TempDir(), "chats.jsonl")
	if err := os.WriteFile(p, []byte(twoTurns+`{"messages": [{"role": "user", "content": [{"type": "image"}]}]}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = Render(context.Background(), RenderConfig{Tokenizer: qwenDir, Input: p}, nil, &out)
	if err == nil || !strings.Contains(err.Error(), p) || !strings.Contains(err.Error(), "record 1") {
		t.Errorf("bad record without SkipBad: %v, want the file and record 1 named", err)
	}
}
