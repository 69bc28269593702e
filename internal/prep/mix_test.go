package prep

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/ferryml/ferry/internal/testutil/arrowcheck"
	"github.com/ferryml/ferry/shard"
)

// mixConfig is a run of the recipe text (written to recipe.yaml in a
// temporary directory, %s replaced by the absolute testdata directory).
func mixConfig(t *testing.T, recipe string, mode shard.Mode) Config {
	t.Helper()
	dir := t.TempDir()
	td, err := filepath.Abs(filepath.Join("..", "..", "testdata"))
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "recipe.yaml")
	if err := os.WriteFile(p, []byte(strings.ReplaceAll(recipe, "TESTDATA", td)), 0o644); err != nil {
		t.Fatal(err)
	}
	return Config{
		Recipe: p, Tokenizer: qwenDir, Date: "2026-07-26",
		Layout: shard.Layout{SeqLen: 512, Mode: mode},
		Ranks:  1, Seed: 7, Workers: 2, Out: filepath.Join(dir, "out"),
	}
}

// mixSeg is one segment read back: its source, sample and tokens.
type mixSeg struct {
	source int32
	sample int64
	ids    []int32
}

// readMix reads every unique row of a one-rank output (positions
// 0..unique_rows-1: no wrap-around) and returns its segments.
func readMix(t *testing.T, out string) (*shard.Manifest, []mixSeg) {
	t.Helper()
	m, r, err := shard.OpenDir(out, 0, shard.WithChecksum())
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if m.Ranks != 1 || m.UniqueRows != r.NumRows() {
		t.Fatalf("readMix wants one rank without wrap-around: %d ranks, %d unique rows, %d rows", m.Ranks, m.UniqueRows, r.NumRows())
	}
	var segs []mixSeg
	var row shard.Row
	for i := range r.NumRows() {
		if err := r.Row(i, &row); err != nil {
			t.Fatal(err)
		}
		for _, s := range row.Segments {
			segs = append(segs, mixSeg{s.Source, s.Sample, slices.Clone(row.InputIDs[s.Start : s.Start+s.Length])})
		}
	}
	return m, segs
}

const twoAlpaca = `# general 70%%, the rest Chinese
sources:
  - name: en
    inputs: [TESTDATA/alpaca/alpaca_tiny.json]
    weight: %s
  - name: zh
    inputs: TESTDATA/alpaca/alpaca_zh_demo.json.zst
    format: alpaca
    max_records: 300
    weight: %s
`

// TestMixWeights: each weighted source's tokens are within half of its
// longest record's tokens of its target, the manifest's per-source counts
// are what the shards hold, and the shares add up.
func TestMixWeights(t *testing.T) {
	for _, w := range [][2]string{{"0.7", "0.3"}, {"1", "3"}} {
		t.Run(w[0]+"-"+w[1], func(t *testing.T) {
			c := mixConfig(t, fmt.Sprintf(twoAlpaca, w[0], w[1]), shard.ModePad)
			res, err := Run(context.Background(), c)
			if err != nil {
				t.Fatal(err)
			}
			m, segs := readMix(t, c.Out)
			if res.Manifest.Version != shard.FormatVersion || len(m.Sources) != 2 || m.Sources[0].Name != "en" || m.Sources[1].Name != "zh" {
				t.Fatalf("manifest version %d, sources %+v", m.Version, m.Sources)
			}
			tokens := make([]int64, 2)
			longest := make([]int64, 2)
			uses := map[[2]int64]int{}
			for _, s := range segs {
				tokens[s.source] += int64(len(s.ids))
				longest[s.source] = max(longest[s.source], int64(len(s.ids)))
				uses[[2]int64{int64(s.source), s.sample}]++
			}
			var total, shares float64
			for i := range tokens {
				total += float64(tokens[i])
			}
			for i, si := range m.Sources {
				if si.Tokens != tokens[i] {
					t.Errorf("source %s: manifest tokens %d, shards hold %d", si.Name, si.Tokens, tokens[i])
				}
				if d := si.Tokens - si.TokensAsked; 2*max(d, -d) > longest[i] {
					t.Errorf("source %s: %d tokens for a target of %d: off by more than half its longest record (%d)", si.Name, si.Tokens, si.TokensAsked, longest[i])
				}
				var used, n int64
				for k, u := range uses {
					if k[0] == int64(i) {
						used++
						n += int64(u)
					}
				}
				if si.RecordsUsed != used || si.Uses != n {
					t.Errorf("source %s: records_used %d uses %d, the shards hold %d records %d times", si.Name, si.RecordsUsed, si.Uses, used, n)
				}
				shares += si.Share
				if want := float64(tokens[i]) / total; si.Share != want {
					t.Errorf("source %s: share %v, want %v", si.Name, si.Share, want)
				}
			}
			en := m.Sources[0]
			want := 0.7
			if w[0] == "1" {
				want = 0.25 // weights 1 and 3, normalized
			}
			if en.ShareAsked < want-1e-9 || en.ShareAsked > want+1e-9 || en.RecordsRead != 100 || m.Sources[1].RecordsRead != 300 {
				t.Errorf("en: share asked %v (want %v), records read %d and zh %d", en.ShareAsked, want, en.RecordsRead, m.Sources[1].RecordsRead)
			}
			if shares < 1-1e-9 || shares > 1+1e-9 {
				t.Errorf("shares sum to %v", shares)
			}
		})
	}
}

