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

const tokenizeUsage = `usage: dataprep tokenize --tokenizer PATH [flags] [IN.jsonl]

Tokenizes JSONL {"text": ...} lines (stdin without IN) and writes one
{"ids": [...]} line per input line, in input order: the contract of HF's
reference tool bench/anchors/hf_tokenize.py, so the two outputs can be diffed.

Examples:
  dataprep tokenize --tokenizer models/qwen2.5 texts.jsonl > ids.jsonl
  dataprep tokenize --tokenizer tokenizer.json --no-special --threads 4 < texts.jsonl
  dataprep tokenize --tokenizer models/llama3.1 --alpaca --eos '<|eot_id|>' --out ids.jsonl alpaca.json

Flags:
`

func parseTokenizeFlags(args []string, stderr io.Writer) (*prep.TokenizeConfig, error) {
	c := &prep.TokenizeConfig{}
	fs := flag.NewFlagSet("dataprep tokenize", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, tokenizeUsage)
		fs.PrintDefaults()
	}
	fs.StringVar(&c.Tokenizer, "tokenizer", "", "tokenizer.json, tokenizer.json.zst or a model `directory` (required)")
	fs.BoolVar(&c.NoSpecial, "no-special", false, "add_special_tokens=false: no BOS/EOS from the post-processor (added-token strings in the text are still matched)")
	fs.IntVar(&c.Threads, "threads", 0, "tokenizer goroutines (0 = all CPUs)")
	fs.BoolVar(&c.Alpaca, "alpaca", false, "input is Alpaca records (JSON array or JSONL with instruction/input/output), read and formatted with the seeds' template as dataprep does")
	fs.StringVar(&c.EOS, "eos", "", "with --alpaca: the `token` appended to each prompt (the seeds append tokenizer.eos_token)")
	fs.IntVar(&c.MaxLength, "max-length", 0, "truncate to `N` ids, the special tokens included (0 = no limit)")
	fs.BoolVar(&c.Pad, "pad", false, "with --max-length: pad on the right to N ids with --pad-token")
	fs.StringVar(&c.PadToken, "pad-token", "", "the padding `token` (default: --eos, as the seeds set pad_token = eos_token)")
	fs.StringVar(&c.Out, "out", "-", "output `file`: - for stdout, none to discard the ids")
	fs.IntVar(&c.Batch, "batch", 4096, "JSONL lines read and encoded per batch")
	special := fs.Bool("special", false, "add_special_tokens=true (the default; for hf_tokenize.py compatibility)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil, err
		}
		return nil, fmt.Errorf("%w: %v", cli.ErrUsage, err)
	}
	bad := func(format string, a ...any) (*prep.TokenizeConfig, error) {
		fmt.Fprintf(stderr, "dataprep tokenize: "+format+"\n", a...)
		fs.Usage()
		return nil, fmt.Errorf("%w: "+format, append([]any{cli.ErrUsage}, a...)...)
	}
	switch {
	case c.Tokenizer == "":
		return bad("--tokenizer is required")
	case fs.NArg() > 1:
		return bad("more than one input file")
	case c.Alpaca && c.EOS == "" && !cli.FlagGiven(fs, "eos"):
		return bad("--alpaca needs --eos (the seeds append tokenizer.eos_token; --eos '' for none)")
	case *special && c.NoSpecial:
		return bad("--special and --no-special")
	}
	if err := c.Validate(); err != nil {
		return bad("%s", configMsg(err))
	}
	if fs.NArg() == 1 {
		c.Input = fs.Arg(0)
	}
	return c, nil
}

// runTokenize is `dataprep tokenize`.
func runTokenize(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	c, err := parseTokenizeFlags(args, stderr)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if _, err := prep.Tokenize(ctx, *c, stdin, stdout); err != nil {
		return fmt.Errorf("dataprep tokenize: %w", err)
	}
	return nil
}
