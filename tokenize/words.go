package tokenize

import (
	"math/bits"
	"slices"

	"github.com/ferryml/ferry/tokenize/internal/bytestr"
	"github.com/ferryml/ferry/tokenize/internal/le"
)

// wordTable is a byte-level model's read-only table of short words: every
// vocabulary key of 1 to 16 bytes whose BPE is its own id alone (with
// ignore_merges, every such key), with the key inline. A pre-token of text
// is one of them far more often than not, so it is found in one probe of
// one cache line, and a word never seen before costs neither a vocabulary
// lookup nor BPE (HF's word cache starts empty; Gigatoken seeds its cache
// with the vocabulary the same way). It is built at Load, in id order so
// that the frequent (low) ids of a BPE vocabulary sit in their first slot,
// and stored in the compiled cache as it is.
type wordTable struct {
	// slots are triples of words: the key's a, b (see shortKey), and
	// len(key)+1 | id<<32; a third word of 0 is an empty slot. A flat
	// []uint64, so that the compiled cache can hold it as it is. At least
	// 16 slots, at least one empty, a power of two.
	slots []uint64
	shift uint    // 64 - log2(number of slots)
	mask  uint64  // number of slots - 1
	n     int     // filled slots
	mem   *le.Mem // owns slots when they are huge pages (le.HugeUint64s)
}

const minWordSlots = 16

// wordIndex is the hash of the short key a, b of n bytes: its top bits
// index a wordTable. Not seeded (the table is stored): text made to collide
// only lengthens probes through the table's fixed clusters.
func wordIndex(a, b uint64, n int) uint64 {
	return a*hashK1 ^ (b^uint64(n))*hashK3
}

// find returns the id of the short key a, b of n bytes.
func (w *wordTable) find(a, b uint64, n int) (int32, bool) {
	for i := wordIndex(a, b, n) >> (w.shift & 63); ; i = (i + 1) & w.mask {
		s := w.slots[3*i : 3*i+3 : 3*i+3]
		if s[0] == a && s[1] == b && uint32(s[2]) == uint32(n)+1 {
			return int32(s[2] >> 32), true
		}
		if s[2] == 0 {
			return -1, false
		}
	}
}

// home returns the id of the short key a, b of n bytes when it is in its
// first slot, find's first probe: the encode loops take it (and near)
// inline and leave the rest to appendShort. Its slot and near's are read
// without bounds checks: shift and mask are of the table's size
// (newWordTable, readCompiledBody).
func (w *wordTable) home(a, b uint64, n int) (int32, bool) {
	s := bytestr.Triple(w.slots, wordIndex(a, b, n)>>(w.shift&63)*3)
	return int32(s[2] >> 32), s[0]^a|s[1]^b|uint64(uint32(s[2])^uint32(n+1)) == 0
}

// near returns the id of the short key a, b of n bytes when it is in the
// slot after its first, find's second probe (most displaced keys are there).
func (w *wordTable) near(a, b uint64, n int) (int32, bool) {
	s := bytestr.Triple(w.slots, (wordIndex(a, b, n)>>(w.shift&63)+1)&w.mask*3)
	return int32(s[2] >> 32), s[0]^a|s[1]^b|uint64(uint32(s[2])^uint32(n+1)) == 0
}

// newWordTable returns an empty table of room slots at least.
func newWordTable(room int) wordTable {
	size := 1 << max(4, bits.Len(uint(room-1)))
	slots, mem := le.HugeUint64s(3 * size)
	return wordTable{slots: slots, shift: uint(64 - bits.TrailingZeros(uint(size))), mask: uint64(size - 1), mem: mem}
}

func (w *wordTable) insert(k string, id int32) {
	a, b := keyOf(k)
	i := wordIndex(a, b, len(k)) >> w.shift
	for w.slots[3*i+2] != 0 {
		i = (i + 1) & w.mask
	}
	w.slots[3*i], w.slots[3*i+1], w.slots[3*i+2] = a, b, uint64(len(k)+1)|uint64(uint32(id))<<32
	w.n++
}

// buildWords fills m.words from the vocabulary and selfBPE (empty for a
// character-level model, whose words are not raw bytes).
func (m *bpeModel) buildWords() {
	var keep []int32
	if !m.charLevel {
		m.vocab.all(func(k string, id int32) bool {
			if len(k) > 0 && len(k) <= 16 && (m.ignoreMerges || m.selfBPE != nil && m.selfBPE[id]) {
				keep = append(keep, id)
			}
			return true
		})
	}
	slices.Sort(keep)                                     // id order: see wordTable
	m.words = newWordTable(len(keep) + len(keep)*2/3 + 1) // load factor at most 3/5
	for _, id := range keep {
		m.words.insert(m.vocab.key(uint32(id)), id)
	}
}

// checkWordSlots returns the number of filled slots of a word table, the
// largest id in them and whether a filled one has a key length outside 1
// to 16.
func checkWordSlots(slots []uint64) (filled int, maxID uint32, badLen bool) {
	var bad uint64
	for i := 0; i+2 < len(slots); i += 3 {
		v := slots[i+2]
		full := (v | -v) >> 63
		filled += int(full)
		l := uint32(v)
		bad |= uint64(l-2) >> 4 & full // l < 2 or l > 17 (uint32 wraps)
		maxID = max(maxID, uint32(v>>32))
	}
	return filled, maxID, bad != 0
}

// keyOf is the key a, b of a word of at most 16 bytes (see shortKey): its
// bytes in little-endian order, zero-padded.
func keyOf(p string) (a, b uint64) {
	for i := len(p) - 1; i >= 8; i-- {
		b = b<<8 | uint64(p[i])
	}
	for i := min(len(p), 8) - 1; i >= 0; i-- {
		a = a<<8 | uint64(p[i])
	}
	return a, b
}