// TestMixRepeat: repeat 2.5 uses every record 2 or 3 times and exactly
// half of them 3 times (which half follows the seed), next to a chat
// source with a weight, whose share of the output is then 0.4.
func TestMixRepeat(t *testing.T) {
	recipe := `sources:
  - name: domain
    inputs: [TESTDATA/alpaca/alpaca_tiny.json]
    max_records: 40
    repeat: 2.5
  - name: chat
    inputs: [TESTDATA/chat/fastchat-dummy/dummy_conversation.json.zst]
    format: chat
    weight: 0.4
`
	thrice := map[uint64][]int64{}
	for _, seed := range []uint64{7, 8} {
		c := mixConfig(t, recipe, shard.ModePad)
		c.Seed = seed
		if _, err := Run(context.Background(), c); err != nil {
			t.Fatal(err)
		}
		m, segs := readMix(t, c.Out)
		count := map[int64]int{}
		for _, s := range segs {
			if s.source == 0 {
				count[s.sample]++
			}
		}
		if len(count) != 40 {
			t.Fatalf("seed %d: %d records of domain used, want all 40", seed, len(count))
		}
		for k, n := range count {
			switch n {
			case 3:
				thrice[seed] = append(thrice[seed], k)
			case 2:
			default:
				t.Fatalf("seed %d: record %d used %d times, want 2 or 3", seed, k, n)
			}
		}
		if len(thrice[seed]) != 20 {
			t.Fatalf("seed %d: %d records used 3 times, want 20", seed, len(thrice[seed]))
		}
		d := m.Sources[0]
		if d.Uses != 100 || d.Repeats != 2.5 || d.RecordsUsed != 40 || *d.Repeat != 2.5 || d.Labels != shard.LabelsMaskPad || d.Format != FormatAlpaca {
			t.Errorf("domain: %+v", d)
		}
		ch := m.Sources[1]
		if ch.Format != FormatChat || ch.Labels != shard.LabelsAssistant || m.Labels != shard.LabelsAssistant {
			t.Errorf("chat source %+v, output labels %s", ch, m.Labels)
		}
		if ch.ShareAsked < 0.4-1e-9 || ch.ShareAsked > 0.4+1e-9 {
			t.Errorf("chat: share asked %v, want 0.4", ch.ShareAsked)
		}
	}
	slices.Sort(thrice[7])
	slices.Sort(thrice[8])
	if slices.Equal(thrice[7], thrice[8]) {
		t.Errorf("seeds 7 and 8 repeat the same half: %v", thrice[7])
	}
}

// TestMixDeterministic: the same recipe and seed give the same bytes for
// any number of workers and ranks' writers; another seed another mix.
func TestMixDeterministic(t *testing.T) {
	ctx := context.Background()
	c := mixConfig(t, fmt.Sprintf(twoAlpaca, "0.6", "0.4"), shard.ModePack)
	c.Ranks = 3
	var outs []string
	for _, workers := range []int{1, 3} {
		c.Workers, c.Out = workers, filepath.Join(t.TempDir(), "out")
		if _, err := Run(ctx, c); err != nil {
			t.Fatal(err)
		}
		outs = append(outs, c.Out)
	}
	sameDir(t, outs[0], outs[1])
	c.Seed, c.Out = 8, filepath.Join(t.TempDir(), "out")
	if _, err := Run(ctx, c); err != nil {
		t.Fatal(err)
	}
	a, _ := os.ReadFile(filepath.Join(outs[0], shard.FileName(0, 3)))
	b, _ := os.ReadFile(filepath.Join(c.Out, shard.FileName(0, 3)))
	if string(a) == string(b) {
		t.Errorf("seeds 7 and 8 gave the same shard")
	}
}

