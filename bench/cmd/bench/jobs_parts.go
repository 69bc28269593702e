package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strconv"

	"github.com/ferryml/ferry/bench/internal/harness"
)

// partsScript runs a split dataprep and prints a bench line. Arguments:
// dataprep N OUT WAY INPUT_BYTES [flags...]. WAY "concurrent": the N parts
// as concurrent processes on this machine, then commit; "alone": each part
// alone, one after the other, then commit, to model N machines (modelled_s
// = the slowest part + commit). cpu_s is the CPU seconds (user + system) of
// every process.
const partsScript = `set -e
bin=$1; n=$2; out=$3; way=$4; bytes=$5; shift 5
now() { date +%s.%N; }
sub() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3f", b - a }'; }
rm -rf "$out"
t0=$(now); slowest=0
if [ "$way" = concurrent ]; then
	pids=()
	for ((i = 0; i < n; i++)); do "$bin" --part "$i/$n" "$@" --out "$out" & pids+=($!); done
	for p in "${pids[@]}"; do wait "$p"; done
else
	for ((i = 0; i < n; i++)); do
		a=$(now); "$bin" --part "$i/$n" "$@" --out "$out"; d=$(sub "$a" "$(now)")
		slowest=$(awk -v s="$slowest" -v d="$d" 'BEGIN { if (d > s) print d; else print s }')
	done
fi
t1=$(now)
"$bin" commit "$out" --quiet
t2=$(now)
commit=$(sub "$t1" "$t2")
times > "$out.times" # in this shell: its children's CPU time is the second line
cpu=$(awk 'NR == 2 { split($1, u, /[ms]/); split($2, s, /[ms]/); printf "%.3f", u[1] * 60 + u[2] + s[1] * 60 + s[2] }' "$out.times")
rm -f "$out.times"
echo "{\"bench\": {\"parts_s\": $(sub "$t0" "$t1"), \"commit_s\": $commit, \"slowest_part_s\": $slowest, \"modelled_s\": $(awk -v s="$slowest" -v c="$commit" 'BEGIN { printf "%.3f", s + c }'), \"commit_s_per_gb\": $(awk -v c="$commit" -v b="$bytes" 'BEGIN { printf "%.3f", c / (b / 1e9) }'), \"cpu_s\": $cpu}}"
`

// singleScript runs one dataprep (dataprep OUT [flags...]) and prints a
// bench line with its CPU seconds and its wall time as modelled_s (the
// anchor of the N-machine model).
const singleScript = `set -e
bin=$1; out=$2; shift 2
t0=$(date +%s.%N)
"$bin" "$@" --out "$out"
t1=$(date +%s.%N)
times > "$out.times" # in this shell: its children's CPU time is the second line
cpu=$(awk 'NR == 2 { split($1, u, /[ms]/); split($2, s, /[ms]/); printf "%.3f", u[1] * 60 + u[2] + s[1] * 60 + s[2] }' "$out.times")
rm -f "$out.times"
echo "{\"bench\": {\"modelled_s\": $(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", b - a }'), \"cpu_s\": $cpu}}"
`

