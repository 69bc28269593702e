// Command tokenize-bench measures ferry's tokenizer against Hugging Face
// tokenizers (the Rust library, through its Python binding) side by side: the
// same texts, the same thread count, runs alternating between the two.
//
//	go run ./bench/tokenize [-quick] [-threads 1,2] [-runs 5] [-alpaca-mb 20]
//	go run ./bench/tokenize ferry -tokenizer DIR [flags] [IN.jsonl]   (ferry's side alone; ferry.go)
//	go run ./bench/tokenize load -tokenizer DIR                        (one timed tokenize.Load; load.go)
//	go run ./bench/tokenize ids -tokenizer DIR [flags] [IN.jsonl]      (dataprep tokenize's pass + a {"bench"} line; ids.go)
//
// Inputs: (a) the bundled Alpaca demo records formatted as the seed workloads
// do ("### Instruction:\n...\n\n### Input:\n...\n\n### Response:\n...{eos}"),
// repeated to -alpaca-mb MB; (b) the hard corpus corpus-dev.jsonl. For each
// tokenizer (the twelve of testdata/tokenizers, or -tokenizer a,b), input and
// thread count it prints the median
// MB/s (1e6 bytes of UTF-8 text per second) of each side by wall clock and
// by process CPU time, and the ratio ferry/HF. HF runs as
// `PYTHON bench/anchors/hf_tokenize.py --bench` with RAYON_NUM_THREADS=N;
// ferry runs EncodeBatch in this process with N goroutines. Both time only
// encoding (texts already in memory), after one warm-up pass. PYTHON is the
// test venv that scripts/setup-test-deps builds (-python; default
// $FERRY_PYTHON, else $FERRY_CACHE/venv/bin/python). Run from the repository
// root.
//
// It also times Load, before each tokenizer's encode runs, and prints a Load
// table at the end (-load-runs fresh processes per figure, 0 to skip): ferry's tokenize.Load with an
// empty compiled cache (the first Load: parse and write the cache), from the
// cache, and with the cache off, against HF's Tokenizer.from_file
// (bench/anchors/hf_load.py), each timed inside its process around the load
// call alone.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/klauspost/compress/zstd"

	"github.com/ferryml/ferry/internal/dataset"
	"github.com/ferryml/ferry/internal/procstat"
	"github.com/ferryml/ferry/internal/pyenv"
	"github.com/ferryml/ferry/tokenize"
)

type config struct {
	quick     bool
	threads   []int
	runs      int
	alpacaMB  float64
	python    string
	anchor    string
	work      string
	jsonOut   string
	tokenizer string
	loadRuns  int
}