// TestMixPack: in pack mode every segment keeps its source and sample:
// its tokens are that record's tokens in the pad-mode output, and each
// (source, sample) appears as often.
func TestMixPack(t *testing.T) {
	recipe := `sources:
  - name: en
    inputs: [TESTDATA/alpaca/alpaca_tiny.json]
    max_records: 60
    repeat: 1.5
  - name: chat
    inputs: [TESTDATA/chat/fastchat-dummy/dummy_conversation.json.zst]
    weight: 0.5
`
	ctx := context.Background()
	got := map[shard.Mode]map[string]int{}
	for _, mode := range []shard.Mode{shard.ModePad, shard.ModePack} {
		c := mixConfig(t, recipe, mode)
		if _, err := Run(ctx, c); err != nil {
			t.Fatal(err)
		}
		arrowcheck.CheckDir(t, c.Out) // pyarrow reads the version 2 shards
		m, segs := readMix(t, c.Out)
		if mode == shard.ModePack && m.UniqueRows >= len(segs) {
			t.Fatalf("pack mode: %d rows for %d segments: nothing packed", m.UniqueRows, len(segs))
		}
		got[mode] = map[string]int{}
		for _, s := range segs {
			got[mode][fmt.Sprint(s.source, s.sample, s.ids)]++
		}
	}
	if len(got[shard.ModePad]) == 0 || fmt.Sprint(got[shard.ModePad]) != fmt.Sprint(got[shard.ModePack]) {
		t.Errorf("pack mode's (source, sample, tokens) differ from pad mode's")
	}
}

// TestMixBadRecipe: each mistake is an ErrConfig naming the recipe file
// and line.
func TestMixBadRecipe(t *testing.T) {
	empty := filepath.Join(t.TempDir(), "empty.jsonl")
	if err := os.WriteFile(empty, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	en := "[TESTDATA/alpaca/alpaca_tiny.json]"
	for _, tc := range []struct {
		name, recipe, want string
	}{
		{"unknown key", "sources:\n  - name: a\n    inputs: " + en + "\n    wieght: 1\n", `recipe.yaml:4: unknown key "wieght"`},
		{"unknown top key", "source:\n  - name: a\n", `recipe.yaml:1: unknown key "source"`},
		{"zero weight", "sources:\n  - name: a\n    inputs: " + en + "\n    weight: 0\n", "recipe.yaml:4: weight 0: want a number > 0"},
		{"negative weight", "sources:\n  - name: a\n    inputs: " + en + "\n    weight: 1\n  - name: b\n    inputs: " + en + "\n    weight: -0.5\n", "recipe.yaml:7: weight -0.5: want a number > 0"},
		{"weight and repeat", "sources:\n  - name: a\n    inputs: " + en + "\n    weight: 1\n    repeat: 2\n", `recipe.yaml:2: source "a" has both weight and repeat`},
		{"neither", "sources:\n  - name: a\n    inputs: " + en + "\n", `recipe.yaml:2: source "a" has neither weight nor repeat`},
		{"same name", "sources:\n  - name: a\n    inputs: " + en + "\n    weight: 1\n  - name: a\n    inputs: " + en + "\n    weight: 1\n", `recipe.yaml:5: source "a": the name is already that of the source at line 2`},
		{"no records", "sources:\n  - name: a\n    inputs: " + en + "\n    weight: 1\n  - name: nothing\n    inputs: [" + empty + "]\n    weight: 1\n", `recipe.yaml:5: source "nothing": `},
		{"no such file", "sources:\n  - name: a\n    inputs: [TESTDATA/none.json]\n    repeat: 1\n", `recipe.yaml:2: source "a": `},
		{"weights too big", "sources:\n  - name: a\n    inputs: " + en + "\n    weight: 1\n  - name: b\n    inputs: " + en + "\n    repeat: 1\n", "recipe.yaml:2: the weights of a sum to 1"},
		{"json", "{\"sources\": [\n  {\"name\": \"a\", \"inputs\": [\"x\"],\n   \"weight\": 1, \"epochs\": 2}]}\n", `recipe.yaml:3: unknown key "epochs"`},
		{"yaml syntax", "sources:\n  - name: [a\n", "recipe.yaml: "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := mixConfig(t, tc.recipe, shard.ModePad)
			_, err := Run(context.Background(), c)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error containing %q", err, tc.want)
			}
			if !errors.Is(err, ErrConfig) && !strings.Contains(tc.name, "no") {
				t.Errorf("%v does not wrap ErrConfig", err)
			}
			if _, err := os.Stat(filepath.Join(c.Out, shard.ManifestName)); err == nil {
				t.Errorf("a failed run wrote %s", shard.ManifestName)
			}
		})
	}
}

