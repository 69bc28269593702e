package prep_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/ferryml/ferry/internal/prep"
	"github.com/ferryml/ferry/shard"
)

// A split run through the library: every part, anywhere and in any order,
// then Commit, which writes what Run would have.
func Example() {
	out, _ := os.MkdirTemp("", "prep-example-")
	defer os.RemoveAll(out)
	cfg := prep.Config{
		Inputs:    []string{filepath.Join("..", "..", "testdata", "alpaca", "alpaca_tiny.json")},
		Tokenizer: filepath.Join("..", "..", "testdata", "tokenizers", "qwen2.5"),
		Layout:    shard.Layout{SeqLen: 256, Mode: shard.ModePack, Labels: shard.LabelsMaskPad},
		Ranks:     2,
		Out:       out,
	}
	ctx := context.Background()
	for i := range 2 {
		if _, err := prep.RunPart(ctx, cfg, prep.Part{I: i, N: 2}); err != nil {
			fmt.Println(err)
			return
		}
	}
	res, err := prep.Commit(ctx, prep.CommitConfig{Out: out})
	if err != nil {
		fmt.Println(err)
		return
	}
	m := res.Manifest
	fmt.Printf("%d ranks of %d rows, %d records read\n", m.Ranks, m.RowsPerRank, m.Stats.RecordsRead)
	// Output: 2 ranks of 18 rows, 100 records read
}
