package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/ferryml/ferry/bench/internal/harness"
)

const trlChatPrepPy = "bench/anchors/trl_chat_prep.py"

// chatPrepTemplates are TRL's training templates (with {% generation %}
// blocks) for the seed tokenizers: dataprep --labels generation and TRL's
// assistant_only_loss train the same tokens with them.
var chatPrepTemplates = map[string]string{
	"qwen2.5":  "testdata/chattemplate/trl/qwen2_5_training.jinja",
	"llama3.1": "testdata/chattemplate/trl/llama3_training.jinja",
}

// chatPrepJobs: dataprep --format chat against TRL's dataset preparation
// (bench/anchors/trl_chat_prep.py: datasets.map of apply_chat_template with
// return_assistant_tokens_mask, num_proc = cores, then labels), Qwen2.5 and
// Llama-3.1, 16 ranks, pad and pack, on the dev chat data cycled to 50 MB
// of JSON Lines (quick: 2 MB; $FERRY_BENCH_CHAT_MB sets another size).
// Qwen2.5's input is the fastchat ShareGPT conversations (as messages) and
// the stock tool-call conversations; Llama-3.1's is the fastchat ones only,
// since TRL's Llama-3 training template writes no tool calls. Both sides
// run once per job (TRL takes minutes on 50 MB); the check compares every
// conversation's input_ids and labels.
func chatPrepJobs(e *env) ([]harness.Job, []string) {
	const seqLen, ranks, date = "4096", "16", "2026-07-26"
	mb := 50.0
	if e.c.mode == "quick" {
		mb = 2
	}
	if v := os.Getenv("FERRY_BENCH_CHAT_MB"); v != "" {
		if f, err := strconv.ParseFloat(v, 64); err == nil && f > 0 {
			mb = f
		}
	}
	why := ""
	if e.tools["transformers"] == "" || e.tools["datasets"] == "" {
		why = e.c.python + " cannot import transformers and datasets (scripts/setup-test-deps)"
	}
	dataprep, whyBin := e.goBuild("cmd/dataprep")
	if whyBin == "" {
		whyBin = requireFlags(e.helpText(dataprep), "dataprep", "format", "chat-template", "labels", "date", "workers")
	}
	if why == "" {
		why = whyBin
	}
	var jobs []harness.Job
	var inputs []string
	for _, t := range seedTokenizers {
		in := filepath.Join(e.c.work, fmt.Sprintf("chat-prep-%s-%s.jsonl", t.name, e.c.mode))
		withTools := t.name == "qwen2.5"
		jwhy := why
		if jwhy == "" && !e.c.list {
			n, size, err := writeChatPrepInput(in, withTools, int64(mb*(1<<20)))
			if err != nil {
				jwhy = "chat input: " + err.Error()
			} else {
				what := "fastchat-dummy"
				if withTools {
					what += " + msfoundry-stock (tool calls)"
				}
				inputs = append(inputs, fmt.Sprintf("dataprep chat %s: %s — %d conversations (%.1f MB of JSON Lines, messages) cycled from testdata/chat/%s",
					t.name, in, n, float64(size)/(1<<20), what))
			}
		}
		tmpl := chatPrepTemplates[t.name]
		dir := ""
		if jwhy == "" && !e.c.list {
			var err error
			if dir, err = e.chatTokenizerDir(t.name); err != nil {
				jwhy = "tokenizer: " + err.Error()
			}
		}
		for _, mode := range []string{"pad", "pack"} {
			name := fmt.Sprintf("dataprep chat %s %s", t.name, mode)
			slug := slugify(name)
			outDir := filepath.Join(e.c.work, "out-"+e.c.mode, slug+".shards")
			trlDir := filepath.Join(e.c.work, "out-"+e.c.mode, slug+".trl")
			j := harness.Job{
				Name: name, Group: "chat",
				Metric: harness.Metric{Name: "wall_s", Unit: "s"},
				Ferry: harness.Side{
					Label: fmt.Sprintf("ferry dataprep --format chat --labels generation --mode %s --ranks %s --seq-len %s", mode, ranks, seqLen),
					Cmd: harness.Command{
						Argv: []string{dataprep, "--format", "chat", "--input", in, "--tokenizer", dir, "--chat-template", tmpl, "--labels", "generation",
							"--seq-len", seqLen, "--ranks", ranks, "--mode", mode, "--date", date,
							"--workers", strconv.Itoa(e.c.threads), "--quiet", "--out", outDir},
						Stdout: e.outPath(slug, "ferry"),
						Before: func() error { return os.RemoveAll(outDir) },
					},
				},
				Anchor: harness.Side{
					Label: fmt.Sprintf("TRL-style prep (datasets %s .map of transformers %s apply_chat_template + assistant masks, num_proc %d)",
						e.tools["datasets"], e.tools["transformers"], e.c.threads),
					Cmd: harness.Command{
						Argv:   []string{e.c.python, trlChatPrepPy, dir, tmpl, in, trlDir},
						Stdout: e.outPath(slug, "trl"),
						Before: func() error {
							if err := os.RemoveAll(trlDir); err != nil {
								return err
							}
							return os.MkdirAll(trlDir, 0o755)
						},
					},
				},
				Check: func() (string, error) {
					out, err := exec.Command(e.c.python, trlChatPrepPy, "check", outDir, trlDir).CombinedOutput()
					if err != nil {
						return "", fmt.Errorf("%s check: %v: %s", trlChatPrepPy, err, strings.TrimSpace(string(out)))
					}
					return strings.TrimSpace(string(out)), nil
				},
				NoWarmup:    true,
				MaxPairs:    1,
				Unavailable: jwhy,
			}
			jobs = append(jobs, j)
		}
	}
	return jobs, inputs
}

