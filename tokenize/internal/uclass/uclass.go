// Package uclass answers which character class of the Hugging Face tokenizers
// regex engine (Oniguruma, Unicode 16.0) a code point belongs to: letter
// (\p{L}), number (\p{N}), white space (\s) or other. Go's unicode package is
// Unicode 15.0 and misses 4,924 letters and 80 numbers that HF tokenizers
// knows, so the pre-tokenizer uses these tables instead.
//
// The tables are generated from testdata/tokenizers/onig-unicode-classes.txt
// (probed from the engine itself) by `go generate`; a test checks every code
// point against that file.
package uclass

//go:generate go run gen.go -in ../../../testdata/tokenizers/onig-unicode-classes.txt -out tables.go

// Class is the character class of a code point.
type Class uint8

// The classes; they are disjoint.
const (
	Other  Class = 0
	Letter Class = 1
	Number Class = 2
	Space  Class = 3
)

// Of returns the class of r; invalid code points are Other.
func Of(r rune) Class {
	if uint32(r) >= 0x110000 {
		return Other
	}
	return Class(stage2[int(stage1[r>>8])<<8|int(r&0xff)])
}

// ASCII holds the class of every ASCII byte, for the fast path.
var ASCII = func() (t [128]Class) {
	for i := range t {
		t[i] = Of(rune(i))
	}
	return
}()
