package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestChatInspect: dataprep on conversations (detected), then inspect marks
// the trained spans with brackets (stdout is not a terminal) and counts them.
func TestChatInspect(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "chats.jsonl")
	rec := `{"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"}, {"role": "user", "content": "Bye"}, {"role": "assistant", "content": "See you."}]}` + "\n"
	if err := os.WriteFile(in, []byte(rec), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "out")
	mustPrep(t, "--input", in, "--tokenizer", qwen.dir, "--seq-len", "128", "--date", "2026-07-26", "--quiet", "--out", out)
	got := mustPrep(t, "inspect", out, "--rank", "0", "--row", "0")
	for _, w := range []string{"labels assistant", "trained 2 span(s)", "truncated: false",
		"<|im_start|>assistant\n[[Hello!<|im_end|>]]\n<|im_start|>user\nBye<|im_end|>\n<|im_start|>assistant\n[[See you.<|im_end|>]]\n"} {
		if !strings.Contains(got, w) {
			t.Errorf("inspect output lacks %q:\n%s", w, got)
		}
	}
}
