package prep

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ferryml/ferry/shard"
	"github.com/ferryml/ferry/tokenize"
)

// chatConfig is a chat run over in (written to a file chats.jsonl in a
// temporary directory) with the Qwen2.5 tokenizer and its chat template.
func chatConfig(t *testing.T, in string) Config {
	t.Helper()
	dir := t.TempDir()
	p := filepath.Join(dir, "chats.jsonl")
	if err := os.WriteFile(p, []byte(in), 0o644); err != nil {
		t.Fatal(err)
	}
	return Config{
		Inputs: []string{p}, Tokenizer: qwenDir, Date: "2026-07-26",
		Layout: shard.Layout{SeqLen: 256, Mode: shard.ModePad},
		Ranks:  1, Workers: 2, Out: filepath.Join(dir, "out"),
	}
}

// trainedText decodes each row's trained tokens (labels != -100), runs of
// them joined by "|".
func trainedText(t *testing.T, out string) []string {
	t.Helper()
	m, r, err := shard.OpenDir(out, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	tok, err := tokenize.Load(qwenDir)
	if err != nil {
		t.Fatal(err)
	}
	rows := make([]string, r.NumRows())
	row := shard.Layout{SeqLen: m.SeqLen, Mode: m.Mode, Labels: m.Labels}.NewRow()
	for i := range rows {
		if err := r.Row(i, row); err != nil {
			t.Fatal(err)
		}
		var runs []string
		var cur []int32
		for j, l := range row.Labels {
			if l != shard.IgnoreIndex {
				cur = append(cur, row.InputIDs[j])
			} else if cur != nil {
				runs = append(runs, tok.Decode(cur, false))
				cur = nil
			}
		}
		if cur != nil {
			runs = append(runs, tok.Decode(cur, false))
		}
		rows[i] = strings.Join(runs, "|")
	}
	return rows
}

const twoTurns = `{"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"}, {"role": "user", "content": "Bye"}, {"role": "assistant", "content": "See you.  "}]}` + "\n"

func TestChatLabels(t *testing.T) {
	for _, tc := range []struct {
		labels shard.Labels
		want   string
	}{
		// the content through <|im_end|>; the role header and the "\n"
		// after <|im_end|> are not trained; the template trims nothing,
		// so the trailing spaces are part of the content
		{shard.LabelsAssistant, "Hello!<|im_end|>|See you.  <|im_end|>"},
		{shard.LabelsLastAssistant, "See you.  <|im_end|>"},
	} {
		t.Run(string(tc.labels), func(t *testing.T) {
			c := chatConfig(t, twoTurns)
			c.Layout.Labels = tc.labels
			res, err := Run(context.Background(), c)
			if err != nil {
				t.Fatal(err)
			}
			if got := trainedText(t, c.Out); len(got) != 1 || got[0] != tc.want {
				t.Errorf("trained %q, want %q", got, tc.want)
			}
			m := res.Manifest
			if m.Chat == nil || m.Chat.Date != "2026-07-26" || len(m.Chat.TemplateSHA256) != 64 || m.Labels != tc.labels {
				t.Errorf("manifest chat %+v, labels %s", m.Chat, m.Labels)
			}
		})
	}
}

// TestChatAutoDetect: without --format or --labels, messages records are
// chat data trained with --labels assistant.
func TestChatAutoDetect(t *testing.T) {
	c := chatConfig(t, twoTurns)
	res, err := Run(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	if res.Manifest.Labels != shard.LabelsAssistant || !strings.HasPrefix(res.Format, "chat") {
		t.Errorf("format %q labels %s, want chat with assistant", res.Format, res.Manifest.Labels)
	}
}

// TestChatAlpacaLabelsRefused: an Alpaca labels policy on data detected
// as chat is a configuration error, not silently replaced.
func TestChatAlpacaLabelsRefused(t *testing.T) {
	c := chatConfig(t, twoTurns)
	c.Layout.Labels = shard.LabelsMaskPad
	if _, err := Run(context.Background(), c); !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "--labels mask-pad is for Alpaca") {
		t.Fatalf("err %v, want a configuration error", err)
	}
}

// TestChatGenerationRefused: Qwen2.5's own template has no generation
// block, so --labels generation would train nothing: refused.
func TestChatGenerationRefused(t *testing.T) {
	c := chatConfig(t, twoTurns)
	c.Layout.Labels = shard.LabelsGeneration
	_, err := Run(context.Background(), c)
	if err == nil || !strings.Contains(err.Error(), "no {% generation %} block") {
		t.Fatalf("err %v, want the template refused", err)
	}
	if _, serr := os.Stat(filepath.Join(c.Out, shard.ManifestName)); serr == nil {
		t.Error("a manifest was written")
	}
}

// TestChatEOTRefused: a template that writes no end-of-turn token after
// the assistant's content is refused, naming it and the conversation.
func TestChatEOTRefused(t *testing.T) {
	c := chatConfig(t, twoTurns)
	tmpl := filepath.Join(t.TempDir(), "plain.jinja")
	os.WriteFile(tmpl, []byte("<|im_start|>{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}"), 0o644)
	c.ChatTemplate = tmpl
	_, err := Run(context.Background(), c)
	if err == nil || !strings.Contains(err.Error(), "plain.jinja") || !strings.Contains(err.Error(), "record 0") ||
		!strings.Contains(err.Error(), "untrained") {
		t.Fatalf("err %v, want the template refused for record 0", err)
	}
}

// TestChatTruncation: the start is kept; a conversation whose trained
// tokens are all cut off is dropped and counted.
func TestChatTruncation(t *testing.T) {
	long := `{"messages": [{"role": "user", "content": "` + strings.Repeat("word ", 300) + `"}, {"role": "assistant", "content": "ok"}]}` + "\n"
	c := chatConfig(t, twoTurns+long)
	c.Layout.SeqLen = 64
	res, err := Run(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	if st := res.Manifest.Stats; st.RecordsDropped != 1 || st.RecordsTruncated != 1 || res.Manifest.UniqueRows != 1 {
		t.Errorf("stats %+v, rows %d: want 1 dropped (and truncated), 1 row", st, res.Manifest.UniqueRows)
	}
}

// TestChatPack: packed rows keep every conversation's labels.
func TestChatPack(t *testing.T) {
	c := chatConfig(t, twoTurns+twoTurns+twoTurns)
	c.Layout.Mode = shard.ModePack
	c.Layout.SeqLen = 512
	if _, err := Run(context.Background(), c); err != nil {
		t.Fatal(err)
	}
	want := strings.Repeat("|Hello!<|im_end|>|See you.  <|im_end|>", 3)[1:]
	if got := trainedText(t, c.Out); len(got) != 1 || got[0] != want {
		t.Errorf("trained %q, want %q", got, want)
	}
}

// TestChatBadRecords: each bad conversation is an error naming the file,
// the record and the message; with --on-bad-record skip it is counted.
func TestChatBadRecords(t *testing.T) {
	good := `{"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"}]}`
	raising := "{% for m in messages %}{% if loop.index0 > 0 and m.role == messages[loop.index0 - 1].role %}" +
		"{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}" +
		"<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
	for _, tc := range []struct {
		name, rec, template, where, what string
	}{
		{"no assistant", `{"messages": [{"role": "user", "content": "Hi"}]}`, "", "messages", "no assistant message"},
		{"unknown role", `{"messages": [{"role": "user", "content": "Hi"}, {"role": "robot", "content": "beep"}, {"role": "assistant", "content": "x"}]}`, "", "messages[1]", `unknown role "robot"`},
		{"empty assistant", `{"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": " "}]}`, "", "messages[1]", "empty assistant message"},
		{"non-text part", `{"messages": [{"role": "user", "content": [{"type": "image", "image": "a.png"}]}, {"role": "assistant", "content": "x"}]}`, "", "messages[0].content[0]", `"image" part`},
		{"raise_exception", `{"messages": [{"role": "user", "content": "Hi"}, {"role": "user", "content": "again"}, {"role": "assistant", "content": "x"}]}`, raising, "messages[1]", "Conversation roles must alternate"},
		{"tools string", `{"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "x"}], "tools": "[{\"name\": "}`, "", "tools", "does not parse"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := chatConfig(t, good+"\n"+tc.rec+"\n"+good+"\n")
			c.Format = FormatChat
			if tc.template != "" {
				c.ChatTemplate = filepath.Join(t.TempDir(), "t.jinja")
				os.WriteFile(c.ChatTemplate, []byte(tc.template), 0o644)
			}
			_, err := Run(context.Background(), c)
			if err == nil {
				t.Fatal("no error")
			}
			msg := err.Error()
			for _, want := range []string{"chats.jsonl", "record 1", tc.where, tc.what} {
				if !strings.Contains(msg, want) {
					t.Errorf("error %q lacks %q", msg, want)
				}
			}
			if _, serr := os.Stat(filepath.Join(c.Out, shard.ManifestName)); !errors.Is(serr, os.ErrNotExist) {
				t.Error("a manifest was written")
			}
			c.SkipBad = true
			res, err := Run(context.Background(), c)
			if err != nil {
				t.Fatal(err)
			}
			if st := res.Manifest.Stats; st.RecordsSkipped != 1 || st.RecordsRead != 3 || res.Manifest.UniqueRows != 2 {
				t.Errorf("skip: stats %+v, %d rows; want 3 read, 1 skipped, 2 rows", st, res.Manifest.UniqueRows)
			}
		})
	}
}

// TestChatSplitLong: --split-long cuts a long conversation after a turn's
// end-of-turn token, so each turn's trained tokens stay whole in a piece.
func TestChatSplitLong(t *testing.T) {
	turn := `{"role": "user", "content": "` + strings.Repeat("ask ", 20) + `"}, {"role": "assistant", "content": "` + strings.Repeat("reply ", 20) + `"}`
	rec := `{"messages": [` + strings.Repeat(turn+", ", 5) + turn + `]}` + "\n"
	c := chatConfig(t, rec)
	c.Layout.Mode = shard.ModePack
	c.Layout.SeqLen = 128
	c.SplitLong = true
	res, err := Run(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	if res.Manifest.Stats.RecordsSplit != 1 {
		t.Fatalf("stats %+v: want 1 split", res.Manifest.Stats)
	}
	reply := strings.TrimSpace(strings.Repeat("reply ", 20))
	for _, row := range trainedText(t, c.Out) {
		runs := strings.Split(row, "<|im_end|>")
		if runs[len(runs)-1] != "" {
			t.Errorf("row %q: a trained run does not end with <|im_end|>", row)
		}
		for _, run := range runs[:len(runs)-1] {
			if strings.TrimSpace(strings.TrimPrefix(run, "|")) != reply {
				t.Errorf("a trained run %q is not one whole reply", run)
			}
		}
	}
}

// chatSplitInput writes a JSON Lines file of n varied conversations (every
// 7th one long, every 11th one bad: no assistant message) into dir and
// returns it with a compressed ShareGPT file after it, which a split run
// reads whole.
func chatSplitInput(t *testing.T, dir string, n int) []string {
	t.Helper()
	var b strings.Builder
	for i := range n {
		switch {
		case i%11 == 5:
			fmt.Fprintf(&b, `{"messages": [{"role": "user", "content": "lonely %d"}]}`+"\n", i)
		case i%7 == 3:
			fmt.Fprintf(&b, `{"messages": [{"role": "user", "content": "%s"}, {"role": "assistant", "content": "%s"}, {"role": "user", "content": "more %d"}, {"role": "assistant", "content": "ok %d"}]}`+"\n",
				strings.Repeat("tell me a long story ", 20+i%5), strings.Repeat("once upon a time ", 15), i, i)
		default:
			fmt.Fprintf(&b, `{"messages": [{"role": "system", "content": "Be brief (%d)."}, {"role": "user", "content": "What is %d + %d?"}, {"role": "assistant", "content": "%d."}]}`+"\n",
				i, i, i, 2*i)
		}
	}
	p := filepath.Join(dir, "chats.jsonl")
	if err := os.WriteFile(p, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return []string{p, filepath.Join("..", "..", "testdata", "chat", "fastchat-dummy", "dummy_conversation.json.zst")}
}

// TestChatSplitIdentical: a split run of chat data (RunPart for every
// part, in any order, then Commit) gives Run's bytes, loss labels, stats
// (skipped, truncated, dropped, split) and --max-records cut included.
func TestChatSplitIdentical(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name  string
		parts int
		mess  func(c *Config)
	}{
		{"pad skip drop", 3, func(c *Config) { c.Layout.SeqLen = 128; c.SkipBad = true }},
		{"pack split-long", 4, func(c *Config) {
			c.Layout.Mode, c.Layout.SeqLen, c.SplitLong, c.SkipBad = shard.ModePack, 96, true, true
		}},
		{"max-records last-assistant", 5, func(c *Config) {
			c.Layout.SeqLen, c.SkipBad, c.MaxRecords, c.Layout.Labels = 128, true, 150, shard.LabelsLastAssistant
		}},
		{"labels all", 2, func(c *Config) {
			c.Layout.Mode, c.Layout.SeqLen, c.Layout.Labels, c.SkipBad = shard.ModePack, 512, shard.LabelsAll, true
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			c := Config{
				Inputs: chatSplitInput(t, dir, 300), Tokenizer: qwenDir, Date: "2026-07-26",
				Layout: shard.Layout{SeqLen: 256, Mode: shard.ModePad},
				Ranks:  3, Seed: 7, Workers: 2,
			}
			tc.mess(&c)
			ref, split := filepath.Join(dir, "ref"), filepath.Join(dir, "split")
			c.Out = ref
			res, err := Run(ctx, c)
			if err != nil {
				t.Fatal(err)
			}
			c.Out = split
			ranged := false
			for i := tc.parts - 1; i >= 0; i-- {
				pr, err := RunPart(ctx, c, Part{I: i, N: tc.parts})
				if err != nil {
					t.Fatal(err)
				}
				if pr.Manifest.Options.Chat == nil || pr.Manifest.Options.Chat.Date != "2026-07-26" {
					t.Fatalf("part %d options %+v: want the chat template and date", i, pr.Manifest.Options)
				}
				for _, pc := range pr.Manifest.Share {
					ranged = ranged || pc.Off > 0
				}
			}
			if !ranged {
				t.Fatal("no part read a byte range: the test does not split the JSON Lines file")
			}
			cres, err := Commit(ctx, CommitConfig{Out: split, Workers: 2})
			if err != nil {
				t.Fatal(err)
			}
			sameDir(t, ref, split)
			st := res.Manifest.Stats
			if st.RecordsSkipped == 0 || (c.SplitLong && st.RecordsSplit == 0) || (!c.SplitLong && c.Layout.Labels != shard.LabelsAll && st.RecordsDropped == 0) {
				t.Errorf("stats %+v: the case does not exercise what it names", st)
			}
			if res.Format != cres.Format || res.InputBytes != cres.InputBytes || res.Bytes != cres.Bytes {
				t.Errorf("commit read %s %d/%d bytes, the single run %s %d/%d", cres.Format, cres.InputBytes, cres.Bytes,
					res.Format, res.InputBytes, res.Bytes)
			}
		})
	}
}

// TestChatSplitOptionsDiffer: parts made with a different chat template
// date do not commit, and the error names the part and the options.
func TestChatSplitOptionsDiffer(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	c := Config{
		Inputs: chatSplitInput(t, dir, 100), Tokenizer: qwenDir, Date: "2026-07-26",
		Layout: shard.Layout{SeqLen: 256, Mode: shard.ModePad}, SkipBad: true,
		Ranks: 1, Workers: 2, Out: filepath.Join(dir, "out"),
	}
	if _, err := RunPart(ctx, c, Part{I: 0, N: 2}); err != nil {
		t.Fatal(err)
	}
	c.Date = "2026-07-27"
	if _, err := RunPart(ctx, c, Part{I: 1, N: 2}); err != nil {
		t.Fatal(err)
	}
	_, err := Commit(ctx, CommitConfig{Out: c.Out})
	if err == nil || !strings.Contains(err.Error(), "part 1/2") || !strings.Contains(err.Error(), `"date":"2026-07-27"`) {
		t.Fatalf("commit: %v, want part 1/2's options named", err)
	}
}
