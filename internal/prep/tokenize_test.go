package prep

import (
	"bytes"
	"context"
	"errors"
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
	_, err = Tokenize(context.Background(), TokenizeConfig{Tokenizer: qwenDir, Batch: 1, Pad: true}, strings.NewReader(in), &out)
	if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "--pad needs --max-length") {
		t.Errorf("--pad without --max-length: %v", err)
	}
	_, err = Tokenize(context.Background(), TokenizeConfig{Tokenizer: qwenDir, Batch: 1, MaxLength: 4, Pad: true, PadToken: "<nope>"}, strings.NewReader(in), &out)
	if err == nil || !strings.Contains(err.Error(), `pad token "<nope>" is not in the vocabulary of `+qwenDir) {
		t.Errorf("unknown pad token: %v", err)
	}
}