// writeChatPrepInput writes the dev chat conversations to path as JSON
// Lines of {"messages": ...} records (fastchat's ShareGPT turns mapped to
// roles; with tools, the stock tool-call records as they are), cycled until
// the file holds at least size bytes. It returns the records and bytes
// written.
func writeChatPrepInput(path string, tools bool, size int64) (int, int64, error) {
	b, err := readZstd("testdata/chat/fastchat-dummy/dummy_conversation.json.zst")
	if err != nil {
		return 0, 0, err
	}
	var fast []struct {
		Conversations []struct {
			From  string `json:"from"`
			Value string `json:"value"`
		} `json:"conversations"`
	}
	if err := json.Unmarshal(b, &fast); err != nil {
		return 0, 0, fmt.Errorf("fastchat-dummy: %w", err)
	}
	roles := map[string]string{"human": "user", "gpt": "assistant", "system": "system"}
	var lines [][]byte
	for i, c := range fast {
		type msg struct {
			Role    string `json:"role"`
			Content string `json:"content"`
		}
		var ms []msg
		for _, turn := range c.Conversations {
			r, ok := roles[turn.From]
			if !ok {
				return 0, 0, fmt.Errorf("fastchat-dummy: record %d: role %q", i, turn.From)
			}
			ms = append(ms, msg{r, turn.Value})
		}
		line, err := json.Marshal(map[string]any{"messages": ms})
		if err != nil {
			return 0, 0, err
		}
		lines = append(lines, line)
	}
	if tools {
		b, err := readZstd("testdata/chat/msfoundry-stock/stock_toolcall_training.jsonl.zst")
		if err != nil {
			return 0, 0, err
		}
		for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
			lines = append(lines, []byte(l))
		}
	}
	f, err := os.Create(path)
	if err != nil {
		return 0, 0, err
	}
	w := bufio.NewWriterSize(f, 1<<20)
	var n int
	var written int64
	for written < size {
		for _, l := range lines {
			w.Write(l)
			w.WriteByte('\n')
			written += int64(len(l)) + 1
			n++
		}
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return 0, 0, err
	}
	return n, written, f.Close()
}
