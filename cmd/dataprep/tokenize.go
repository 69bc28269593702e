package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/ferryml/ferry/internal/cli"
	"github.com/ferryml/ferry/internal/dataset"
	"github.com/ferryml/ferry/internal/encode"
	"github.com/ferryml/ferry/internal/procstat"
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
	bench     bool
	runs      int
	warmup    int
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
	fs.BoolVar(&c.bench, "bench", false, "time EncodeBatch over the whole input --runs times after --warmup and print one JSON object, as bench/anchors/hf_tokenize.py --bench does (no ids are written)")
	fs.IntVar(&c.runs, "runs", 5, "with --bench: timed runs")
	fs.IntVar(&c.warmup, "warmup", 1, "with --bench: untimed runs first")
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
	case c.bench && (c.runs < 1 || c.warmup < 0):
		return bad("--runs must be >= 1 and --warmup >= 0")
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
	var bw *bufio.Writer
	if out != nil {
		bw = bufio.NewWriterSize(out, 1<<20)
	}
	loadS := time.Since(t0).Seconds()

	p := &tokenizePass{tok: tok, enc: enc, cfg: c, threads: threads, name: name}
	t1 := time.Now()
	if c.bench {
		return p.bench(ctx, in, stdout)
	}
	if c.alpaca {
		data, err := io.ReadAll(in)
		if err != nil {
			return fmt.Errorf("dataprep tokenize: %s: %w", name, err)
		}
		texts, err := p.alpacaTexts(data)
		if err != nil {
			return err
		}
		p.readS = time.Since(t1).Seconds()
		if err := p.run(ctx, texts, nil, 1, bw); err != nil {
			return err
		}
	} else {
		br := bufio.NewReaderSize(in, 1<<20)
		lineNo := 1
		for {
			lines, n, eof, err := readLineBatch(br, c.batch, 8<<20)
			if err != nil {
				return fmt.Errorf("dataprep tokenize: %s: line %d: %w", name, lineNo+n, err)
			}
			if len(lines) > 0 {
				if err := p.run(ctx, nil, lines, lineNo, bw); err != nil {
					return err
				}
			}
			lineNo += n
			if eof {
				break
			}
		}
	}
	if bw != nil {
		if err := bw.Flush(); err != nil {
			return fmt.Errorf("dataprep tokenize: writing output: %w", err)
		}
	}
	if outFile != nil {
		if err := outFile.Close(); err != nil {
			return fmt.Errorf("dataprep tokenize: %w", err)
		}
	}
	if c.benchLine {
		enc := p.encodeS.Load()
		s := float64(enc) / 1e9
		line, _ := json.Marshal(map[string]any{"bench": map[string]any{
			"load_s": tokRound4(loadS), "read_s": tokRound4(p.readS), "encode_s": tokRound4(s),
			"lines": p.lines, "bytes": p.bytes, "tokens": p.tokens,
			"encode_mb_per_s": tokRound4(float64(p.bytes) / s / 1e6), "tokens_per_s": int64(float64(p.tokens) / s),
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

// readLineBatch reads up to maxLines lines or about maxBytes bytes. Blank lines
// are kept (and rejected later, with their number); the last line may lack
// its newline. n is the number of lines consumed.
func readLineBatch(br *bufio.Reader, maxLines, maxBytes int) (lines [][]byte, n int, eof bool, err error) {
	size := 0
	for len(lines) < maxLines && size < maxBytes {
		line, err := br.ReadBytes('\n')
		if len(line) > 0 {
			line = bytes.TrimSuffix(line, []byte("\n"))
			line = bytes.TrimSuffix(line, []byte("\r"))
			lines = append(lines, line)
			size += len(line)
			n++
		}
		if err == io.EOF {
			return lines, n, true, nil
		}
		if err != nil {
			return lines, n, false, err
		}
	}
	return lines, n, false, nil
}

// lineChunk is the number of lines a goroutine decodes or formats at a time.
const lineChunk = 32

// tokenizePass encodes batches of texts in parallel and writes their ids in order.
type tokenizePass struct {
	tok     *tokenize.Tokenizer
	enc     *encode.Encoder
	cfg     *tokenizeConfig
	threads int
	name    string

	readS                float64
	lines, bytes, tokens int64
	encodeS              atomic.Int64 // nanoseconds in encode, summed over all batches (wall)
}

// run encodes texts (or JSONL lines to decode first; firstLine numbers
// them) and writes the ids to w (nil: discard). Decoding the JSON, encoding
// and formatting the output are three parallel phases, so that encode_s of
// --bench-line times the tokenizer alone, as hf_tokenize.py times encode_batch.
func (p *tokenizePass) run(ctx context.Context, texts []string, lines [][]byte, firstLine int, w *bufio.Writer) error {
	n := len(texts)
	if lines != nil {
		n = len(lines)
		var err error
		if texts, err = p.decodeLines(ctx, lines, firstLine); err != nil {
			return err
		}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	start := time.Now()
	ids, err := p.enc.EncodeTexts(ctx, texts, p.threads)
	p.encodeS.Add(int64(time.Since(start)))
	if err != nil {
		return err
	}
	for i := range texts {
		p.lines++
		p.bytes += int64(len(texts[i]))
		p.tokens += int64(len(ids[i]))
	}
	if w == nil {
		return nil
	}
	out := make([][]byte, n)
	if err := encode.Parallel(ctx, n, p.threads, lineChunk, func(lo, hi int) error {
		for i := lo; i < hi; i++ {
			out[i] = appendIDsLine(nil, ids[i])
		}
		return nil
	}); err != nil {
		return err
	}
	for _, b := range out {
		if _, err := w.Write(b); err != nil {
			return fmt.Errorf("dataprep tokenize: writing output: %w", err)
		}
	}
	return nil
}

// decodeLines decodes JSONL {"text": ...} lines in parallel.
func (p *tokenizePass) decodeLines(ctx context.Context, lines [][]byte, firstLine int) ([]string, error) {
	texts := make([]string, len(lines))
	errs := make([]error, len(lines))
	// Errors are kept by line, so that the first bad line is reported
	// whatever the number of goroutines.
	err := encode.Parallel(ctx, len(lines), p.threads, lineChunk, func(lo, hi int) error {
		for i := lo; i < hi; i++ {
			var rec struct {
				Text *string `json:"text"`
			}
			line := lines[i]
			if !utf8.Valid(line) { // replace as Node's UTF-8 decoder does, not per byte as encoding/json
				line = []byte(tokenize.ValidUTF8(string(line)))
			}
			if err := json.Unmarshal(line, &rec); err != nil {
				errs[i] = fmt.Errorf("%s: line %d: %v", p.name, firstLine+i, err)
			} else if rec.Text == nil {
				errs[i] = fmt.Errorf("%s: line %d: no \"text\" string", p.name, firstLine+i)
			} else {
				texts[i] = *rec.Text
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	for _, err := range errs {
		if err != nil {
			return nil, fmt.Errorf("dataprep tokenize: %w", err)
		}
	}
	return texts, nil
}

// bench is --bench: the reference tool's timing of encodeBatch over the
// whole input, median of --runs after --warmup, by wall clock and by the
// process's CPU time.
func (p *tokenizePass) bench(ctx context.Context, in io.Reader, stdout io.Writer) error {
	data, err := io.ReadAll(in)
	if err != nil {
		return fmt.Errorf("dataprep tokenize: %s: %w", p.name, err)
	}
	var texts []string
	if p.cfg.alpaca {
		if texts, err = p.alpacaTexts(data); err != nil {
			return err
		}
	} else {
		lines := bytes.Split(bytes.TrimSuffix(data, []byte("\n")), []byte("\n"))
		if len(data) == 0 {
			lines = nil
		}
		for i := range lines {
			lines[i] = bytes.TrimSuffix(lines[i], []byte("\r"))
		}
		texts, err = p.decodeLines(ctx, lines, 1)
	}
	if err != nil {
		return fmt.Errorf("dataprep tokenize: %w", err)
	}
	var nbytes, tokens int64
	for _, t := range texts {
		nbytes += int64(len(t))
	}
	special := !p.cfg.noSpecial
	for range max(1, p.cfg.warmup) {
		tokens = 0
		for _, ids := range p.tok.EncodeBatch(texts, special, p.threads) {
			tokens += int64(len(ids))
		}
	}
	var wall, cpu []float64
	for range p.cfg.runs {
		if err := ctx.Err(); err != nil {
			return err
		}
		c0, t0 := procstat.CPUSeconds(), time.Now()
		p.tok.EncodeBatch(texts, special, p.threads)
		wall = append(wall, time.Since(t0).Seconds())
		cpu = append(cpu, procstat.CPUSeconds()-c0)
	}
	s, cs := procstat.Median(wall), procstat.Median(cpu)
	out, _ := json.Marshal(map[string]any{
		"tokenizer": p.cfg.tokenizer, "threads": p.threads, "lines": len(texts), "bytes": nbytes, "tokens": tokens,
		"add_special_tokens": special, "runs_s": wall, "median_s": tokRound4(s),
		"MB_per_s": tokRound4(float64(nbytes) / s / 1e6), "tokens_per_s": int64(float64(tokens) / s),
		"median_cpu_s": tokRound4(cs), "MB_per_cpu_s": tokRound4(float64(nbytes) / cs / 1e6), "tokens_per_cpu_s": int64(float64(tokens) / cs),
	})
	_, err = fmt.Fprintf(stdout, "%s\n", out)
	return err
}

// appendIDsLine appends {"ids":[...]}\n as JSON.stringify writes it.
func appendIDsLine(b []byte, ids []int32) []byte {
	b = append(b, `{"ids":[`...)
	for i, id := range ids {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendInt(b, int64(id), 10)
	}
	return append(b, "]}\n"...)
}

// alpacaTexts reads Alpaca records (a JSON array or JSON Lines, as
// internal/dataset reads them for dataprep) and formats them with the
// seeds' template. Invalid UTF-8 is replaced first, as the reference tool's
// decoder does; an input without records gives no texts.
func (p *tokenizePass) alpacaTexts(data []byte) ([]string, error) {
	if !utf8.Valid(data) {
		data = []byte(tokenize.ValidUTF8(string(data)))
	}
	res, err := dataset.Parse(p.name, data, dataset.Options{})
	if errors.Is(err, dataset.ErrEmpty) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("dataprep tokenize: %w", err)
	}
	return p.enc.Texts(res.Records), nil
}
