package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/ferryml/ferry/internal/procstat"
	"github.com/ferryml/ferry/tokenize"
)

// loadResult is the time to load one tokenizer, each a median over fresh
// processes, timed inside the process around the load call alone (not the
// process start, Go runtime or Python imports).
type loadResult struct {
	Tokenizer string  `json:"tokenizer"`
	FirstMs   float64 `json:"ferry_first_load_ms"`    // an empty compiled cache: parse, then write it
	FerryMs   float64 `json:"ferry_load_ms"`          // the compiled cache written by the first
	FerryCPU  float64 `json:"ferry_load_cpu_ms"`      // the same, process CPU time
	ParseMs   float64 `json:"ferry_parse_ms"`         // the cache off: tokenizer.json parsed
	HFMs      float64 `json:"hf_load_ms"`             // tokenizers.Tokenizer.from_file
	HFCPU     float64 `json:"hf_load_cpu_ms"`         // the same, process CPU time
	Runs      int     `json:"runs"`                   // fresh processes per median
	CacheDir  string  `json:"-"`                      // the compiled cache of these runs
	Ratio     float64 `json:"hf_over_ferry_load"`     // HFMs / FerryMs
	RatioCPU  float64 `json:"hf_over_ferry_load_cpu"` // HFCPU / FerryCPU
}

// hfLoadPy times HF tokenizers' Tokenizer.from_file once and prints the
// bench line runLoad prints (make bench's load jobs run it too).
const hfLoadPy = "bench/anchors/hf_load.py"

// measureLoad times Load of dir's tokenizer.json in fresh processes: ferry
// with an empty compiled cache once (the first Load), then runs times from
// the cache it wrote and runs times with the cache off, alternating with
// runs of HF's Tokenizer.from_file.
func measureLoad(ctx context.Context, c config, name, dir string, runs int) (loadResult, error) {
	r := loadResult{Tokenizer: name, Runs: runs, CacheDir: fmt.Sprintf("%s/ferry-cache-%s", c.work, name)}
	if err := os.RemoveAll(r.CacheDir); err != nil {
		return r, err
	}
	self, err := os.Executable()
	if err != nil {
		return r, err
	}
	ferry := func(cache string) (float64, float64, error) {
		cmd := exec.CommandContext(ctx, self, "load", "-tokenizer", dir)
		cmd.Env = append(os.Environ(), "FERRY_TOKENIZER_CACHE="+cache)
		return timedJSON(cmd)
	}
	first, _, err := ferry(r.CacheDir)
	if err != nil {
		return r, err
	}
	r.FirstMs = first * 1e3
	var fw, fc, pw, hw, hc []float64
	for range runs {
		w, cpu, err := ferry(r.CacheDir)
		if err != nil {
			return r, err
		}
		fw, fc = append(fw, w), append(fc, cpu)
		if w, _, err = ferry("off"); err != nil {
			return r, err
		}
		pw = append(pw, w)
		cmd := exec.CommandContext(ctx, c.python, hfLoadPy, dir+"/tokenizer.json")
		if w, cpu, err = timedJSON(cmd); err != nil {
			return r, err
		}
		hw, hc = append(hw, w), append(hc, cpu)
	}
	r.FerryMs, r.FerryCPU = procstat.Median(fw)*1e3, procstat.Median(fc)*1e3
	r.ParseMs = procstat.Median(pw) * 1e3
	r.HFMs, r.HFCPU = procstat.Median(hw)*1e3, procstat.Median(hc)*1e3
	r.Ratio, r.RatioCPU = r.HFMs/r.FerryMs, r.HFCPU/r.FerryCPU
	return r, nil
}

// timedJSON runs cmd, which prints {"bench": {"load_s": wall, "load_cpu_s": cpu}}.
func timedJSON(cmd *exec.Cmd) (wall, cpu float64, err error) {
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if err := cmd.Run(); err != nil {
		return 0, 0, fmt.Errorf("%s: %v\n%s", strings.Join(cmd.Args, " "), err, stderr.String())
	}
	var v struct {
		Bench struct {
			S    float64 `json:"load_s"`
			CPUS float64 `json:"load_cpu_s"`
		} `json:"bench"`
	}
	if err := json.Unmarshal(bytes.TrimSpace(out.Bytes()), &v); err != nil || v.Bench.S <= 0 {
		return 0, 0, fmt.Errorf("%s printed %q", strings.Join(cmd.Args, " "), out.String())
	}
	return v.Bench.S, v.Bench.CPUS, nil
}

// runLoad is `tokenize-bench load -tokenizer DIR`: one tokenize.Load, timed
// by wall clock and process CPU time, printed as the bench line
// {"bench": {"load_s": ..., "load_cpu_s": ...}} (make bench's load jobs run
// it). The compiled cache is wherever FERRY_TOKENIZER_CACHE says.
func runLoad(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("tokenize-bench load", flag.ContinueOnError)
	fs.SetOutput(stderr)
	tokPath := fs.String("tokenizer", "", "tokenizer.json, tokenizer.json.zst or a model `directory` (required)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *tokPath == "" || fs.NArg() > 0 {
		return fmt.Errorf("load: want -tokenizer DIR and nothing else")
	}
	c0, t0 := procstat.CPUSeconds(), time.Now()
	if _, err := tokenize.Load(*tokPath); err != nil {
		return err
	}
	wall, cpu := time.Since(t0).Seconds(), procstat.CPUSeconds()-c0
	_, err := fmt.Fprintf(stdout, "{\"bench\": {\"load_s\": %s, \"load_cpu_s\": %s}}\n",
		strconv.FormatFloat(wall, 'f', 6, 64), strconv.FormatFloat(cpu, 'f', 6, 64))
	return err
}
