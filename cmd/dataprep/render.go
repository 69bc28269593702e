package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/ferryml/ferry/internal/cli"
	"github.com/ferryml/ferry/internal/prep"
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

func parseRenderFlags(args []string, stderr io.Writer) (*prep.RenderConfig, error) {
	c := &prep.RenderConfig{}
	var onBad string
	fs := flag.NewFlagSet("dataprep render", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, renderUsage)
		fs.PrintDefaults()
	}
	fs.StringVar(&c.Tokenizer, "tokenizer", "", "the model's tokenizer `directory` (tokenizer.json, tokenizer_config.json, its chat template) (required)")
	fs.StringVar(&c.ChatTemplate, "chat-template", "", "a Jinja chat template `file` to use instead of the tokenizer directory's")
	fs.StringVar(&c.TemplateName, "template-name", "", "which of the directory's named chat templates (e.g. tool_use); default: \"default\"")
	fs.StringVar(&c.Date, "date", "", "pin strftime_now to this `YYYY-MM-DD` (midnight UTC); default: the clock")
	fs.BoolVar(&c.AddGenerationPrompt, "add-generation-prompt", false, "add_generation_prompt=True: end with the assistant's header")
	fs.StringVar(&onBad, "on-bad-record", "stop", "`stop` at the first record that cannot be read or rendered, or skip it, writing {\"record\": N, \"error\": ...} instead")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil, err
		}
		return nil, fmt.Errorf("%w: %v", cli.ErrUsage, err)
	}
	bad := func(format string, a ...any) (*prep.RenderConfig, error) {
		fmt.Fprintf(stderr, "dataprep render: "+format+"\n", a...)
		fs.Usage()
		return nil, fmt.Errorf("%w: "+format, append([]any{cli.ErrUsage}, a...)...)
	}
	switch {
	case c.Tokenizer == "":
		return bad("--tokenizer is required")
	case fs.NArg() > 1:
		return bad("more than one input file")
	case onBad != "stop" && onBad != "skip":
		return bad("--on-bad-record is stop or skip, not %q", onBad)
	}
	if err := c.Validate(); err != nil {
		return bad("%s", configMsg(err))
	}
	if fs.NArg() == 1 {
		c.Input = fs.Arg(0)
	}
	c.SkipBad = onBad == "skip"
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
	r, err := prep.Render(ctx, *c, stdin, stdout)
	if errors.Is(err, prep.ErrConfig) { // no chat template, a bad --chat-template
		fmt.Fprintf(stderr, "dataprep render: %s\n", configMsg(err))
		return cli.Usage(err)
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(stderr, "dataprep render: %s: %d records rendered with %s, %d skipped\n", r.Name, r.Rendered, r.Template, r.Skipped)
	return nil
}
