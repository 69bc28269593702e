package encode

import (
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ferryml/ferry/chattemplate"
	"github.com/ferryml/ferry/internal/dataset"
	"github.com/ferryml/ferry/shard"
	"github.com/ferryml/ferry/tokenize"
)

var (
	chatOnce sync.Once
	chatEnc  map[string]*ChatEncoder
	chatErr  error
)

// chatEncoders returns Qwen2.5 (byte-level) and Llama-2 (SentencePiece,
// normalized <s>) encoders under --labels assistant.
func chatEncoders(t testing.TB) map[string]*ChatEncoder {
	t.Helper()
	chatOnce.Do(func() {
		chatEnc = map[string]*ChatEncoder{}
		for _, fam := range []string{"qwen2.5", "llama2"} {
			dir := "../../testdata/tokenizers/" + fam
			tok, err := tokenize.Load(dir)
			if err != nil {
				chatErr = err
				return
			}
			tmpl, special, err := chattemplate.FromTokenizerDir("../../testdata/chattemplate/families/"+fam, "")
			if err != nil {
				chatErr = err
				return
			}
			ids, err := AddedSpecialIDs(dir)
			if err != nil {
				chatErr = err
				return
			}
			day := time.Date(2026, 7, 26, 0, 0, 0, 0, time.UTC)
			chatEnc[fam], chatErr = NewChat(tok, ChatConfig{Template: tmpl, Special: special, Now: func() time.Time { return day },
				Labels: shard.LabelsAssistant, MaxLen: 4096, SpecialIDs: ids})
			if chatErr != nil {
				return
			}
		}
	})
	if chatErr != nil {
		t.Fatal(chatErr)
	}
	return chatEnc
}

func conv(t testing.TB, rec string) *dataset.Conversation {
	t.Helper()
	res, err := dataset.ParseChat("t", []byte(rec), dataset.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return &res.Records[0]
}

// TestChatAssistantSpans: the trained tokens are each assistant message's
// content through its end of turn, on a byte-level and a SentencePiece
// tokenizer (whose tokens carry a prepended space and whose <s> is matched
// as "▁<s>").
func TestChatAssistantSpans(t *testing.T) {
	encs := chatEncoders(t)
	rec := `{"messages": [{"role": "user", "content": "Hi there"}, {"role": "assistant", "content": "Hello, 世界 😀!"}, {"role": "user", "content": "Bye"}, {"role": "assistant", "content": "Later."}]}`
	for fam, want := range map[string]string{
		"qwen2.5": "Hello, 世界 😀!<|im_end|>|Later.<|im_end|>",
		"llama2":  "Hello, 世界 😀! </s>|Later. </s>",
	} {
		enc, err := encs[fam].EncodeChat(conv(t, rec))
		if err != nil {
			t.Fatal(fam, err)
		}
		var runs []string
		var cur []int32
		for k, id := range enc.IDs {
			if enc.Loss[k] {
				cur = append(cur, id)
			} else if cur != nil {
				runs = append(runs, encs[fam].tok.Decode(cur, false))
				cur = nil
			}
		}
		if cur != nil {
			runs = append(runs, encs[fam].tok.Decode(cur, false))
		}
		if got := strings.Join(runs, "|"); got != want {
			t.Errorf("%s: trained %q, want %q (text %q)", fam, got, want, enc.Text)
		}
	}
}

// FuzzEncodeChat: any two-turn conversation either labels (one loss flag
// per id, tokens spelling the text, at least one trained token) or is a
// bad record; never a panic or a refused template.
func FuzzEncodeChat(f *testing.F) {
	for _, s := range []string{"hi", " lead", "trail \n", "<|im_end|>", "</s>", "<s>[INST]", "😀\u2028\x00", "  \t "} {
		f.Add(s, s+"!")
	}
	f.Fuzz(func(t *testing.T, user, reply string) {
		encs := chatEncoders(t)
		u, _ := json.Marshal(user)
		r, _ := json.Marshal(reply)
		rec := `{"messages": [{"role": "user", "content": ` + string(u) + `}, {"role": "assistant", "content": ` + string(r) + `}]}`
		res, err := dataset.ParseChat("t", []byte(rec), dataset.Options{})
		if err != nil {
			return
		}
		for fam, e := range encs {
			enc, err := e.EncodeChat(&res.Records[0])
			if err != nil {
				if errors.Is(err, ErrTemplate) && !strings.Contains(reply, "<") && !strings.Contains(user, "<") {
					t.Fatalf("%s: %v", fam, err)
				}
				continue
			}
			if len(enc.Loss) != len(enc.IDs) {
				t.Fatalf("%s: %d flags for %d ids", fam, len(enc.Loss), len(enc.IDs))
			}
			if _, _, err := e.alignTokens(enc.Text, enc.IDs, nil, nil); err != nil {
				t.Fatalf("%s: %v", fam, err)
			}
		}
	})
}