func main() {
	var err error
	if len(os.Args) > 1 && os.Args[1] == "ferry" {
		err = runFerry(context.Background(), os.Args[2:], os.Stdin, os.Stdout, os.Stderr)
	} else if len(os.Args) > 1 && os.Args[1] == "ids" {
		err = runIDs(context.Background(), os.Args[2:], os.Stdin, os.Stdout, os.Stderr)
	} else if len(os.Args) > 1 && os.Args[1] == "load" {
		err = runLoad(os.Args[2:], os.Stdout, os.Stderr)
	} else {
		err = run(context.Background(), os.Args[1:], os.Stdout, os.Stderr)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "tokenize-bench:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c := config{}
	fs := flag.NewFlagSet("tokenize-bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	threads := fs.String("threads", "1,"+strconv.Itoa(runtime.NumCPU()), "comma-separated thread counts")
	fs.BoolVar(&c.quick, "quick", false, "small inputs (2 MB of Alpaca, a quarter of the corpus) and 3 runs")
	fs.IntVar(&c.runs, "runs", 5, "timed runs per side after one warm-up")
	fs.Float64Var(&c.alpacaMB, "alpaca-mb", 20, "size of the repeated Alpaca input in MB")
	fs.StringVar(&c.python, "python", pyenv.Path(), "`python` with HF tokenizers (default: the test venv)")
	fs.StringVar(&c.anchor, "anchor", filepath.Join("bench", "anchors", "hf_tokenize.py"), "the HF anchor script")
	fs.StringVar(&c.work, "work", "", "scratch `dir` (default: a temporary directory)")
	fs.StringVar(&c.jsonOut, "json", "", "also write the results as JSON to `file`")
	fs.StringVar(&c.tokenizer, "tokenizer", "", "only these tokenizers, comma-separated (default: all twelve in testdata/tokenizers)")
	fs.IntVar(&c.loadRuns, "load-runs", 5, "fresh processes per Load time (0: no Load table)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	for _, f := range strings.Split(*threads, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return fmt.Errorf("bad -threads %q", *threads)
		}
		c.threads = append(c.threads, n)
	}
	if c.quick {
		c.runs = min(c.runs, 3)
		c.loadRuns = min(c.loadRuns, 3)
		c.alpacaMB = min(c.alpacaMB, 2)
	}
	if out, err := exec.CommandContext(ctx, c.python, "-c", "import tokenizers").CombinedOutput(); err != nil {
		return fmt.Errorf("%s cannot import HF tokenizers (scripts/setup-test-deps builds the venv): %v: %s", c.python, err, bytes.TrimSpace(out))
	}
	if c.work == "" {
		dir, err := os.MkdirTemp("", "ferry-tokenize-bench-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		c.work = dir
	}
	var results []result
	var loads []loadResult
	eos := map[string]string{"qwen2.5": "<|endoftext|>", "llama3.1": "<|end_of_text|>",
		"tinyllama": "</s>", "llama2": "</s>", "mistral-v0.3": "</s>", "phi3": "<|endoftext|>",
		"deepseek-r1": "<｜end▁of▁sentence｜>", "phi4": "<|im_end|>", "olmo2": "<|endoftext|>",
		"smollm2": "<|endoftext|>", "mistral-nemo": "</s>", "gpt-oss": "<|return|>"}
	names := []string{"qwen2.5", "llama3.1", "tinyllama", "llama2", "mistral-v0.3", "phi3",
		"deepseek-r1", "phi4", "olmo2", "smollm2", "mistral-nemo", "gpt-oss"}
	if c.tokenizer != "" {
		names = strings.Split(c.tokenizer, ",")
		for _, n := range names {
			if _, ok := eos[n]; !ok {
				return fmt.Errorf("-tokenizer: unknown tokenizer %q", n)
			}
		}
	}
	fmt.Fprintf(stdout, "%-12s %-7s %7s %3s | %12s %12s | %12s %12s | %8s %8s\n",
		"tokenizer", "input", "MB", "thr", "ferry MB/s", "HF MB/s", "ferry MB/cpu", "HF MB/cpu", "wall x", "cpu x")
	for _, name := range names {
		dir, err := unpackTokenizer(name, c.work)
		if err != nil {
			return err
		}
		if c.loadRuns > 0 {
			lr, err := measureLoad(ctx, c, name, dir, c.loadRuns)
			if err != nil {
				return err
			}
			loads = append(loads, lr)
		}
		tok, err := tokenize.Load(dir)
		if err != nil {
			return err
		}
		alpaca, err := alpacaTexts(eos[name], c.alpacaMB)
		if err != nil {
			return err
		}
		corpus, err := corpusTexts(c.quick)
		if err != nil {
			return err
		}
		for _, in := range []struct {
			name  string
			texts []string
		}{{"alpaca", alpaca}, {"corpus", corpus}} {
			file := filepath.Join(c.work, name+"-"+in.name+".jsonl")
			if err := writeJSONL(file, in.texts); err != nil {
				return err
			}
			for _, th := range c.threads {
				r, err := measure(ctx, c, tok, dir, file, in.texts, th)
				if err != nil {
					return err
				}
				r.Tokenizer, r.Input = name, in.name
				results = append(results, r)
				fmt.Fprintf(stdout, "%-12s %-7s %7.1f %3d | %12.1f %12.2f | %12.1f %12.2f | %7.1fx %7.1fx\n",
					name, in.name, float64(r.Bytes)/1e6, th, r.FerryMBs, r.HFMBs, r.FerryMBCPU, r.HFMBCPU,
					r.FerryMBs/r.HFMBs, r.FerryMBCPU/r.HFMBCPU)
			}
		}
	}
	if len(loads) > 0 {
		fmt.Fprintf(stdout, "\nLoad (ms; median of %d fresh processes, timed around the load call; first = empty compiled cache)\n", c.loadRuns)
		fmt.Fprintf(stdout, "%-12s | %10s %10s %10s %10s | %10s %10s | %8s %8s\n",
			"tokenizer", "ferry 1st", "ferry", "ferry cpu", "no cache", "HF", "HF cpu", "HF/ferry", "cpu")
		for _, r := range loads {
			fmt.Fprintf(stdout, "%-12s | %10.1f %10.1f %10.1f %10.1f | %10.1f %10.1f | %7.1fx %7.1fx\n",
				r.Tokenizer, r.FirstMs, r.FerryMs, r.FerryCPU, r.ParseMs, r.HFMs, r.HFCPU, r.Ratio, r.RatioCPU)
		}
	}
	if c.jsonOut != "" {
		b, _ := json.MarshalIndent(map[string]any{"encode": results, "load": loads}, "", "  ")
		if err := os.WriteFile(c.jsonOut, append(b, '\n'), 0o644); err != nil {
			return err
		}
	}
	return nil
}

type result struct {
	Tokenizer, Input string
	Threads          int
	Bytes            int64
	Tokens           int64
	FerryMBs         float64 `json:"ferry_mb_per_s"`
	HFMBs            float64 `json:"hf_mb_per_s"`
	FerryMBCPU       float64 `json:"ferry_mb_per_cpu_s"`
	HFMBCPU          float64 `json:"hf_mb_per_cpu_s"`
}

// measure alternates: HF (a Python process that warms up and times c.runs
// runs), then ferry's warm-up and c.runs runs, and repeats this twice; the
// medians of all runs of each side are compared.
func measure(ctx context.Context, c config, tok *tokenize.Tokenizer, dir, file string, texts []string, threads int) (result, error) {
	var bytes int64
	for _, s := range texts {
		bytes += int64(len(s))
	}
	r := result{Threads: threads, Bytes: bytes}
	var fw, fc, hw, hc []float64
	for round := 0; round < 2; round++ {
		w, cpu, err := hfBench(ctx, c, dir, file, threads, max(1, c.runs/2))
		if err != nil {
			return r, err
		}
		hw, hc = append(hw, w...), append(hc, cpu...)
		tok.EncodeBatch(texts, true, threads) // warm-up
		for i := 0; i < max(1, c.runs/2); i++ {
			c0, t0 := procstat.CPUSeconds(), time.Now()
			out := tok.EncodeBatch(texts, true, threads)
			fw = append(fw, time.Since(t0).Seconds())
			fc = append(fc, procstat.CPUSeconds()-c0)
			if r.Tokens == 0 {
				for _, ids := range out {
					r.Tokens += int64(len(ids))
				}
			}
		}
	}
	mb := float64(bytes) / 1e6
	r.FerryMBs, r.FerryMBCPU = mb/procstat.Median(fw), mb/procstat.Median(fc)
	r.HFMBs, r.HFMBCPU = mb/procstat.Median(hw), mb/procstat.Median(hc)
	return r, nil
}

func hfBench(ctx context.Context, c config, dir, file string, threads, runs int) (wall, cpu []float64, err error) {
	cmd := exec.CommandContext(ctx, c.python, c.anchor, "--tokenizer", dir, "--bench", "--runs", strconv.Itoa(runs), "--warmup", "1", file)
	cmd.Env = append(os.Environ(), "RAYON_NUM_THREADS="+strconv.Itoa(threads), "TOKENIZERS_PARALLELISM=true")
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if err := cmd.Run(); err != nil {
		return nil, nil, fmt.Errorf("%s: %v\n%s", strings.Join(cmd.Args, " "), err, stderr.String())
	}
	var v struct {
		RunsS     []float64 `json:"runs_s"`
		MedianCPU float64   `json:"median_cpu_s"`
	}
	if err := json.Unmarshal(bytes.TrimSpace(out.Bytes()), &v); err != nil || len(v.RunsS) == 0 {
		return nil, nil, fmt.Errorf("HF anchor printed %q", out.String())
	}
	for range v.RunsS {
		cpu = append(cpu, v.MedianCPU)
	}
	return v.RunsS, cpu, nil
}

func readZstd(path string) ([]byte, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	d, err := zstd.NewReader(nil)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	return d.DecodeAll(raw, nil)
}

// unpackTokenizer writes testdata/tokenizers/NAME uncompressed (HF's
// binding reads only a plain tokenizer.json) and returns the directory.
func unpackTokenizer(name, work string) (string, error) {
	src := filepath.Join("testdata", "tokenizers", name)
	dst := filepath.Join(work, name)
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return "", err
	}
	b, err := readZstd(filepath.Join(src, "tokenizer.json.zst"))
	if err != nil {
		return "", fmt.Errorf("run from the repository root: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dst, "tokenizer.json"), b, 0o644); err != nil {
		return "", err
	}
	cfg, err := os.ReadFile(filepath.Join(src, "tokenizer_config.json"))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return "", err
	}
	if cfg != nil {
		if err := os.WriteFile(filepath.Join(dst, "tokenizer_config.json"), cfg, 0o644); err != nil {
			return "", err
		}
	}
	return dst, nil
}

// alpacaTexts formats the bundled Alpaca demo as the seeds do, repeated to mb MB.
func alpacaTexts(eos string, mb float64) ([]string, error) {
	b, err := readZstd(filepath.Join("testdata", "alpaca", "alpaca_en_demo.json.zst"))
	if err != nil {
		return nil, err
	}
	var recs []dataset.Record
	if err := json.Unmarshal(b, &recs); err != nil {
		return nil, err
	}
	tmpl := dataset.Alpaca()
	var one []string
	for i := range recs {
		s, _ := tmpl.Append(nil, &recs[i], "", eos)
		one = append(one, string(s))
	}
	var out []string
	size := 0
	for size < int(mb*1e6) {
		for _, s := range one {
			out = append(out, s)
			size += len(s)
		}
	}
	return out, nil
}

func corpusTexts(quick bool) ([]string, error) {
	b, err := readZstd(filepath.Join("testdata", "tokenizers", "corpus-dev.jsonl.zst"))
	if err != nil {
		return nil, err
	}
	var out []string
	for i, line := range bytes.Split(bytes.TrimSuffix(b, []byte("\n")), []byte("\n")) {
		var v struct{ Text string }
		if err := json.Unmarshal(line, &v); err != nil {
			return nil, fmt.Errorf("corpus-dev.jsonl: line %d: %v", i+1, err)
		}
		if !quick || i%4 == 0 {
			out = append(out, v.Text)
		}
	}
	return out, nil
}

func writeJSONL(path string, texts []string) error {
	var b bytes.Buffer
	for _, s := range texts {
		j, _ := json.Marshal(map[string]string{"text": s})
		b.Write(j)
		b.WriteByte('\n')
	}
	return os.WriteFile(path, b.Bytes(), 0o644)
}
