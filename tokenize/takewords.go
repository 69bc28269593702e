package tokenize

import (
	"math/bits"

	"github.com/ferryml/ferry/tokenize/internal/bytestr"
)

// takeMasks[n] is takeWords' (assembly) key masks and tag of a pre-token
// of n bytes: shortMasks[n], the length bits of wordTag for n up to
// shortWord (0 past it), and a word of padding (32-byte rows, indexed by a
// shift).
var takeMasks = func() (m [17][4]uint64) {
	for n := range m {
		m[n][0], m[n][1] = shortMasks[n][0], shortMasks[n][1]
		if n <= shortWord {
			m[n][2] = wordTag(0, n)
		}
	}
	return m
}()

// takeWordsGo is appendBlocks' inner loop: it takes the pre-tokens from
// text[pos] that end at m's bits (starts in the block at base, which holds
// pos or follows pos's), then at next's (starts in the block after it),
// while each is in the first two slots of its word-table probe (the first
// for a key of more than shortWord bytes, in the table's long part), and
// writes their ids to out. So the pre-token that runs past a block is
// taken in the loop too, where it was a call of its own per block. It
// returns pos after the ones it took, the starts left (m, or next once m's
// are all taken), the base of their block and how many it took. A function
// of its own, with no call in it, so that its values stay in registers: in
// appendBlocks' body, whose other paths call, the compiler spilled the
// count and reloaded eight of the outer loop's values each pre-token. On
// amd64 takeWords is the same loop in assembly (takewords_amd64.s), tested
// against this one.
//
//go:noinline
func takeWordsGo(words *wordTable, text string, base, pos int, m, next uint64, out *[128]int32) (int, uint64, int, int) {
	j := 0
	for {
		if m == 0 {
			if next == 0 {
				break
			}
			m, next, base = next, 0, base+64
		}
		n := base + bits.TrailingZeros64(m) - pos
		if n > 16 {
			break
		}
		a, b := shortKey(bytestr.Load64(text, pos), bytestr.Load64(text, pos+8), n)
		var id int32
		var ok bool
		if n > shortWord {
			if id, ok = words.longHome(a, b, n); !ok {
				break
			}
		} else if id, ok = words.home(a, b, n); !ok {
			if id, ok = words.near(a, b, n); !ok {
				break
			}
		}
		out[j&127] = id
		j++
		pos += n
		m &= m - 1
	}
	return pos, m, base, j
}
