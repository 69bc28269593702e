//go:build amd64 && !purego && !noasm

package tokenize

import "unsafe"

// takeWords is takeWordsGo in assembly (takewords_amd64.s): the same loop
// without the spills and reloads the compiler gives it.
func takeWords(words *wordTable, text string, pos int, m uint64, out *[64]int32) (int, uint64, int) {
	if m == 0 {
		return pos, 0, 0
	}
	base := pos &^ 63
	off, m, j := takeWordsAsm(unsafe.SliceData(words.slots), uint64(words.shift), words.mask, &shortMasks,
		unsafe.Add(unsafe.Pointer(unsafe.StringData(text)), base), pos&63, m, out)
	return base + off, m, j
}

// takeWordsAsm is takeWordsGo's loop over the block at block (text's
// bytes from pos&^63), from its byte off: slots, shift and mask are the
// word table's, masks is &shortMasks. The caller makes sure that 16 bytes
// can be read from each start it passes (off, and m's bits but the last).
//
//go:noescape
func takeWordsAsm(slots *uint64, shift, mask uint64, masks *[32][2]uint64, block unsafe.Pointer, off int, m uint64, out *[64]int32) (int, uint64, int)
