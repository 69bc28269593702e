package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"time"

	"github.com/ferryml/ferry/internal/encode"
	"github.com/ferryml/ferry/internal/prep"
	"github.com/ferryml/ferry/internal/procstat"
	"github.com/ferryml/ferry/tokenize"
)

// runFerry is `tokenize-bench ferry`: ferry's side alone, timed as
// bench/anchors/hf_tokenize.py --bench times HF's (EncodeBatch over the
// whole input, median of -runs after -warmup, by wall clock and by the
// process's CPU time), printed as the same JSON object. It was `dataprep
// tokenize --bench`; the product binary keeps only its ids-out contract.
//
//	go run ./bench/tokenize ferry -tokenizer DIR [-threads N] [-runs 5] [-warmup 1] [-no-special] [-alpaca -eos T] [IN.jsonl]
func runFerry(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("tokenize-bench ferry", flag.ContinueOnError)
	fs.SetOutput(stderr)
	tokPath := fs.String("tokenizer", "", "tokenizer.json, tokenizer.json.zst or a model `directory` (required)")
	threads := fs.Int("threads", 0, "tokenizer goroutines (0 = all CPUs)")
	runs := fs.Int("runs", 5, "timed runs")
	warmup := fs.Int("warmup", 1, "untimed runs first")
	noSpecial := fs.Bool("no-special", false, "add_special_tokens=false")
	alpaca := fs.Bool("alpaca", false, "input is Alpaca records, formatted with the seeds' template")
	eos := fs.String("eos", "", "with -alpaca: the `token` appended to each prompt")
	if err := fs.Parse(args); err != nil {
		return err
	}
	switch {
	case *tokPath == "":
		return fmt.Errorf("ferry: -tokenizer is required")
	case *runs < 1 || *warmup < 0:
		return fmt.Errorf("ferry: -runs must be >= 1 and -warmup >= 0")
	case fs.NArg() > 1:
		return fmt.Errorf("ferry: more than one input file")
	}
	tok, err := tokenize.Load(*tokPath)
	if err != nil {
		return err
	}
	th := *threads
	if th == 0 {
		th = runtime.GOMAXPROCS(0)
	}
	enc, err := encode.New(tok, encode.Config{BOS: tok.Special().BOS, EOS: *eos, AddSpecial: !*noSpecial})
	if err != nil {
		return err
	}
	name, in := "stdin", stdin
	if fs.NArg() == 1 {
		f, err := os.Open(fs.Arg(0))
		if err != nil {
			return err
		}
		defer f.Close()
		name, in = fs.Arg(0), f
	}
	p := &prep.IDs{Enc: enc, Threads: th, Name: name, Alpaca: *alpaca}
	data, err := io.ReadAll(in)
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	var texts []string
	if *alpaca {
		texts, err = p.AlpacaTexts(data)
	} else {
		lines := bytes.Split(bytes.TrimSuffix(data, []byte("\n")), []byte("\n"))
		if len(data) == 0 {
			lines = nil
		}
		for i := range lines {
			lines[i] = bytes.TrimSuffix(lines[i], []byte("\r"))
		}
		texts, err = p.DecodeLines(ctx, lines, 1)
	}
	if err != nil {
		return err
	}
	var nbytes, tokens int64
	for _, t := range texts {
		nbytes += int64(len(t))
	}
	special := !*noSpecial
	for range max(1, *warmup) {
		tokens = 0
		for _, ids := range tok.EncodeBatch(texts, special, th) {
			tokens += int64(len(ids))
		}
	}
	var wall, cpu []float64
	for range *runs {
		if err := ctx.Err(); err != nil {
			return err
		}
		c0, t0 := procstat.CPUSeconds(), time.Now()
		tok.EncodeBatch(texts, special, th)
		wall = append(wall, time.Since(t0).Seconds())
		cpu = append(cpu, procstat.CPUSeconds()-c0)
	}
	s, cs := procstat.Median(wall), procstat.Median(cpu)
	out, _ := json.Marshal(map[string]any{
		"tokenizer": *tokPath, "threads": th, "lines": len(texts), "bytes": nbytes, "tokens": tokens,
		"add_special_tokens": special, "runs_s": wall, "median_s": round4(s),
		"MB_per_s": round4(float64(nbytes) / s / 1e6), "tokens_per_s": int64(float64(tokens) / s),
		"median_cpu_s": round4(cs), "MB_per_cpu_s": round4(float64(nbytes) / cs / 1e6), "tokens_per_cpu_s": int64(float64(tokens) / cs),
	})
	_, err = fmt.Fprintf(stdout, "%s\n", out)
	return err
}

func round4(x float64) float64 {
	v, _ := strconv.ParseFloat(strconv.FormatFloat(x, 'f', 4, 64), 64)
	return v
}
