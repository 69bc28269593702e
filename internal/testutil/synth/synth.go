// Package synth makes synthetic but valid dataprep examples, for tests and
// for shard/internal/mkshards, so that every synthetic dataset in the
// repository has the same, documented content.
package synth

import "github.com/ferryml/ferry/shard"

// Examples returns n examples: example i has 1 + (i·7919) mod maxLen tokens
// (maxLen = seqLen in pad mode, seqLen/4 in pack mode, so packing has
// several examples per row), token j of it is 1000 + (i·31 + j) mod 50000,
// and its first third is the prompt.
func Examples(n, seqLen int, mode shard.Mode) []shard.Example {
	maxLen := seqLen
	if mode == shard.ModePack {
		maxLen = max(seqLen/4, 1)
	}
	exs := make([]shard.Example, n)
	for i := range exs {
		l := 1 + (i*7919)%maxLen
		t := make([]int32, l)
		for j := range t {
			t[j] = int32(1000 + (i*31+j)%50000)
		}
		exs[i] = shard.Example{Sample: int64(i), Tokens: t, Prompt: l / 3}
	}
	return exs
}
