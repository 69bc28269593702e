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
//
// Keys of up to 12 bytes are in slots of 16 bytes, four to a cache line;
// the few longer ones (4,002 of Qwen2.5's 149,725 keys; pre-tokens of 13
// to 16 bytes are 1.3% of the 52K Alpaca prompts') in a small table of
// their own (long). The encode loop probes the slots at random over
// megabytes: Qwen2.5's 4 MiB, where slots of 24 bytes for every key made
// 6 MiB. With them a cold pass over those prompts read +2.9% (Qwen2.5) and
// +2.5% (Llama-3.1), medians of 20 alternating fresh processes.
type wordTable struct {
	// slots are pairs of words: the key's a (see shortKey), and
	// b | len(key)+1<<32 | id<<40 (b: the key's bytes 8 to 11); a second
	// word of 0 is an empty slot. A flat []uint64, so that the compiled
	// cache can hold it as it is. At least 16 slots, at least one empty, a
	// power of two.
	slots []uint64
	shift uint    // 64 - log2(number of slots)
	mask  uint64  // number of slots - 1
	n     int     // filled slots, of both tables
	mem   *le.Mem // owns slots when they are huge pages (le.Huge)
	// long holds the keys of 13 to 16 bytes in triples of words: a, b and
	// len(key)+1 | id<<32; a third word of 0 is an empty slot. Sized as
	// slots are.
	long      []uint64
	longShift uint
	longMask  uint64
}

const (
	minWordSlots = 16
	// shortWord is the longest key of a wordTable's slots; longer ones
	// are in long.
	shortWord = 12
	// maxWordID bounds the ids of the slots: 24 bits.
	maxWordID = 1<<24 - 1
)

// wordIndex is the hash of the short key a, b of n bytes: its top bits
// index a wordTable's long slots (and ptCache's front table). Not seeded
// (the table is stored): text made to collide only lengthens probes through
// the table's fixed clusters.
func wordIndex(a, b uint64, n int) uint64 {
	return a*hashK1 ^ (b^uint64(n))*hashK3
}

// wordTag is the second word of the slot of the short key a, b of n bytes
// (n <= shortWord: b < 2^32) without its id: b | n+1<<32. A slot holds the
// key when the low 40 bits of its second word are the tag (the id is above
// them) and its first is a. For n of 13 to 16 the tag's length byte is at
// least 14 (b's byte 4 or'ed with n+1), more than any slot's: home
// finds no key longer than shortWord.
func wordTag(b uint64, n int) uint64 { return b | uint64(n+1)<<32 }

// shortIndex is wordIndex for the slots: of the key a and its tag.
func shortIndex(a, tag uint64) uint64 {
	return a*hashK1 ^ tag*hashK3
}

// find returns the id of the short key a, b of n bytes.
func (w *wordTable) find(a, b uint64, n int) (int32, bool) {
	if n > shortWord {
		return w.findLong(a, b, n)
	}
	tag := wordTag(b, n)
	for i := shortIndex(a, tag) >> (w.shift & 63); ; i = (i + 1) & w.mask {
		s := w.slots[2*i : 2*i+2 : 2*i+2]
		if s[0] == a && (s[1]^tag)<<24 == 0 {
			return int32(s[1] >> 40), true
		}
		if s[1] == 0 {
			return -1, false
		}
	}
}

// longHome is home of a key of 13 to 16 bytes: its first slot in long.
// Its slot is read without bounds checks, as home's.
func (w *wordTable) longHome(a, b uint64, n int) (int32, bool) {
	s := bytestr.Triple(w.long, wordIndex(a, b, n)>>(w.longShift&63)*3)
	return int32(s[2] >> 32), s[0]^a|s[1]^b|uint64(uint32(s[2])^uint32(n+1)) == 0
}

// findLong is find of a key of 13 to 16 bytes.
func (w *wordTable) findLong(a, b uint64, n int) (int32, bool) {
	for i := wordIndex(a, b, n) >> (w.longShift & 63); ; i = (i + 1) & w.longMask {
		s := w.long[3*i : 3*i+3 : 3*i+3]
		if s[0] == a && s[1] == b && uint32(s[2]) == uint32(n)+1 {
			return int32(s[2] >> 32), true
		}
		if s[2] == 0 {
			return -1, false
		}
	}
}

