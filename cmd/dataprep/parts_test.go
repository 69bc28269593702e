package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/ferryml/ferry/internal/dataset"
	"github.com/ferryml/ferry/internal/storage"
	"github.com/ferryml/ferry/internal/testutil/arrowcheck"
	"github.com/ferryml/ferry/internal/testutil/s3server"
	"github.com/ferryml/ferry/shard"
	"github.com/ferryml/ferry/tokenize"
)

// splitInputs writes the bundled data as three files of three formats:
// alpaca_tiny.json (a JSON array), the English demo as plain JSON Lines
// (large enough that the cuts of 3 parts fall inside it, so it is split by
// byte range) and the Chinese demo as zstd JSON (read whole). It returns
// the directory and the files in order.
func splitInputs(t *testing.T) (string, []string) {
	t.Helper()
	dir := t.TempDir()
	tiny, err := os.ReadFile(filepath.Join(alpacaDir, "alpaca_tiny.json"))
	if err != nil {
		t.Fatal(err)
	}
	zh, err := os.ReadFile(filepath.Join(alpacaDir, "alpaca_zh_demo.json.zst"))
	if err != nil {
		t.Fatal(err)
	}
	files := []string{filepath.Join(dir, "train-0.json"), filepath.Join(dir, "train-1.jsonl"), filepath.Join(dir, "train-2.json.zst")}
	for i, data := range [][]byte{tiny, enJSONL(t), zh} {
		if err := os.WriteFile(files[i], data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir, files
}

// enJSONL is the English demo as JSON Lines.
func enJSONL(t *testing.T) []byte {
	t.Helper()
	res, err := dataset.Parse("en", unzstd(t, filepath.Join(alpacaDir, "alpaca_en_demo.json.zst")), dataset.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	for _, r := range res.Records {
		b, _ := json.Marshal(map[string]string{"instruction": r.Instruction, "input": r.Input, "output": r.Output})
		buf.Write(b)
		buf.WriteByte('\n')
	}
	return buf.Bytes()
}

// splitRun runs dataprep --part I/n for I in order, then dataprep commit,
// with args (which hold --out and maybe --parts); commitArgs go to commit.
func splitRun(t *testing.T, n int, order []int, out string, args []string, commitArgs ...string) string {
	t.Helper()
	for _, i := range order {
		mustPrep(t, append([]string{"--part", fmt.Sprintf("%d/%d", i, n)}, args...)...)
	}
	return mustPrep(t, append([]string{"commit", out, "--quiet"}, commitArgs...)...)
}

// sameOutput checks that the shard directories ref and got hold the same
// files with the same bytes, manifest.json included except stats.seconds
// (a time); got may also hold the parts directory.
func sameOutput(t *testing.T, ref, got string) {
	t.Helper()
	ents, err := os.ReadDir(ref)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		a, _ := os.ReadFile(filepath.Join(ref, e.Name()))
		b, err := os.ReadFile(filepath.Join(got, e.Name()))
		if err != nil {
			t.Errorf("%s: %v", e.Name(), err)
			continue
		}
		if e.Name() == shard.ManifestName {
			if d := manifestDiff(t, a, b); d != "" {
				t.Errorf("manifest.json differs from the single run's: %s", d)
			}
			continue
		}
		if !bytes.Equal(a, b) {
			t.Errorf("%s differs from the single run's (%d vs %d bytes)", e.Name(), len(a), len(b))
		}
	}
	gents, _ := os.ReadDir(got)
	if len(gents) > len(ents)+1 {
		t.Errorf("%s holds %d entries, the single run's %d (+ parts)", got, len(gents), len(ents))
	}
}

// manifestDiff compares two manifest.json files except stats.seconds.
func manifestDiff(t *testing.T, a, b []byte) string {
	t.Helper()
	var ma, mb map[string]any
	if err := json.Unmarshal(a, &ma); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &mb); err != nil {
		t.Fatal(err)
	}
	for _, m := range []map[string]any{ma, mb} {
		delete(m["stats"].(map[string]any), "seconds")
	}
	if reflect.DeepEqual(ma, mb) {
		return ""
	}
	ja, _ := json.MarshalIndent(ma, "", " ")
	jb, _ := json.MarshalIndent(mb, "", " ")
	return fmt.Sprintf("\n%s\nvs\n%s", ja, jb)
}

// TestPartsIdentical: parts run in any order and then committed give the
// single run's shards, loss_tokens.u32 and manifest (but its time), for
// both tokenizers, pad and pack, several files with one split by byte
// range, --max-records, skipped bad records and empty parts.
func TestPartsIdentical(t *testing.T) {
	dir, files := splitInputs(t)
	glob := filepath.Join(dir, "train-*")
	// JSON Lines with bad lines (skipped), split into 3 ranges.
	var bad bytes.Buffer
	for i, line := range bytes.SplitAfter(enJSONL(t), []byte("\n")) {
		if i%97 == 5 {
			bad.WriteString(`{"instruction": 3, "output": "x"}` + "\n")
		}
		if i%131 == 7 {
			bad.WriteString(`{"instruction": "cut` + "\n")
		}
		bad.Write(line)
	}
	badFile := writeFile(t, "bad.jsonl", bad.String())
	for _, tc := range []struct {
		name  string
		n     int
		order []int
		args  []string
	}{
		{"qwen pad copy, 3 files", 3, []int{2, 0, 1}, []string{"--input", glob, "--tokenizer", qwen.dir, "--eos", qwen.eos,
			"--mode", "pad", "--labels", "copy", "--seq-len", "256", "--ranks", "3"}},
		{"llama pack, 3 files", 3, []int{1, 2, 0}, []string{"--input", files[0], "--input", files[1], "--input", files[2],
			"--tokenizer", llama.dir, "--eos", llama.eos, "--mode", "pack", "--seq-len", "512", "--ranks", "4", "--seed", "7"}},
		{"qwen split-long mask-prompt drop-last, one JSONL in ranges", 3, []int{0, 2, 1}, []string{"--input", files[1],
			"--tokenizer", qwen.dir, "--mode", "pack", "--split-long", "--labels", "mask-prompt", "--seq-len", "128",
			"--ranks", "5", "--drop-last", "--batch-rows", "16"}},
		{"llama pad max-records", 3, []int{2, 1, 0}, []string{"--input", glob, "--tokenizer", llama.dir, "--eos", llama.eos,
			"--seq-len", "256", "--ranks", "2", "--max-records", "650"}},
		{"qwen pack skip bad records max-records", 3, []int{1, 0, 2}, []string{"--input", badFile, "--tokenizer", qwen.dir,
			"--mode", "pack", "--seq-len", "256", "--ranks", "2", "--on-bad-record", "skip", "--max-records", "700"}},
		{"empty parts", 4, []int{3, 1, 0, 2}, []string{"--input", files[0], "--tokenizer", qwen.dir, "--seq-len", "256", "--ranks", "2"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := t.TempDir()
			ref, split := filepath.Join(out, "ref"), filepath.Join(out, "split")
			refSum := mustPrep(t, append(tc.args, "--quiet", "--json", "--out", ref)...)
			gotSum := splitRun(t, tc.n, tc.order, split, append(tc.args, "--quiet", "--out", split), "--json")
			sameOutput(t, ref, split)
			var rs, gs map[string]any
			if err := json.Unmarshal([]byte(refSum), &rs); err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal([]byte(gotSum), &gs); err != nil {
				t.Fatal(err)
			}
			for _, k := range []string{"input", "format", "records_read", "records_skipped", "records_truncated", "records_split",
				"tokens", "unique_rows", "input_bytes", "output_bytes"} {
				if rs[k] != gs[k] {
					t.Errorf("summary %s: commit %v, single run %v", k, gs[k], rs[k])
				}
			}
			// The JSON Lines file is split by byte range where a cut falls in it.
			var ranges int
			for i := range tc.n {
				f, err := os.Open(filepath.Join(split, "parts", shard.PartManifestName(i, tc.n)))
				if err != nil {
					t.Fatal(err)
				}
				m, err := shard.DecodePartManifest(f.Name(), f)
				f.Close()
				if err != nil {
					t.Fatal(err)
				}
				for _, p := range m.Share {
					if p.Off != 0 || p.End != p.Size {
						ranges++
					}
				}
			}
			if tc.name != "empty parts" && ranges == 0 {
				t.Error("no part read a byte range")
			}
		})
	}
}

// TestPartsS3: input, parts and output on the S3 test server.
func TestPartsS3(t *testing.T) {
	srv := s3server.Start(t)
	srv.SetEnv(t)
	bucket := srv.Bucket(t, "ferry-parts")
	ctx := context.Background()
	_, files := splitInputs(t)
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		loc := bucket + "/in/" + filepath.Base(f)
		w, err := storage.Create(ctx, loc)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Write(data); err != nil {
			t.Fatal(err)
		}
		if err := w.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	args := []string{"--input", bucket + "/in/train-*", "--tokenizer", qwen.dir, "--mode", "pack", "--seq-len", "256", "--ranks", "3", "--quiet"}
	ref := filepath.Join(t.TempDir(), "ref")
	mustPrep(t, append(args, "--out", ref)...)
	out, parts := bucket+"/shards", bucket+"/parts"
	splitRun(t, 3, []int{1, 2, 0}, out, append(args, "--out", out, "--parts", parts), "--parts", parts)
	local := t.TempDir()
	infos, err := storage.List(ctx, out+"/")
	if err != nil {
		t.Fatal(err)
	}
	for _, in := range infos {
		rc, _, err := storage.OpenStream(ctx, in.Loc)
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(rc)
		rc.Close()
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(local, filepath.Base(in.Loc)), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	sameOutput(t, ref, local)
	// Parts on S3, output local (and the reverse through --parts).
	out2 := filepath.Join(t.TempDir(), "out2")
	mustPrep(t, "commit", out2, "--parts", parts, "--quiet")
	sameOutput(t, ref, out2)
}

// committedParts runs the 3 parts of a small split run into a fresh
// directory and returns it (OUT) and the part arguments.
func committedParts(t *testing.T) (string, []string) {
	t.Helper()
	out := filepath.Join(t.TempDir(), "out")
	in := writeFile(t, "en.jsonl", string(enJSONL(t)))
	args := []string{"--input", in, "--tokenizer", qwen.dir, "--seq-len", "256", "--ranks", "2", "--quiet", "--out", out}
	for i := range 3 {
		mustPrep(t, append([]string{"--part", fmt.Sprintf("%d/3", i)}, args...)...)
	}
	return out, args
}

// TestCommitErrors: a missing part, a part of another tokenizer or other
// options, and a truncated or corrupted part file each fail naming the
// part, and no manifest.json appears.
func TestCommitErrors(t *testing.T) {
	for _, tc := range []struct {
		name    string
		mess    func(t *testing.T, parts string, args []string)
		wantErr error
		want    []string
	}{
		{"missing part", func(t *testing.T, parts string, args []string) {
			if err := os.Remove(filepath.Join(parts, shard.PartManifestName(1, 3))); err != nil {
				t.Fatal(err)
			}
		}, nil, []string{"part 1 of 3 missing", "part-00001-of-00003.json", "--part 1/3"}},
		{"other tokenizer", func(t *testing.T, parts string, args []string) {
			a := append([]string{"--part", "2/3"}, args...)
			for i := range a {
				if a[i] == qwen.dir {
					a[i] = llama.dir
				}
			}
			mustPrep(t, append(a, "--eos", llama.eos)...)
		}, nil, []string{"part 2/3", "part-00002-of-00003.json", "tokenizer SHA-256"}},
		{"other options", func(t *testing.T, parts string, args []string) {
			mustPrep(t, append([]string{"--part", "2/3", "--seed", "3"}, args...)...)
		}, nil, []string{"part 2/3", "options", `"seed":3`}},
		{"truncated part file", func(t *testing.T, parts string, args []string) {
			p := filepath.Join(parts, shard.PartFileName(1, 3))
			st, err := os.Stat(p)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.Truncate(p, st.Size()-100); err != nil {
				t.Fatal(err)
			}
		}, shard.ErrMismatch, []string{"part 1/3", "part-00001-of-00003.bin", "truncated"}},
		{"corrupted part file", func(t *testing.T, parts string, args []string) {
			p := filepath.Join(parts, shard.PartFileName(2, 3))
			b, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			b[len(b)-3] ^= 1
			if err := os.WriteFile(p, b, 0o644); err != nil {
				t.Fatal(err)
			}
		}, shard.ErrMismatch, []string{"part 2/3", "part-00002-of-00003.bin", "SHA-256"}},
		{"stale parts of another split", func(t *testing.T, parts string, args []string) {
			mustPrep(t, append([]string{"--part", "0/2"}, args...)...)
		}, nil, []string{"split 2 and 3 ways"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, args := committedParts(t)
			parts := filepath.Join(out, "parts")
			tc.mess(t, parts, args)
			_, _, err := dataprep(t, "commit", out, "--quiet")
			if err == nil {
				t.Fatal("commit succeeded")
			}
			if tc.wantErr != nil && !errors.Is(err, tc.wantErr) {
				t.Errorf("error %v, want %v", err, tc.wantErr)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
			if _, err := os.Stat(filepath.Join(out, shard.ManifestName)); err == nil {
				t.Error("manifest.json written")
			}
		})
	}
}

// TestKilledPart: a part interrupted mid-run (its context cancelled after
// the input is read, and a process SIGKILLed while it writes its part
// file) leaves nothing commit takes for whole, also when an earlier try of
// the part had finished; running the part again then commits.
func TestKilledPart(t *testing.T) {
	out, args := committedParts(t)
	// A retry of part 1 that is interrupted: the earlier try's manifest is
	// gone before the retry reads a byte.
	ctx, cancel := context.WithCancel(context.Background())
	load := loadTokenizer
	loadTokenizer = func(path string) (*tokenize.Tokenizer, error) {
		defer cancel()
		return load(path)
	}
	var o, e bytes.Buffer
	err := dispatch(ctx, append([]string{"--part", "1/3"}, args...), nil, &o, &e)
	loadTokenizer = load
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled part: %v", err)
	}
	_, _, err = dataprep(t, "commit", out, "--quiet")
	if err == nil || !strings.Contains(err.Error(), "part 1 of 3 missing") {
		t.Fatalf("commit after a cancelled part: %v", err)
	}
	if _, err := os.Stat(filepath.Join(out, shard.ManifestName)); err == nil {
		t.Fatal("manifest.json written")
	}
	// A process killed while it writes its part file.
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	big := bigInput(t)
	bargs := []string{"--input", big, "--tokenizer", qwen.dir, "--seq-len", "256", "--ranks", "2", "--quiet", "--workers", "1", "--out", out, "--force"}
	parts := filepath.Join(out, "parts")
	killAtDir(t, exe, parts, func(names []string) bool {
		for _, n := range names {
			if strings.Contains(n, "part-00000-of-00002.bin") {
				return true
			}
		}
		return false
	}, append([]string{"--part", "0/2"}, bargs...)...)
	if _, err := os.Stat(filepath.Join(parts, shard.PartManifestName(0, 2))); err == nil {
		t.Fatal("killed part left its manifest")
	}
	// Clear the 3-way parts; the 2-way part 0 is missing until it is rerun.
	for i := range 3 {
		os.Remove(filepath.Join(parts, shard.PartManifestName(i, 3)))
	}
	mustPrep(t, append([]string{"--part", "1/2"}, bargs...)...)
	if _, _, err := dataprep(t, "commit", out, "--quiet", "--force"); err == nil || !strings.Contains(err.Error(), "part 0 of 2 missing") {
		t.Fatalf("commit with the killed part: %v", err)
	}
	mustPrep(t, append([]string{"--part", "0/2"}, bargs...)...)
	mustPrep(t, "commit", out, "--quiet", "--force")
	arrowcheck.CheckDir(t, out)
	ref := filepath.Join(t.TempDir(), "ref")
	mustPrep(t, "--input", big, "--tokenizer", qwen.dir, "--seq-len", "256", "--ranks", "2", "--quiet", "--out", ref)
	sameOutput(t, ref, out)
}

// killAtDir runs exe (FERRY_DATAPREP_MAIN mode) with args and SIGKILLs it
// as soon as hit(the names in dir) is true.
func killAtDir(t *testing.T, exe, dir string, hit func([]string) bool, args ...string) {
	t.Helper()
	killAt(t, exe, dir, "part file", hit, args...)
}
