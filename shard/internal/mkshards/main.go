// Command mkshards writes a synthetic but valid shard directory (shards +
// manifest.json) for tests of shard readers that have no tokenizer:
//
//	go run ./shard/internal/mkshards -out DIR -ranks 2 -rows 100 -seq-len 64 -mode pack
//
// Example i (its sample index) has 1 + (i*7919 mod seq-len) tokens in pad
// mode, 1 + (i*7919 mod max(seq-len/4, 1)) in pack mode; token j of example
// i is 1000 + (i*31 + j) mod 50000. Pad id is 0. -rows counts examples.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"

	"github.com/ferryml/ferry/internal/testutil/synth"
	"github.com/ferryml/ferry/shard"
)

func main() {
	out := flag.String("out", "", "output directory (required)")
	ranks := flag.Int("ranks", 2, "number of shards")
	rows := flag.Int("rows", 100, "number of synthetic examples (source records)")
	seqLen := flag.Int("seq-len", 64, "tokens per row")
	mode := flag.String("mode", "pad", "pad or pack")
	labels := flag.String("labels", "mask-pad", "mask-pad, copy or mask-prompt")
	seed := flag.Uint64("seed", 0, "shuffle seed")
	batchRows := flag.Int("batch-rows", 0, "rows per record batch (default 1024)")
	dropLast := flag.Bool("drop-last", false, "drop tail rows instead of wrapping around")
	force := flag.Bool("force", false, "replace an existing result")
	flag.Parse()
	if err := run(*out, *ranks, *rows, *seqLen, *mode, *labels, *seed, *batchRows, *dropLast, *force); err != nil {
		fmt.Fprintln(os.Stderr, "mkshards:", err)
		os.Exit(1)
	}
}

func run(out string, ranks, rows, seqLen int, mode, labels string, seed uint64, batchRows int, dropLast, force bool) error {
	if out == "" {
		return fmt.Errorf("-out is required")
	}
	m, err := shard.ParseMode(mode)
	if err != nil {
		return err
	}
	lp, err := shard.ParseLabels(labels)
	if err != nil {
		return err
	}
	layout := shard.Layout{SeqLen: seqLen, Mode: m, Labels: lp, PadID: 0}
	src, err := shard.NewExampleSource(layout, synth.Examples(rows, seqLen, m))
	if err != nil {
		return err
	}
	pad := int32(0)
	eos := "<eos>"
	man, err := shard.WriteDir(context.Background(), out, shard.DirConfig{
		Layout: shard.Layout{SeqLen: seqLen, Mode: m, Labels: lp}, Ranks: ranks, Seed: seed, DropLast: dropLast,
		BatchRows: batchRows, Force: force, Template: "synthetic", TemplateText: "",
		Tokenizer: shard.TokenizerInfo{SHA256: "synthetic", EOSID: &pad, PadID: 0, EOS: &eos, Pad: &eos},
		CreatedBy: "ferry mkshards",
		Stats:     shard.Stats{RecordsRead: int64(rows)},
	}, src)
	if err != nil {
		return err
	}
	fmt.Printf("mkshards: %s: %d ranks x %d rows (%d unique rows from %d examples), seq_len %d, mode %s\n",
		out, man.Ranks, man.RowsPerRank, man.UniqueRows, rows, seqLen, m)
	return nil
}
