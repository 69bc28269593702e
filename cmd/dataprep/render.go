package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"time"

	"github.com/ferryml/ferry/chattemplate"
	"github.com/ferryml/ferry/internal/cli"
	"github.com/ferryml/ferry/internal/dataset"
	"github.com/ferryml/ferry/tokenize"
)

const renderUsage = `usage: dataprep render --tokenizer DIR [flags] [IN]

Renders conversations with the model's chat template exactly as transformers'
apply_chat_template does, and writes one JSON object per record and line:

  {"record": N, "text": "<the rendered text>", "input_ids": [...]}

input_ids are ferry's tokenization of the text with add_special_tokens=false,
which is what apply_chat_template(tokenize=True) returns. IN (stdin without it)
is a JSON array, JSON Lines or Parquet file, optionally gzip/zstd, local or
s3://. A record is an object with "messages" (role/content), an object with
ShareGPT "conversations" (from/value: human->user, gpt->assistant,
system->system, observation->tool, function_call->assistant with a tool call),
or a JSON Lines line that is a bare array of messages; a file holding one
JSON object is one record. Optional record fields: "tools" (a list, or a JSON
string of one), "system", "chat_template_kwargs" (an object). Messages are
normalised as transformers does before rendering (null-valued keys dropped,
reasoning fields aliased). Content parts other than text are a bad record.

The template is the tokenizer directory's (chat_template.jinja, the
chat_template of tokenizer_config.json, or chat_template.json), or
--chat-template FILE; strftime_now reads the clock unless --date pins it.

Examples:
  dataprep render --tokenizer models/qwen2.5 chats.jsonl | head -1 | jq -r .text
  dataprep render --tokenizer models/llama3.1 --date 2026-07-26 --add-generation-prompt chats.json

Flags:
`

type renderConfig struct {
	tokenizer, chatTemplate, templateName string
	date                                  string
	addGenerationPrompt                   bool
	onBad                                 string
	input                                 string // "" = stdin
}

func parseRenderFlags(args []string, stderr io.Writer) (*renderConfig, error) {
	c := &renderConfig{}
	fs := flag.NewFlagSet("dataprep render", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, renderUsage)
		fs.PrintDefaults()
	}
	fs.StringVar(&c.tokenizer, "tokenizer", "", "the model's tokenizer `directory` (tokenizer.json, tokenizer_config.json, its chat template) (required)")
	fs.StringVar(&c.chatTemplate, "chat-template", "", "a Jinja chat template `file` to use instead of the tokenizer directory's")
	fs.StringVar(&c.templateName, "template-name", "", "which of the directory's named chat templates (e.g. tool_use); default: \"default\"")
	fs.StringVar(&c.date, "date", "", "pin strftime_now to this `YYYY-MM-DD` (midnight UTC); default: the clock")
	fs.BoolVar(&c.addGenerationPrompt, "add-generation-prompt", false, "add_generation_prompt=True: end with the assistant's header")
	fs.StringVar(&c.onBad, "on-bad-record", "stop", "`stop` at the first record that cannot be read or rendered, or skip it, writing {\"record\": N, \"error\": ...} instead")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil, err
		}
		return nil, fmt.Errorf("%w: %v", cli.ErrUsage, err)
	}
	bad := func(format string, a ...any) (*renderConfig, error) {
		fmt.Fprintf(stderr, "dataprep render: "+format+"\n", a...)
		fs.Usage()
		return nil, fmt.Errorf("%w: "+format, append([]any{cli.ErrUsage}, a...)...)
	}
	switch {
	case c.tokenizer == "":
		return bad("--tokenizer is required")
	case fs.NArg() > 1:
		return bad("more than one input file")
	case c.onBad != "stop" && c.onBad != "skip":
		return bad("--on-bad-record is stop or skip, not %q", c.onBad)
	case c.chatTemplate != "" && c.templateName != "":
		return bad("--chat-template and --template-name exclude each other")
	}
	if c.date != "" {
		if _, err := time.Parse(time.DateOnly, c.date); err != nil {
			return bad("--date %q is not YYYY-MM-DD", c.date)
		}
	}
	if fs.NArg() == 1 {
		c.input = fs.Arg(0)
	}
	return c, nil
}

