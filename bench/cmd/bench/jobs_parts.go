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

// partsScript runs a split dataprep: N parts as concurrent processes, then
// commit. Arguments: dataprep N OUT [flags...].
const partsScript = `set -e
bin=$1; n=$2; out=$3; shift 3
rm -rf "$out"
pids=()
for ((i = 0; i < n; i++)); do "$bin" --part "$i/$n" "$@" --out "$out" & pids+=($!); done
for p in "${pids[@]}"; do wait "$p"; done
"$bin" commit "$out" --quiet
`

// partsJobs: a split dataprep run (dataprep --part I/N for every I, run
// concurrently as separate processes on this machine, then dataprep
// commit) against one dataprep run of the same input and flags, for N = 1,
// 2 and 4, pack and pad (quick: 2, pack). The input is the Alpaca records as JSON Lines, so
// that the parts cut it into byte ranges. The peak RSS the harness reads is
// the largest of one process (ru_maxrss covers the waited-for children).
// Check: the committed output equals the single run's byte for byte
// (manifest.json but stats.seconds). bench/parts.sh measures the same with
// CPU seconds, the sum of the parts' RSS and a multi-node model.
func partsJobs(e *env) ([]harness.Job, []string) {
	var jobs []harness.Job
	var inputs []string
	const seqLen, ranks = "1024", "16"
	dataprep, why := e.goBuild("cmd/dataprep")
	if why == "" {
		why = requireFlags(e.helpText(dataprep), "dataprep", "part", "parts", "input", "tokenizer", "out")
	}
	src, err := e.alpaca()
	path := ""
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
		inputs = append(inputs, fmt.Sprintf("dataprep parts: %s — %d Alpaca records as JSON Lines from %s", path, n, src.desc))
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
	for _, mode := range modes {
		flags := []string{"--input", path, "--tokenizer", tokDir, "--eos", t.eos, "--seq-len", seqLen, "--ranks", ranks, "--mode", mode, "--quiet"}
		for _, n := range ns {
			name := fmt.Sprintf("dataprep %s %s %d parts + commit", t.name, mode, n)
			slug := slugify(name)
			split := filepath.Join(e.c.work, "out-"+e.c.mode, slug+".split")
			single := filepath.Join(e.c.work, "out-"+e.c.mode, slug+".single")
			argv := append([]string{"bash", "-c", partsScript, "parts", dataprep, strconv.Itoa(n), split}, flags...)
			jobs = append(jobs, harness.Job{
				Name: name, Group: "dataprep",
				Metric: harness.Metric{Name: "wall_s", Unit: "s"},
				Ferry: harness.Side{Label: fmt.Sprintf("dataprep --part I/%d, %d concurrent processes, then dataprep commit", n, n),
					Cmd: harness.Command{Argv: argv, Stdout: e.outPath(slug, "ferry")}},
				Anchor: harness.Side{Label: "one dataprep run, same input and flags", Cmd: harness.Command{
					Argv: append(append([]string{dataprep}, flags...), "--out", single), Stdout: e.outPath(slug, "single"),
					Before: func() error { return os.RemoveAll(single) },
				}},
				Check:       func() (string, error) { return sameShardDirs(single, split) },
				Unavailable: why,
			})
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
