package tokgolden

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/klauspost/compress/zstd"
)

var dir = filepath.Join("..", "..", "..", "testdata", "tokenizers")

func TestIDsRebuildsSpecial(t *testing.T) {
	plain, err := IDs(dir, "llama3.1", false)
	if err != nil {
		t.Fatal(err)
	}
	special, err := IDs(dir, "llama3.1", true)
	if err != nil {
		t.Fatal(err)
	}
	if len(plain) != 7439 || len(special) != 7439 {
		t.Fatalf("%d and %d lines, want 7,439", len(plain), len(special))
	}
	// The corpus's first line, HF tokenizers 0.23.3: <|begin_of_text|> first.
	if special[0][0] != 128000 || len(special[0]) != len(plain[0])+1 {
		t.Errorf("line 1: special %v..., plain %v...", special[0][:3], plain[0][:3])
	}
}

func TestIDsBadFiles(t *testing.T) {
	d := t.TempDir()
	write := func(name, body string) {
		var b strings.Builder
		w, _ := zstd.NewWriter(&b)
		w.Write([]byte(body))
		w.Close()
		if err := os.WriteFile(filepath.Join(d, name), []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("corpus-dev.m.nospecial.ids.jsonl.zst", "{\"ids\":[1,2]}\n{\"ids\":[]}\n")
	write("corpus-dev.m.special.jsonl.zst", "{\"prefix\":[9],\"suffix\":[]}\n{\"prefix\":[],\"suffix\":[8,7]}\n")
	got, err := IDs(d, "m", true)
	if err != nil || len(got) != 2 || len(got[0]) != 3 || got[0][0] != 9 || len(got[1]) != 2 || got[1][1] != 7 {
		t.Fatalf("got %v, %v", got, err)
	}
	write("corpus-dev.m.special.jsonl.zst", "{\"prefix\":[9],\"suffix\":[]}\n")
	if _, err := IDs(d, "m", true); err == nil || !strings.Contains(err.Error(), "1 lines") {
		t.Errorf("short special file: %v", err)
	}
	write("corpus-dev.m.special.jsonl.zst", "{\"prefix\":[9]}\n{\"prefix\":[],\"suffix\":[]}\n")
	if _, err := IDs(d, "m", true); err == nil || !strings.Contains(err.Error(), "line 1") {
		t.Errorf("bad line: %v", err)
	}
	write("corpus-dev.m.nospecial.ids.jsonl.zst", "{\"ids\":[1,x]}\n")
	if _, err := IDs(d, "m", false); err == nil || !strings.Contains(err.Error(), "line 1") {
		t.Errorf("bad id: %v", err)
	}
}
