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
// pos or follows pos's), then, once they are all taken and u (the unknowns
// of that block after pos) is 0, those that end at the known starts of the
// blocks after it in run (each block's starts and unknowns, as the block
// scanner's run holds them; last masks the starts of run's last block),
// while each is in the word table (in the first slot of its probe for a
// key of more than shortWord bytes, in the table's long part), and
// writes their ids to out, which has room for 64 a block (len(run)+1
// blocks). So one call takes the pre-tokens of a whole run of blocks,
// those that cross from one block to the next too. It returns pos after
// the ones it took, the starts left (m's, or those of the block it went on
// into), the base of their block and how many it took. A function of its
// own, with no call in it, so that its values stay in registers: in
// appendBlocks' body, whose other paths call, the compiler spilled the
// count and reloaded eight of the outer loop's values each pre-token. On
// amd64 takeWords is the same loop in assembly (takewords_amd64.s), tested
// against this one.
//
//go:noinline
func takeWordsGo(words *wordTable, text string, base, pos int, m, u uint64, run [][2]uint64, last uint64, out []int32) (int, uint64, int, int) {
	j := 0
	for {
		if m == 0 {
			if u != 0 || len(run) == 0 {
				break
			}
			u = run[0][1]
			m = run[0][0] & (u&-u - 1) // the starts before the first unknown
			if run = run[1:]; len(run) == 0 {
				m &= last
			}
			base += 64
			continue
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
		} else if id, ok = words.find(a, b, n); !ok {
			break
		}
		out[j] = id
		j++
		pos += n
		m &= m - 1
	}
	return pos, m, base, j
}
