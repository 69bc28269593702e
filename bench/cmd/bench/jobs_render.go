package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"github.com/ferryml/ferry/bench/internal/harness"
)

const hfRenderPy = "bench/anchors/hf_render.py"

// chatRenderJobs: chat-template rendering, ferry's chattemplate
// (bench/chatrender) against transformers' apply_chat_template
// (tokenize=False, bench/anchors/hf_render.py), both timed around the
// rendering alone, on the dev chat data (testdata/chat/fastchat-dummy: 500
// ShareGPT conversations) with the Qwen2.5 and Llama-3.1 templates and
// strftime_now pinned. The check compares every rendered text.
func chatRenderJobs(e *env) ([]harness.Job, []string) {
	const date = "2026-07-26"
	repeat := 5
	if e.c.mode == "quick" {
		repeat = 1
	}
	bin, why := e.goBuild("bench/chatrender")
	if why == "" && e.tools["transformers"] == "" {
		why = e.c.python + " cannot import transformers (scripts/setup-test-deps)"
	}
	in := filepath.Join(e.c.work, "chat-fastchat-dummy.json")
	if why == "" && !e.c.list {
		b, err := readZstd("testdata/chat/fastchat-dummy/dummy_conversation.json.zst")
		if err == nil {
			err = os.WriteFile(in, b, 0o644)
		}
		if err != nil {
			why = "chat input: " + err.Error()
		}
	}
	var jobs []harness.Job
	for _, t := range seedTokenizers {
		name := "chat render " + t.name
		slug := slugify(name)
		ferryTexts, hfTexts := e.outPath(slug, "ferry-texts"), e.outPath(slug, "hf-texts")
		j := harness.Job{
			Name: name, Group: "chat",
			Metric: harness.Metric{Name: "render_s", Unit: "s"},
			Extra:  []harness.ExtraMetric{{Metric: harness.Metric{Name: "conv_per_s", Unit: "conv/s", HigherIsBetter: true}}},
			Ferry: harness.Side{Label: "ferry chattemplate (bench/chatrender)", Cmd: harness.Command{
				Argv:   []string{bin, "-date", date, "-repeat", strconv.Itoa(repeat), "-out", ferryTexts, "-tokenizer"},
				Stdout: e.outPath(slug, "ferry"),
			}},
			Anchor: harness.Side{Label: "transformers " + e.tools["transformers"] + " apply_chat_template(tokenize=False)", Cmd: harness.Command{
				Argv:   []string{e.c.python, hfRenderPy},
				Stdout: e.outPath(slug, "hf"),
			}},
			Unavailable: why,
		}
		if why == "" && !e.c.list {
			dir, err := e.chatTokenizerDir(t.name)
			if err != nil {
				j.Unavailable = "tokenizer: " + err.Error()
			}
			j.Ferry.Cmd.Argv = append(j.Ferry.Cmd.Argv, dir, in)
			j.Anchor.Cmd.Argv = append(j.Anchor.Cmd.Argv, dir, date, strconv.Itoa(repeat), in, hfTexts)
			j.Check = func() (string, error) { return compareTexts(ferryTexts, hfTexts) }
		}
		jobs = append(jobs, j)
	}
	return jobs, []string{fmt.Sprintf("chat render: testdata/chat/fastchat-dummy (500 ShareGPT conversations) x %d, strftime_now %s", repeat, date)}
}

// chatTokenizerDir is tokenizerDir with the family's chat template files
// (testdata/chattemplate/families/NAME) laid over it.
func (e *env) chatTokenizerDir(name string) (string, error) {
	dir, err := e.tokenizerDir(name)
	if err != nil {
		return "", err
	}
	fam := filepath.Join("testdata/chattemplate/families", name)
	ents, err := os.ReadDir(fam)
	if err != nil {
		return "", err
	}
	for _, ent := range ents {
		b, err := os.ReadFile(filepath.Join(fam, ent.Name()))
		if err != nil {
			return "", err
		}
		if err := os.WriteFile(filepath.Join(dir, ent.Name()), b, 0o644); err != nil {
			return "", err
		}
	}
	return dir, nil
}

// compareTexts checks that two {"text": ...} JSON Lines files hold the same
// texts (their JSON spelling differs: Go and Python escape differently).
func compareTexts(a, b string) (string, error) {
	ta, err := readTexts(a)
	if err != nil {
		return "", err
	}
	tb, err := readTexts(b)
	if err != nil {
		return "", err
	}
	if len(ta) != len(tb) {
		return "", fmt.Errorf("%d texts from ferry, %d from transformers", len(ta), len(tb))
	}
	for i := range ta {
		if ta[i] != tb[i] {
			return "", fmt.Errorf("conversation %d renders differently", i)
		}
	}
	return fmt.Sprintf("%d rendered texts identical", len(ta)), nil
}

func readTexts(path string) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 64<<20)
	var out []string
	for sc.Scan() {
		var v struct {
			Text string `json:"text"`
		}
		if err := json.Unmarshal(sc.Bytes(), &v); err != nil {
			return nil, fmt.Errorf("%s: line %d: %v", path, len(out)+1, err)
		}
		out = append(out, v.Text)
	}
	return out, sc.Err()
}
