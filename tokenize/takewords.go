package tokenize

import (
	"math/bits"

	"github.com/ferryml/ferry/tokenize/internal/bytestr"
)

// takeWordsGo is appendBlocks' inner loop: it takes the pre-tokens from
// text[pos] that end at m's bits (m: starts in pos's block), while each is
// in the first two slots of its word-table probe, and writes their ids to
// out. It returns pos and m after the ones it took, and how many it took.
// A function of its own, with no call in it, so that its values stay in
// registers: in appendBlocks' body, whose other paths call, the compiler
// spilled the count and reloaded eight of the outer loop's values each
// pre-token. On amd64 takeWords is the same loop in assembly
// (takewords_amd64.s), tested against this one.
//
//go:noinline
func takeWordsGo(words *wordTable, text string, pos int, m uint64, out *[64]int32) (int, uint64, int) {
	j := 0
	for m != 0 {
		n := bits.TrailingZeros64(m) - pos&63
		if n > 16 {
			break
		}
		a, b := shortKey(bytestr.Load64(text, pos), bytestr.Load64(text, pos+8), n)
		id, ok := words.home(a, b, n)
		if !ok {
			if id, ok = words.near(a, b, n); !ok {
				break
			}
		}
		out[j&63] = id
		j++
		pos += n
		m &= m - 1
	}
	return pos, m, j
}
