package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"

	"github.com/ferryml/ferry/internal/prep"
)

// runIDs is `tokenize-bench ids`: `dataprep tokenize`'s whole pass
// (prep.Tokenize: load the tokenizer, read the input, encode, write the
// ids) with the same flags, then a final {"bench": {...}} line on stdout
// with the times and the encode throughput, as bench/anchors/hf_tokenize.py
// --bench-line prints HF's. The bench harness's tokenize jobs run it
// against that anchor. It was `dataprep tokenize --bench-line`; the product
// binary keeps only its ids-out contract.
//
//	go run ./bench/tokenize ids -tokenizer DIR [-threads N] [-alpaca -eos T] [-max-length N [-pad]] [-no-special] [-out FILE|none] [IN.jsonl]
func runIDs(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	var c prep.TokenizeConfig
	fs := flag.NewFlagSet("tokenize-bench ids", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&c.Tokenizer, "tokenizer", "", "tokenizer.json, tokenizer.json.zst or a model `directory` (required)")
	fs.BoolVar(&c.NoSpecial, "no-special", false, "add_special_tokens=false")
	fs.IntVar(&c.Threads, "threads", 0, "tokenizer goroutines (0 = all CPUs)")
	fs.BoolVar(&c.Alpaca, "alpaca", false, "input is Alpaca records, formatted with the seeds' template")
	fs.StringVar(&c.EOS, "eos", "", "with -alpaca: the `token` appended to each prompt")
	fs.IntVar(&c.MaxLength, "max-length", 0, "truncate to `N` ids (0 = no limit)")
	fs.BoolVar(&c.Pad, "pad", false, "with -max-length: pad to N ids with -pad-token (default: -eos)")
	fs.StringVar(&c.PadToken, "pad-token", "", "the padding `token`")
	fs.StringVar(&c.Out, "out", "-", "output `file`: - for stdout, none to discard the ids")
	fs.IntVar(&c.Batch, "batch", 4096, "JSONL lines read and encoded per batch")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 1 {
		return fmt.Errorf("ids: more than one input file")
	}
	if fs.NArg() == 1 {
		c.Input = fs.Arg(0)
	}
	r, err := prep.Tokenize(ctx, c, stdin, stdout)
	if err != nil {
		return err
	}
	s := r.Encode.Seconds()
	line, _ := json.Marshal(map[string]any{"bench": map[string]any{
		"load_s": round4(r.Load.Seconds()), "read_s": round4(r.Read.Seconds()), "encode_s": round4(s),
		"lines": r.Lines, "bytes": r.Bytes, "tokens": r.Tokens,
		"encode_mb_per_s": round4(float64(r.Bytes) / s / 1e6), "tokens_per_s": int64(float64(r.Tokens) / s),
		"threads": r.Threads,
	}})
	_, err = fmt.Fprintf(stdout, "%s\n", line)
	return err
}
