package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"time"

	"github.com/ferryml/ferry/internal/cli"
	"github.com/ferryml/ferry/internal/encode"
	"github.com/ferryml/ferry/internal/prep"
	"github.com/ferryml/ferry/tokenize"
)

const tokenizeUsage = `usage: dataprep tokenize --tokenizer PATH [flags] [IN.jsonl]

Tokenizes JSONL {"text": ...} lines (stdin without IN) and writes one
{"ids": [...]} line per input line, in input order: the contract of HF's
reference tool bench/anchors/hf_tokenize.py, so the two outputs can be diffed.

Examples:
  dataprep tokenize --tokenizer models/qwen2.5 texts.jsonl > ids.jsonl
  dataprep tokenize --tokenizer tokenizer.json --no-special --threads 4 < texts.jsonl
  dataprep tokenize --tokenizer models/llama3.1 --alpaca --eos '<|eot_id|>' --out none --bench-line alpaca.json

Flags:
`

// tokenizeConfig holds the flags of `dataprep tokenize`.
type tokenizeConfig struct {
	tokenizer string
	noSpecial bool
	threads   int
	alpaca    bool
	eos       string
	maxLength int
	pad       bool
	padToken  string
	out       string
	benchLine bool
	batch     int
	input     string // "" = stdin
}

func parseTokenizeFlags(args []string, stderr io.Writer) (*tokenizeConfig, error) {
	c := &tokenizeConfig{}
	fs := flag.NewFlagSet("dataprep tokenize", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, tokenizeUsage)
		fs.PrintDefaults()
	}
	fs.StringVar(&c.tokenizer, "tokenizer", "", "tokenizer.json, tokenizer.json.zst or a model `directory` (required)")
	fs.BoolVar(&c.noSpecial, "no-special", false, "add_special_tokens=false: no BOS/EOS from the post-processor (added-token strings in the text are still matched)")
	fs.IntVar(&c.threads, "threads", 0, "tokenizer goroutines (0 = all CPUs)")
	fs.BoolVar(&c.alpaca, "alpaca", false, "input is Alpaca records (JSON array or JSONL with instruction/input/output), read and formatted with the seeds' template as dataprep does")
	fs.StringVar(&c.eos, "eos", "", "with --alpaca: the `token` appended to each prompt (the seeds append tokenizer.eos_token)")
	fs.IntVar(&c.maxLength, "max-length", 0, "truncate to `N` ids, the special tokens included (0 = no limit)")
	fs.BoolVar(&c.pad, "pad", false, "with --max-length: pad on the right to N ids with --pad-token")
	fs.StringVar(&c.padToken, "pad-token", "", "the padding `token` (default: --eos, as the seeds set pad_token = eos_token)")
	fs.StringVar(&c.out, "out", "-", "output `file`: - for stdout, none to discard the ids")
	fs.BoolVar(&c.benchLine, "bench-line", false, `print a final {"bench": {...}} line with the encode throughput on stdout`)
	fs.IntVar(&c.batch, "batch", 4096, "JSONL lines read and encoded per batch")
	special := fs.Bool("special", false, "add_special_tokens=true (the default; for hf_tokenize.py compatibility)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil, err
		}
		return nil, fmt.Errorf("%w: %v", cli.ErrUsage, err)
	}
	bad := func(format string, a ...any) (*tokenizeConfig, error) {
		fmt.Fprintf(stderr, "dataprep tokenize: "+format+"\n", a...)
		fs.Usage()
		return nil, fmt.Errorf("%w: "+format, append([]any{cli.ErrUsage}, a...)...)
	}
	switch {
	case c.tokenizer == "":
		return bad("--tokenizer is required")
	case fs.NArg() > 1:
		return bad("more than one input file")
	case c.threads < 0:
		return bad("--threads must be >= 0")
	case c.alpaca && c.eos == "" && !flagSet(fs, "eos"):
		return bad("--alpaca needs --eos (the seeds append tokenizer.eos_token; --eos '' for none)")
	case c.maxLength < 0:
		return bad("--max-length must be >= 0")
	case c.pad && c.maxLength == 0:
		return bad("--pad needs --max-length")
	case c.batch < 1:
		return bad("--batch must be >= 1")
	case *special && c.noSpecial:
		return bad("--special and --no-special")
	}
	if c.pad && c.padToken == "" {
		c.padToken = c.eos
		if c.padToken == "" {
			return bad("--pad needs --pad-token or --eos")
		}
	}
	if fs.NArg() == 1 {
		c.input = fs.Arg(0)
	}
	return c, nil
}

func flagSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
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
	t0 := time.Now()
	tok, err := tokenize.Load(c.tokenizer)
	if err != nil {
		return fmt.Errorf("dataprep tokenize: %w", err)
	}
	padID := int32(-1)
	if c.pad {
		id, ok := tok.TokenID(c.padToken)
		if !ok {
			return fmt.Errorf("dataprep tokenize: pad token %q is not in the vocabulary of %s", c.padToken, c.tokenizer)
		}
		padID = id
	}
	threads := c.threads
	if threads == 0 {
		threads = runtime.GOMAXPROCS(0)
	}
	enc, err := encode.New(tok, encode.Config{
		BOS: tok.Special().BOS, EOS: c.eos, AddSpecial: !c.noSpecial,
		MaxLen: c.maxLength, Pad: c.pad, PadID: padID,
	})
	if err != nil {
		return fmt.Errorf("dataprep tokenize: %w", err)
	}
	name := c.input
	var in io.Reader = stdin
	if c.input != "" {
		f, err := os.Open(c.input)
		if err != nil {
			return fmt.Errorf("dataprep tokenize: %w", err)
		}
		defer f.Close()
		in = f
	} else {
		name = "stdin"
	}
	var out io.Writer
	var outFile *os.File
	switch c.out {
	case "-":
		out = stdout
	case "none":
	default:
		if outFile, err = os.Create(c.out); err != nil {
			return fmt.Errorf("dataprep tokenize: %w", err)
		}
		defer outFile.Close()
		out = outFile
	}
	loadS := time.Since(t0).Seconds()

	p := &prep.IDs{Enc: enc, Threads: threads, Name: name, Batch: c.batch, Alpaca: c.alpaca}
	st, err := p.Write(ctx, in, out)
	if err != nil {
		return fmt.Errorf("dataprep tokenize: %w", err)
	}
	if outFile != nil {
		if err := outFile.Close(); err != nil {
			return fmt.Errorf("dataprep tokenize: %w", err)
		}
	}
	if c.benchLine {
		s := st.Encode.Seconds()
		line, _ := json.Marshal(map[string]any{"bench": map[string]any{
			"load_s": tokRound4(loadS), "read_s": tokRound4(st.Read.Seconds()), "encode_s": tokRound4(s),
			"lines": st.Lines, "bytes": st.Bytes, "tokens": st.Tokens,
			"encode_mb_per_s": tokRound4(float64(st.Bytes) / s / 1e6), "tokens_per_s": int64(float64(st.Tokens) / s),
			"threads": threads,
		}})
		if _, err := fmt.Fprintf(stdout, "%s\n", line); err != nil {
			return fmt.Errorf("dataprep tokenize: %w", err)
		}
	}
	return nil
}

func tokRound4(x float64) float64 {
	v, _ := strconv.ParseFloat(strconv.FormatFloat(x, 'f', 4, 64), 64)
	return v
}
