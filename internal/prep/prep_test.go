package prep

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/ferryml/ferry/shard"
)

var (
	alpacaDir = filepath.Join("..", "..", "testdata", "alpaca")
	qwenDir   = filepath.Join("..", "..", "testdata", "tokenizers", "qwen2.5")
)

// smallConfig is a run over the tiny Alpaca file into out.
func smallConfig(out string) Config {
	return Config{
		Inputs:    []string{filepath.Join(alpacaDir, "alpaca_tiny.json"), filepath.Join(alpacaDir, "alpaca_zh_demo.json.zst")},
		Tokenizer: qwenDir,
		Layout:    shard.Layout{SeqLen: 256, Mode: shard.ModePack, Labels: shard.LabelsMaskPrompt},
		Ranks:     3, Seed: 5, MaxRecords: 400, Workers: 2, Out: out,
	}
}

// sameDir checks that dirs ref and got hold the same files with the same
// bytes, manifest.json but for stats.seconds; got may hold more.
func sameDir(t *testing.T, ref, got string) {
	t.Helper()
	ents, err := os.ReadDir(ref)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		a, _ := os.ReadFile(filepath.Join(ref, e.Name()))
		b, err := os.ReadFile(filepath.Join(got, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if e.Name() == shard.ManifestName {
			var ma, mb map[string]any
			if err := json.Unmarshal(a, &ma); err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(b, &mb); err != nil {
				t.Fatal(err)
			}
			delete(ma["stats"].(map[string]any), "seconds")
			delete(mb["stats"].(map[string]any), "seconds")
			if !reflect.DeepEqual(ma, mb) {
				t.Errorf("manifest.json differs:\n%s\nvs\n%s", a, b)
			}
		} else if !bytes.Equal(a, b) {
			t.Errorf("%s differs (%d vs %d bytes)", e.Name(), len(a), len(b))
		}
	}
}

// TestSplitIdentical: RunPart for every part, in any order, then Commit
// gives Run's bytes (the split-run contract, through the library).
func TestSplitIdentical(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	ref, split := filepath.Join(dir, "ref"), filepath.Join(dir, "split")
	res, err := Run(ctx, smallConfig(ref))
	if err != nil {
		t.Fatal(err)
	}
	for _, i := range []int{2, 0, 1} {
		pr, err := RunPart(ctx, smallConfig(split), Part{I: i, N: 3})
		if err != nil {
			t.Fatal(err)
		}
		if want := filepath.Join(split, "parts", shard.PartFileName(i, 3)); pr.Loc != want {
			t.Errorf("part file %s, want %s", pr.Loc, want)
		}
	}
	cres, err := Commit(ctx, CommitConfig{Out: split, Workers: 2})
	if err != nil {
		t.Fatal(err)
	}
	sameDir(t, ref, split)
	if res.Format != cres.Format || res.InputBytes != cres.InputBytes || res.Bytes != cres.Bytes {
		t.Errorf("commit read %s %d/%d bytes, the single run %s %d/%d", cres.Format, cres.InputBytes, cres.Bytes,
			res.Format, res.InputBytes, res.Bytes)
	}
	// A second commit refuses the result it finds.
	if _, err := Commit(ctx, CommitConfig{Out: split}); !errors.Is(err, shard.ErrExists) {
		t.Errorf("second commit: %v, want shard.ErrExists", err)
	}
}

// TestCommitMissingPart: a part that has not finished fails Commit naming
// it, and no manifest.json is written.
func TestCommitMissingPart(t *testing.T) {
	ctx := context.Background()
	out := filepath.Join(t.TempDir(), "out")
	for _, i := range []int{0, 2} {
		if _, err := RunPart(ctx, smallConfig(out), Part{I: i, N: 3}); err != nil {
			t.Fatal(err)
		}
	}
	_, err := Commit(ctx, CommitConfig{Out: out})
	if err == nil || !strings.Contains(err.Error(), "part 1 of 3 missing") {
		t.Fatalf("commit: %v", err)
	}
	if _, err := os.Stat(filepath.Join(out, shard.ManifestName)); err == nil {
		t.Error("manifest.json written")
	}
}

// TestConfigErrors: what cannot run is refused with ErrConfig before
// anything is read or written.
func TestConfigErrors(t *testing.T) {
	no := "<nope>"
	for _, tc := range []struct {
		name string
		mess func(c *Config)
		want string
	}{
		{"no input", func(c *Config) { c.Inputs = nil }, "--input"},
		{"seq-len", func(c *Config) { c.Layout.SeqLen = 0 }, "--seq-len 0"},
		{"ranks", func(c *Config) { c.Ranks = 0 }, "--ranks 0"},
		{"mode", func(c *Config) { c.Layout.Mode = "roll" }, "--mode"},
		{"split-long pad", func(c *Config) { c.SplitLong, c.Layout.Mode = true, shard.ModePad }, "--split-long"},
		{"unknown eos", func(c *Config) { c.EOS = &no }, `--eos "<nope>" is not a token`},
		{"seq-len too small", func(c *Config) { c.Layout.SeqLen = 7 }, "too small for the template"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "out")
			c := smallConfig(out)
			tc.mess(&c)
			_, err := Run(context.Background(), c)
			if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want ErrConfig saying %q", err, tc.want)
			}
			if _, err := os.Stat(out); err == nil {
				t.Error("out written")
			}
		})
	}
}
