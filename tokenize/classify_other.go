//go:build !amd64 || purego || noasm

package tokenize

const hasAVX2 = false

// classify computes the class masks of the 64 bytes at p.
func classify(p *[64]byte) classMasks { return classifyGo(p) }

func classifyAVX2(p *[64]byte, c *classMasks) { panic("no AVX2 classifier in this build") }
