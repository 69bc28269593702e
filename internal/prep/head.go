package prep

import (
	"fmt"

	"github.com/ferryml/ferry/internal/dataset"
	"github.com/ferryml/ferry/shard"
)

// The three cuts of MaxRecords ("use only the input's first N records").
// A single run cuts the records it read (headRecords). A part cannot know
// how many records the parts before it hold, so it keeps only the records
// that are past the head whatever they hold (headPartRecords: local index
// >= N); Commit, which knows, cuts the assembled examples and recounts the
// stats a single run would have (headExamples). Together they give the
// single run's examples and stats.

// headRecords keeps res's first n records (n > 0); fewer is an error
// naming input.
func headRecords(res *dataset.Result, n int64, input string) error {
	return res.Head(n, input)
}

// headPartRecords drops a part's records whose local index is n or more
// (n > 0): they are past the head whatever the earlier parts hold.
func headPartRecords(res *dataset.Result, n int64) {
	if n <= 0 {
		return
	}
	keep := headSamples(res.Samples, n)
	res.Records, res.Samples = res.Records[:keep], res.Samples[:keep]
}

// headExamples keeps the assembled examples (global sample indices) of
// the first n records (n > 0) and returns them with the records kept, and
// the truncated and split counts over them.
func headExamples(exs []shard.Example, flags []uint8, n int64) (_ []shard.Example, _ []uint8, kept, truncated, split int64) {
	keep := 0
	for keep < len(exs) && exs[keep].Sample < n {
		keep++
	}
	exs, flags = exs[:keep], flags[:keep]
	for k, e := range exs {
		if k == 0 || e.Sample != exs[k-1].Sample {
			kept++
		}
		if flags[k]&shard.PartTruncated != 0 {
			truncated++
		}
		if flags[k]&shard.PartSplit != 0 {
			split++
		}
	}
	return exs, flags, kept, truncated, split
}

// errTooFewRecords is Commit's form of Result.Head's error.
func errTooFewRecords(n int64, input string, total int64) error {
	return fmt.Errorf("%w: --max-records %d: %s has only %d records", dataset.ErrLimit, n, input, total)
}
