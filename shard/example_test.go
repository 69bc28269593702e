package shard_test

import (
	"context"
	"fmt"
	"os"

	"github.com/ferryml/ferry/shard"
)

// Write two ranks of packed rows from tokenized examples, then map rank 1.
func Example() {
	dir, _ := os.MkdirTemp("", "shards")
	defer os.RemoveAll(dir)
	exs := []shard.Example{
		{Sample: 0, Tokens: []int32{11, 12, 13}, Prompt: 1},
		{Sample: 1, Tokens: []int32{21, 22}},
		{Sample: 2, Tokens: []int32{31, 32, 33, 34, 35}},
		{Sample: 3, Tokens: []int32{41}},
	}
	layout := shard.Layout{SeqLen: 6, Mode: shard.ModePack, Labels: shard.LabelsMaskPad, PadID: 0}
	src, err := shard.NewExampleSource(layout, exs)
	if err != nil {
		panic(err)
	}
	m, err := shard.WriteDir(context.Background(), dir, shard.DirConfig{
		Layout: shard.Layout{SeqLen: 6, Mode: shard.ModePack, Labels: shard.LabelsMaskPad}, Ranks: 2, Seed: 1,
	}, src)
	if err != nil {
		panic(err)
	}
	fmt.Println("rows per rank:", m.RowsPerRank, "efficiency:", m.Stats.Efficiency)
	_, r, err := shard.OpenDir(dir, 1, shard.WithChecksum())
	if err != nil {
		panic(err)
	}
	defer r.Close()
	var row shard.Row
	_ = r.Row(0, &row)
	fmt.Println("input_ids:   ", row.InputIDs)
	fmt.Println("labels:      ", row.Labels)
	fmt.Println("position_ids:", row.PositionIDs)
	fmt.Println("segments:    ", row.Segments)
	// Output:
	// rows per rank: 1 efficiency: 0.9166666666666666
	// input_ids:    [11 12 13 21 22 41]
	// labels:       [-100 12 13 -100 22 -100]
	// position_ids: [0 1 2 0 1 0]
	// segments:     [{0 0 3 0} {1 3 2 0} {3 5 1 0}]
}