func runRender(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	c, err := parseRenderFlags(args, stderr)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	tmpl, special, err := chattemplate.FromTokenizerDir(c.tokenizer, c.templateName)
	if c.chatTemplate != "" {
		if special, err = chattemplate.SpecialTokens(c.tokenizer); err != nil {
			return err
		}
		src, rerr := os.ReadFile(c.chatTemplate)
		if rerr != nil {
			return rerr
		}
		tmpl, err = chattemplate.Parse(c.chatTemplate, string(src))
	}
	if err != nil {
		return err
	}
	tok, err := tokenize.Load(c.tokenizer)
	if err != nil {
		return err
	}
	opts := &chattemplate.Options{}
	if c.date != "" {
		day, _ := time.Parse(time.DateOnly, c.date)
		opts.Now = func() time.Time { return day }
	}

	var bad []*dataset.RecordError
	ropt := dataset.Options{}
	if c.onBad == "skip" {
		ropt.OnBad = func(e *dataset.RecordError) error {
			bad = append(bad, e)
			return nil
		}
	}
	name := c.input
	var res *dataset.ChatResult
	if name == "" {
		name = "stdin"
		raw, rerr := io.ReadAll(stdin)
		if rerr != nil {
			return fmt.Errorf("stdin: %w", rerr)
		}
		res, err = dataset.ParseChat(name, raw, ropt)
	} else {
		res, err = dataset.ReadChat(ctx, name, ropt)
	}
	if err != nil {
		return err
	}
	sort.Slice(bad, func(i, j int) bool { return bad[i].Index < bad[j].Index })

	w := bufio.NewWriterSize(stdout, 1<<20)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false) // the text as Python's json.dumps(ensure_ascii=False) would show it
	type okLine struct {
		Record   int64   `json:"record"`
		Text     string  `json:"text"`
		InputIDs []int32 `json:"input_ids"`
	}
	type badLine struct {
		Record int64  `json:"record"`
		Error  string `json:"error"`
	}
	rendered, skipped := 0, 0
	flushBad := func(upTo int64) error {
		for len(bad) > 0 && bad[0].Index < upTo {
			if err := enc.Encode(badLine{Record: bad[0].Index, Error: bad[0].Error()}); err != nil {
				return err
			}
			bad = bad[1:]
			skipped++
		}
		return nil
	}
	for i, conv := range res.Records {
		if err := ctx.Err(); err != nil {
			return err
		}
		idx := res.Samples[i]
		if err := flushBad(idx); err != nil {
			return err
		}
		out, err := tmpl.Apply(chattemplate.Chat{Messages: conv.Messages, Tools: conv.Tools, Kwargs: conv.Kwargs,
			AddGenerationPrompt: c.addGenerationPrompt}, special, opts)
		if err != nil {
			if c.onBad != "skip" {
				return fmt.Errorf("%s: record %d: %w", name, idx, err)
			}
			if err := enc.Encode(badLine{Record: idx, Error: err.Error()}); err != nil {
				return err
			}
			skipped++
			continue
		}
		ids := tok.Encode(out.Text, false)
		if ids == nil {
			ids = []int32{}
		}
		if err := enc.Encode(okLine{Record: idx, Text: out.Text, InputIDs: ids}); err != nil {
			return err
		}
		rendered++
	}
	if err := flushBad(1 << 62); err != nil {
		return err
	}
	if err := w.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(stderr, "dataprep render: %s: %d records rendered with %s, %d skipped\n", name, rendered, tmpl.Name(), skipped)
	return nil
}