// TestMixSplitIdentical: a recipe's split run (RunPart for every part, in
// any order, then Commit) gives Run's bytes, with Alpaca and chat sources,
// a repeat and a weight, in pack mode.
func TestMixSplitIdentical(t *testing.T) {
	ctx := context.Background()
	recipe := `sources:
  - name: en
    inputs: [TESTDATA/alpaca/alpaca_tiny.json, TESTDATA/alpaca/alpaca_zh_demo.json.zst]
    max_records: 250
    labels: mask-prompt
    repeat: 1.5
  - name: chat
    inputs: [TESTDATA/chat/fastchat-dummy/dummy_conversation.json.zst]
    weight: 0.4
`
	c := mixConfig(t, recipe, shard.ModePack)
	c.Ranks = 3
	ref := c.Out
	if _, err := Run(ctx, c); err != nil {
		t.Fatal(err)
	}
	c.Out = filepath.Join(t.TempDir(), "split")
	for _, i := range []int{2, 0, 1} {
		if _, err := RunPart(ctx, c, Part{I: i, N: 3}); err != nil {
			t.Fatal(err)
		}
	}
	// A missing part is named.
	parts := filepath.Join(c.Out, "parts")
	keep := filepath.Join(t.TempDir(), mixPartName(1, 3))
	if err := os.Rename(filepath.Join(parts, mixPartName(1, 3)), keep); err != nil {
		t.Fatal(err)
	}
	if _, err := Commit(ctx, CommitConfig{Out: c.Out, Workers: 2}); err == nil || !strings.Contains(err.Error(), "part 1 of 3 of a mixture missing") {
		t.Fatalf("commit without part 1: %v", err)
	}
	if err := os.Rename(keep, filepath.Join(parts, mixPartName(1, 3))); err != nil {
		t.Fatal(err)
	}
	res, err := Commit(ctx, CommitConfig{Out: c.Out, Workers: 2})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Manifest.Sources) != 2 {
		t.Fatalf("committed manifest has %d sources", len(res.Manifest.Sources))
	}
	sameDir(t, ref, c.Out)
}

// TestMixTokensAndRelativeInputs: the recipe's tokens sets the output's
// size when every source has a weight, and relative inputs are relative to
// the recipe's directory.
func TestMixTokensAndRelativeInputs(t *testing.T) {
	dir := t.TempDir()
	b, err := os.ReadFile(filepath.Join(alpacaDir, "alpaca_tiny.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "tiny.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	c := mixConfig(t, "tokens: 30000\nsources:\n  - {name: a, inputs: tiny.json, weight: 2}\n  - {name: b, inputs: [TESTDATA/alpaca/alpaca_zh_demo.json.zst], max_records: 100, weight: 1}\n", shard.ModePad)
	if err := os.Rename(c.Recipe, filepath.Join(dir, "recipe.yaml")); err != nil {
		t.Fatal(err)
	}
	c.Recipe = filepath.Join(dir, "recipe.yaml")
	res, err := Run(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	src := res.Manifest.Sources
	if src[0].Input != filepath.Join(dir, "tiny.json") || src[0].TokensAsked != 20000 || src[1].TokensAsked != 10000 {
		t.Fatalf("sources %+v: want a read from %s, targets 20000 and 10000", src, dir)
	}
	if d := res.Manifest.Stats.Tokens - 30000; max(d, -d) > 2*int64(c.Layout.SeqLen) {
		t.Errorf("%d tokens, want 30000 within two records", res.Manifest.Stats.Tokens)
	}
}
