//go:build amd64 && !purego && !noasm

package tokenize

import "github.com/ferryml/ferry/tokenize/internal/bytestr"

// takeWords is takeWordsGo in assembly (takewords_amd64.s): the same loop
// without the spills and reloads the compiler gives it.
func takeWords(words *wordTable, text string, base, pos int, m, next uint64, out *[128]int32) (int, uint64, int, int) {
	if m|next == 0 {
		return pos, 0, base, 0
	}
	return takeWordsAsm(&words.slots[0], uint64(words.shift), words.mask, &takeMasks, bytestr.Data(text), base, pos, m, next, out, &words.long[0], uint64(words.longShift))
}

// takeWordsAsm is takeWordsGo's loop over text's bytes from pos, with the
// word table's slots, shift and mask, and its long slots and their shift;
// masks is &takeMasks. The caller makes sure that 16 bytes can be read from
// each start it passes (pos, and m's and next's bits but the last).
//
//go:noescape
func takeWordsAsm(slots *uint64, shift, mask uint64, masks *[17][4]uint64, text *byte, base, pos int, m, next uint64, out *[128]int32, long *uint64, longShift uint64) (int, uint64, int, int)
