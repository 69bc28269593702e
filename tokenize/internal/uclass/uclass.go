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
//go:generate go run gencat.go -in ../../../testdata/tokenizers/onig-unicode-categories.txt -out cattables.go

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

// Category is a general category as Oniguruma's \p{..} classes see it
// (Unicode 16.0), for the Split regexes that name them. Code points in none
// of the eight are CatOther (numbers, separators, controls, unassigned...).
type Category uint8

// The categories; they are disjoint. Letter is exactly the union of the five
// letter categories.
const (
	CatOther       Category = 0
	CatUpper       Category = 1 // \p{Lu}
	CatLower       Category = 2 // \p{Ll}
	CatTitle       Category = 3 // \p{Lt}
	CatModifier    Category = 4 // \p{Lm}
	CatOtherLetter Category = 5 // \p{Lo}
	CatMark        Category = 6 // \p{M}
	CatPunct       Category = 7 // \p{P}
	CatSymbol      Category = 8 // \p{S}
	numCategories           = 9
	// NumCategories is the number of Category values.
	NumCategories = numCategories
)

// Cat returns the category of r; invalid code points are CatOther.
func Cat(r rune) Category {
	if uint32(r) >= 0x110000 {
		return CatOther
	}
	return Category(catAt(r) & 0xf)
}

// IsNumeric reports Rust's char::is_numeric(r) (Unicode Nd, Nl, No as the
// Rust standard library inside HF tokenizers 0.23.3 knows them), which HF's
// Digits pre-tokenizer uses. It differs from Oniguruma's \p{N} in 13 code
// points.
func IsNumeric(r rune) bool {
	return uint32(r) < 0x110000 && catAt(r)&0x10 != 0
}

func catAt(r rune) byte {
	hi := int(r >> 8)
	blk := int(catStage1[2*hi]) | int(catStage1[2*hi+1])<<8
	return catStage2[blk<<8|int(r&0xff)]
}

// ASCIICat holds the category of every ASCII byte.
var ASCIICat = func() (t [128]Category) {
	for i := range t {
		t[i] = Cat(rune(i))
	}
	return
}()
