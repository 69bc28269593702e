//go:build amd64 && !purego && !noasm

package tokenize

import "github.com/ferryml/ferry/tokenize/internal/bytestr"

// overreads reports whether takeWords may read the 15 bytes past text's
// end: they are in the memory page of its last byte, so reading them cannot
// fault (Go's runtime reads past the ends of strings in its assembly on the
// same ground), and the assembly masks off all but a key's own bytes. Then
// the text's last pre-tokens are taken in the loop too. takeWordsGo reads
// them as well in tests, which put the text in a longer string.
func overreads(text string) bool { return bytestr.SamePage(text, 15, pageSize) }

// readsPast is true: takeWords may read past the text's end (overreads).
const readsPast = true

// takeWords is takeWordsGo in assembly (takewords_amd64.s): the same loop
// without the spills and reloads the compiler gives it.
func takeWords(words *wordTable, text string, base, pos int, m, u uint64, run [][2]uint64, last uint64, out []int32) (int, uint64, int, int) {
	if m == 0 && (u != 0 || len(run) == 0) {
		return pos, 0, base, 0
	}
	// out must have room for 64 ids a block: the assembly does not check.
	_ = out[64*len(run)+63]
	var r *[2]uint64
	if len(run) > 0 {
		r = &run[0]
	}
	return takeWordsAsm(&words.slots[0], uint64(words.shift), words.mask, &takeMasks, bytestr.Data(text), base, pos, m, u, r, len(run), last, &out[0], &words.long[0], uint64(words.longShift))
}

// takeWordsAsm is takeWordsGo's loop over text's bytes from pos, with the
// word table's slots, shift and mask, run's first block and length, out's
// first id, and the long slots and their shift; masks is &takeMasks. The
// caller makes sure that 16 bytes can be read from each start it passes
// (pos, and the bits of m and run's blocks but the last).
//
//go:noescape
func takeWordsAsm(slots *uint64, shift, mask uint64, masks *[17][4]uint64, text *byte, base, pos int, m, u uint64, run *[2]uint64, nrun int, last uint64, out *int32, long *uint64, longShift uint64) (int, uint64, int, int)
