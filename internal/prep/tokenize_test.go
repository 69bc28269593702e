package prep

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestTokenize: the ids-out pass, to the writer and discarded (stats only),
// and a pad token outside the vocabulary named with the tokenizer.
func TestTokenize(t *testing.T) {
	in := "{\"text\":\"Hello world\"}\n{\"text\":\"\"}\n"
	var out bytes.Buffer
	r, err := Tokenize(context.Background(), TokenizeConfig{Tokenizer: qwenDir, Threads: 1, Batch: 1}, strings.NewReader(in), &out)
	if err != nil {
		t.Fatal(err)
	}
	// Qwen2.5 adds no special tokens: "Hello"=9707, " world"=1879
	if want := "{\"ids\":[9707,1879]}\n{\"ids\":[]}\n"; out.String() != want {
		t.Errorf("ids %q, want %q", out.String(), want)
	}
	if r.Lines != 2 || r.Bytes != 11 || r.Tokens != 2 || r.Threads != 1 {
		t.Errorf("result %+v", r)
	}
	out.Reset()
	r, err = Tokenize(context.Background(), TokenizeConfig{Tokenizer: qwenDir, Batch: 4096, Out: "none", MaxLength: 4, Pad: true, PadToken: "<|endoftext|>"},
		strings.NewReader(in), &out)
	if err != nil || out.Len() != 0 || r.Tokens != 8 {
		t.Errorf("--out none, padded to 4: %v, %d bytes written, result %+v", err, out.Len(), r)
	}
	// a file is written whole or not at all
	dir := t.TempDir()
	f := filepath.Join(dir, "ids.jsonl")
	if _, err := Tokenize(context.Background(), TokenizeConfig{Tokenizer: qwenDir, Batch: 1, Out: f}, strings.NewReader(in+"{\"text\":\n"), nil); err == nil || !strings.Contains(err.Error(), "stdin: line 3") {
		t.Errorf("bad line 3: %v", err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("a failed pass left %v", ents)
	}
	if _, err := Tokenize(context.Background(), TokenizeConfig{Tokenizer: qwenDir, Batch: 1, Out: f}, strings.NewReader(in), nil); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(f); err != nil || string(b) != "{\"ids\":[9707,1879]}\n{\"ids\":[]}\n" {
		t.Errorf("%s: %q, %v", f, b, err)
	}
	_, err = Tokenize(context.Background(), TokenizeConfig{Tokenizer: qwenDir, Batch: 1, Pad: true}, strings.NewReader(in), &out)
	if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "--pad needs --max-length") {
		t.Errorf("--pad without --max-length: %v", err)
	}
	_, err = Tokenize(context.Background(), TokenizeConfig{Tokenizer: qwenDir, Batch: 1, MaxLength: 4, Pad: true, PadToken: "<nope>"}, strings.NewReader(in), &out)
	if err == nil || !strings.Contains(err.Error(), `pad token "<nope>" is not in the vocabulary of `+qwenDir) {
		t.Errorf("unknown pad token: %v", err)
	}
}