// home returns the id of the short key a, b of n bytes when it is in its
// first slot, find's first probe: appendScanned and appendSpan take it
// inline and leave the rest to appendShort. A key of more than shortWord
// bytes is not found (see wordTag). Its slot is read without bounds
// checks: shift is of the table's size (newWordTable, readCompiledBody).
func (w *wordTable) home(a, b uint64, n int) (int32, bool) {
	tag := wordTag(b, n)
	s := bytestr.Pair(w.slots, shortIndex(a, tag)>>(w.shift&63)*2)
	return int32(s[1] >> 40), s[0]^a|(s[1]^tag)<<24 == 0
}

// tableSize is the number of slots of a wordTable part of room slots at
// least, and its shift.
func tableSize(room int) (int, uint) {
	size := 1 << max(4, bits.Len(uint(max(room, 1)-1)))
	return size, uint(64 - bits.TrailingZeros(uint(size)))
}

// newWordTable returns an empty table of room slots at least, and
// longRoom for keys of more than shortWord bytes.
func newWordTable(room, longRoom int) wordTable {
	size, shift := tableSize(room)
	slots, mem := le.Huge[uint64](2 * size)
	longSize, longShift := tableSize(longRoom)
	return wordTable{slots: slots, shift: shift, mask: uint64(size - 1), mem: mem,
		long: make([]uint64, 3*longSize), longShift: longShift, longMask: uint64(longSize - 1)}
}

// insert adds k (1 to 16 bytes, not in the table; an id of at most
// maxWordID when k is of at most shortWord bytes).
func (w *wordTable) insert(k string, id int32) {
	a, b := keyOf(k)
	w.n++
	if len(k) > shortWord {
		i := wordIndex(a, b, len(k)) >> w.longShift
		for w.long[3*i+2] != 0 {
			i = (i + 1) & w.longMask
		}
		w.long[3*i], w.long[3*i+1], w.long[3*i+2] = a, b, uint64(len(k)+1)|uint64(uint32(id))<<32
		return
	}
	tag := wordTag(b, len(k))
	i := shortIndex(a, tag) >> w.shift
	for w.slots[2*i+1] != 0 {
		i = (i + 1) & w.mask
	}
	w.slots[2*i], w.slots[2*i+1] = a, tag|uint64(id)<<40
}

// buildWords fills m.words from the vocabulary and selfBPE (empty for a
// character-level model, whose words are not raw bytes).
func (m *bpeModel) buildWords() {
	var keep []int32
	long := 0
	if !m.charLevel {
		m.vocab.all(func(k string, id int32) bool {
			if len(k) > 0 && len(k) <= 16 && (m.ignoreMerges || m.selfBPE != nil && m.selfBPE[id]) {
				if len(k) > shortWord {
					long++
				} else if id > maxWordID {
					return true // not in the table: BPE gives it
				}
				keep = append(keep, id)
			}
			return true
		})
	}
	slices.Sort(keep) // id order: see wordTable
	short := len(keep) - long
	m.words = newWordTable(short+short*2/3+1, long+long*2/3+1) // load factor at most 3/5
	for _, id := range keep {
		m.words.insert(m.vocab.key(uint32(id)), id)
	}
}

// checkWordSlots returns the number of filled slots of a word table's
// slots, the largest id in them and whether a filled one has a key length
// outside 1 to shortWord.
func checkWordSlots(slots []uint64) (filled int, maxID uint32, bad bool) {
	var b uint64
	for i := 0; i+1 < len(slots); i += 2 {
		v := slots[i+1]
		full := (v | -v) >> 63
		filled += int(full)
		l := uint32(v>>32) & 0xff
		b |= uint64(l-2) / shortWord & full // l < 2 or l > shortWord+1 (uint32 wraps)
		maxID = max(maxID, uint32(v>>40))
	}
	return filled, maxID, b != 0
}

// checkLongWordSlots is checkWordSlots of a word table's long slots: keys
// of shortWord+1 to 16 bytes.
func checkLongWordSlots(slots []uint64) (filled int, maxID uint32, bad bool) {
	var b uint64
	for i := 0; i+2 < len(slots); i += 3 {
		v := slots[i+2]
		full := (v | -v) >> 63
		filled += int(full)
		l := uint32(v)
		b |= uint64(l-shortWord-2) >> 2 & full // l < 14 or l > 17 (uint32 wraps)
		maxID = max(maxID, uint32(v>>32))
	}
	return filled, maxID, b != 0
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