// partsJobs: a split dataprep run (dataprep --part I/N for every I, run
// concurrently as separate processes on this machine, then dataprep
// commit) against one dataprep run of the same input and flags, for N = 1,
// 2 and 4, pack and pad (quick: 2, pack); CPU seconds of all processes as
// an extra metric. Full mode adds the model of N machines for pack and the
// largest N: each part alone, one after the other, then commit; its metric
// is the slowest part + commit against the single run, and its check also
// gives commit's cost per GB of input. The input is the Alpaca records as
// JSON Lines, so that the parts cut it into byte ranges. The peak RSS the
// harness reads is the largest of one process (ru_maxrss covers the
// waited-for children). Check: the committed output equals the single
// run's byte for byte (manifest.json but stats.seconds).
func partsJobs(e *env) ([]harness.Job, []string) {
	var jobs []harness.Job
	var inputs []string
	const seqLen, ranks = "1024", "16"
	dataprep, why := e.goBuild("cmd/dataprep")
	if why == "" {
		why = requireFlags(e.helpText(dataprep), "dataprep", "part", "parts", "input", "tokenizer", "out")
	}
	src, err := e.alpaca()
	path, size := "", int64(0)
	if err != nil {
		if why == "" {
			why = "alpaca input: " + err.Error()
		}
	} else {
		n := len(src.recs)
		if e.c.mode == "full" && e.c.alpaca == "" {
			n = 52002
		}
		path = filepath.Join(e.c.work, "in", fmt.Sprintf("alpaca-records-%s.jsonl", e.c.mode))
		if err := writeJSONL(path, src.recs, n); err != nil && why == "" {
			why = "alpaca input: " + err.Error()
		}
		if fi, err := os.Stat(path); err == nil {
			size = fi.Size()
		}
		inputs = append(inputs, fmt.Sprintf("dataprep parts: %s — %d Alpaca records as JSON Lines (%.1f MB) from %s", path, n, float64(size)/1e6, src.desc))
	}
	ns, modes := []int{1, 2, 4}, []string{"pack", "pad"}
	if e.c.mode == "quick" {
		ns, modes = []int{2}, []string{"pack"}
	}
	t := seedTokenizers[0]
	tokDir, terr := e.tokenizerDir(t.name)
	if terr != nil && why == "" {
		why = "tokenizer: " + terr.Error()
	}
	cpu := []harness.ExtraMetric{{Metric: harness.Metric{Name: "cpu_s", Unit: "s"}}}
	job := func(name, way string, n int, flags []string, metric harness.Metric, label string) harness.Job {
		slug := slugify(name)
		split := filepath.Join(e.c.work, "out-"+e.c.mode, slug+".split")
		single := filepath.Join(e.c.work, "out-"+e.c.mode, slug+".single")
		argv := append([]string{"bash", "-c", partsScript, "parts", dataprep, strconv.Itoa(n), split, way, strconv.FormatInt(size, 10)}, flags...)
		ferryOut := e.outPath(slug, "ferry")
		j := harness.Job{
			Name: name, Group: "dataprep", Metric: metric, Extra: cpu,
			Ferry: harness.Side{Label: label, Cmd: harness.Command{Argv: argv, Stdout: ferryOut}},
			Anchor: harness.Side{Label: "one dataprep run, same input and flags", Cmd: harness.Command{
				Argv:   append([]string{"bash", "-c", singleScript, "single", dataprep, single}, flags...),
				Stdout: e.outPath(slug, "single"),
				Before: func() error { return os.RemoveAll(single) },
			}},
			Check:       func() (string, error) { return sameShardDirs(single, split) },
			Unavailable: why,
		}
		if way == "alone" {
			j.Check = func() (string, error) {
				msg, err := sameShardDirs(single, split)
				if err != nil {
					return msg, err
				}
				v, err := readBenchLines(ferryOut)
				if err != nil {
					return msg, err
				}
				return fmt.Sprintf("%s; slowest part %.2f s, commit %.2f s (%.2f s per GB of input)",
					msg, v[0]["slowest_part_s"], v[0]["commit_s"], v[0]["commit_s_per_gb"]), nil
			}
		}
		return j
	}
	for _, mode := range modes {
		flags := []string{"--input", path, "--tokenizer", tokDir, "--eos", t.eos, "--seq-len", seqLen, "--ranks", ranks, "--mode", mode, "--quiet"}
		for _, n := range ns {
			jobs = append(jobs, job(fmt.Sprintf("dataprep %s %s %d parts + commit", t.name, mode, n), "concurrent", n, flags,
				harness.Metric{Name: "wall_s", Unit: "s"},
				fmt.Sprintf("dataprep --part I/%d, %d concurrent processes, then dataprep commit", n, n)))
		}
		if e.c.mode == "full" && mode == "pack" {
			n := ns[len(ns)-1]
			jobs = append(jobs, job(fmt.Sprintf("dataprep %s %s %d parts alone + commit (model of %d machines)", t.name, mode, n, n), "alone", n, flags,
				harness.Metric{Name: "modelled_s", Unit: "s"},
				fmt.Sprintf("dataprep --part I/%d, each alone, then dataprep commit: the slowest part + commit", n)))
		}
	}
	return jobs, inputs
}

func writeJSONL(path string, recs []record, n int) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	for i := range n {
		if err := enc.Encode(recs[i%len(recs)]); err != nil {
			return err
		}
	}
	return os.WriteFile(path, buf.Bytes(), 0o644)
}

// sameShardDirs checks that got holds ref's files with the same bytes,
// manifest.json's but its stats.seconds.
func sameShardDirs(ref, got string) (string, error) {
	ents, err := os.ReadDir(ref)
	if err != nil {
		return "", err
	}
	for _, en := range ents {
		a, err := os.ReadFile(filepath.Join(ref, en.Name()))
		if err != nil {
			return "", err
		}
		b, err := os.ReadFile(filepath.Join(got, en.Name()))
		if err != nil {
			return "", fmt.Errorf("split run: %w", err)
		}
		if en.Name() == "manifest.json" {
			var ma, mb map[string]any
			if json.Unmarshal(a, &ma) != nil || json.Unmarshal(b, &mb) != nil {
				return "", fmt.Errorf("manifest.json does not decode")
			}
			for _, m := range []map[string]any{ma, mb} {
				if st, ok := m["stats"].(map[string]any); ok {
					delete(st, "seconds")
				}
			}
			if !reflect.DeepEqual(ma, mb) {
				return "", fmt.Errorf("manifest.json differs from the single run's beyond stats.seconds")
			}
			continue
		}
		if !bytes.Equal(a, b) {
			return "", fmt.Errorf("%s differs from the single run's", en.Name())
		}
	}
	return fmt.Sprintf("%d files byte-identical to the single run's (manifest.json but stats.seconds)", len(ents)), nil
}
