//go:build amd64 && !purego && !noasm

package tokenize

import "golang.org/x/sys/cpu"

// classifyAVX2 computes the class masks of the 64 bytes at p with AVX2
// compares and VPMOVMSKB (classify_amd64.s); TestClassify checks it against
// classifyGo on every byte at every position, FuzzClassify on any block.
//
//go:noescape
func classifyAVX2(p *[64]byte, c *classMasks)

var hasAVX2 = cpu.X86.HasAVX2

// classify computes the class masks of the 64 bytes at p.
func classify(p *[64]byte) (c classMasks) {
	if hasAVX2 {
		classifyAVX2(p, &c)
		return c
	}
	return classifyGo(p)
}
